//! What the real-binary tests share: a `txcached` on a free port, and raw RESP requests.

#![allow(dead_code)] // each test crate uses its own part of it

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub const TXCACHED: &str = env!("CARGO_BIN_EXE_txcached");

/// A running `txcached` whose log lines are kept, killed on drop.
pub struct Node {
    pub child: Child,
    pub address: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Node {
    /// Starts `command` (txcached, perhaps through a shell) and waits for its address.
    pub fn start(command: &mut Command) -> Node {
        let mut child = command
            .stderr(Stdio::piped())
            .spawn()
            .expect("txcached starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found, address) = std::sync::mpsc::channel();
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some((_, rest)) = line.split_once("address=") {
                    let _ = found.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                }
                kept.lock().expect("log lock").push(line);
            }
        });
        let address = address
            .recv_timeout(Duration::from_secs(10))
            .expect("txcached logs its address");
        Node {
            child,
            address,
            log,
        }
    }

    /// `txcached --port 0 args…`.
    pub fn with(args: &[&str]) -> Node {
        Node::start(Command::new(TXCACHED).args(["--port", "0"]).args(args))
    }

    /// A client connection, reads bounded by 5 s.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.address).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout set");
        stream
    }

    /// The log lines containing `text`, once `count` of them arrived (or 5 s passed).
    pub fn lines_with(&self, text: &str, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let lines: Vec<String> = (self.log.lock().expect("log lock").iter())
                .filter(|line| line.contains(text))
                .cloned()
                .collect();
            if lines.len() >= count || Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `parts` as one RESP request.
pub fn command(parts: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n{part}\r\n", part.len()).as_bytes());
    }
    out
}
