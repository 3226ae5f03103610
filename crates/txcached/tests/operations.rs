//! What an operator sees of the real binary: refused settings, the open-file limit, and log
//! lines that name the client and do not flood.

mod common;

use common::{command, Node, TXCACHED};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn reply(stream: &mut TcpStream, request: &[u8]) -> String {
    stream.write_all(request).expect("sends");
    let mut reply = [0; 256];
    let read = stream.read(&mut reply).expect("replies");
    String::from_utf8_lossy(&reply[..read]).into_owned()
}

/// Runs txcached expecting it to refuse to start.
fn refused(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = Command::new(TXCACHED)
        .args(["--port", "0"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("txcached runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    output
}

#[test]
fn a_log_typo_stops_the_start_and_an_empty_setting_means_info() {
    let output = refused(&["--log", "warnn"], &[]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("\"warnn\" is neither a level"),
        "{message}"
    );
    assert!(
        message.contains("error, warn, info, debug, trace"),
        "{message}"
    );
    assert!(message.contains("txcached, txcache_store"), "{message}");
    let node = Node::start(
        Command::new(TXCACHED)
            .args(["--port", "0"])
            .env("TXCACHED_LOG", ""),
    );
    assert_eq!(node.lines_with("txcached listening", 1).len(), 1);
}

#[test]
fn useless_limits_stop_the_start_naming_the_minimum() {
    for args in [
        &["--max-memory", "100"][..],
        &["--max-memory", "0"],
        &["--max-clients", "0"],
        &["--shards", "0"],
    ] {
        let output = refused(args, &[]);
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.starts_with("txcached: "), "{args:?}: {message}");
        assert!(message.contains(args[0]), "{args:?}: {message}");
    }
}

#[test]
fn the_open_file_limit_is_raised_for_max_clients() {
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(4)?.parse().ok()
        })
        .unwrap_or(0);
    if hard < 2000 {
        eprintln!("skipped: the hard open-file limit ({hard}) is too low to see a raise");
        return;
    }
    // The node under a soft limit of 256, as a shell with `ulimit -Sn 256` would start it.
    let node = Node::start(Command::new("sh").args([
        "-c",
        &format!("ulimit -Sn 256 && exec {TXCACHED} --port 0 --max-clients 1000"),
    ]));
    let raised = node.lines_with("raised the open-file limit", 1);
    assert_eq!(raised.len(), 1, "{:?}", node.log.lock());
    assert!(raised[0].contains("from=256 to=1128"), "{}", raised[0]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", node.child.id()))
        .expect("the node's limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files"));
    assert!(line.is_some_and(|l| l.contains(" 1128 ")), "{limits}");
}

#[test]
fn out_of_open_files_new_clients_are_refused_not_left_waiting() {
    // A hard limit of 64 descriptors: far below what --max-clients asks.
    let node = Node::start(Command::new("sh").args([
        "-c",
        &format!("ulimit -n 64 && exec {TXCACHED} --port 0 --max-clients 1000 --threads 1"),
    ]));
    let (mut served, mut refused) = (Vec::new(), 0);
    for _ in 0..80 {
        let mut stream = node.connect();
        let answer = reply(&mut stream, &command(&["PING"])); // panics if left waiting
        if answer == "+PONG\r\n" {
            served.push(stream); // held: its descriptor stays taken
        } else {
            assert!(answer.contains("out of open files"), "{answer}");
            refused += 1;
        }
    }
    assert!(refused > 0 && !served.is_empty(), "{} served", served.len());
    drop(served);
    let answer = (0..50)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            reply(&mut node.connect(), &command(&["PING"]))
        })
        .find(|answer| answer == "+PONG\r\n");
    assert!(answer.is_some(), "served again once descriptors are free");
    assert_eq!(node.lines_with("accept failed", 1).len(), 1);
}

#[test]
fn refused_connections_are_logged_once_a_minute_with_the_address() {
    let node = Node::with(&["--max-clients", "1"]);
    let mut held = node.connect();
    // The first connection has the only slot once it is answered.
    assert_eq!(reply(&mut held, &command(&["PING"])), "+PONG\r\n");
    for _ in 0..5 {
        let mut refused = node.connect();
        let mut text = String::new();
        let _ = refused.read_to_string(&mut text);
        assert!(
            text.starts_with("-ERR max number of clients reached"),
            "{text}"
        );
    }
    let lines = node.lines_with("refused a connection", 1);
    std::thread::sleep(Duration::from_millis(200));
    let lines_later = node.lines_with("refused a connection", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines_later.len(), 1, "{lines_later:?}");
    assert!(lines[0].contains("peer=127.0.0.1:"), "{}", lines[0]);
}

#[test]
fn the_third_wrong_password_closes_the_connection() {
    let node = Node::with(&["--password", "right"]);
    let mut stream = node.connect();
    for _ in 0..3 {
        let refused = reply(&mut stream, &command(&["AUTH", "guess"]));
        assert!(refused.starts_with("-WRONGPASS"), "{refused}");
    }
    let mut rest = Vec::new();
    assert_eq!(stream.read_to_end(&mut rest).expect("closed, not reset"), 0);
}

#[test]
fn failed_auths_are_logged_once_a_minute_with_the_address() {
    let node = Node::with(&["--password", "right"]);
    let mut stream = node.connect();
    for _ in 0..3 {
        let answer = reply(&mut stream, &command(&["AUTH", "wrong"]));
        assert!(answer.starts_with("-WRONGPASS"), "{answer}");
    }
    let lines = node.lines_with("AUTH failed", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("peer=127.0.0.1:"), "{}", lines[0]);
}

#[test]
fn before_auth_a_client_cannot_make_the_node_buffer_a_large_request() {
    let node = Node::with(&["--password", "right"]);
    let mut stream = node.connect();
    let answer = reply(&mut stream, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$60000000\r\n");
    assert!(
        answer.starts_with(
            "-ERR Protocol error: bulk length 60000000 exceeds the limit of 16384 before AUTH"
        ),
        "{answer}"
    );
    // Authenticated, the same request is within the limits.
    let mut stream = node.connect();
    assert_eq!(reply(&mut stream, &command(&["AUTH", "right"])), "+OK\r\n");
    let value = "v".repeat(100_000);
    assert_eq!(
        reply(&mut stream, &command(&["SET", "k", &value])),
        "+OK\r\n"
    );
}

#[test]
fn a_new_nodes_first_reset_is_not_a_warning() {
    let node = Node::with(&[]);
    let mut stream = node.connect();
    assert_eq!(
        reply(&mut stream, &command(&["TXRESET", "100", "5"])),
        "+OK\r\n"
    );
    let first = node.lines_with("TXRESET", 1);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].contains("INFO") && first[0].contains("first stream"),
        "{}",
        first[0]
    );
    let stored = reply(
        &mut stream,
        &command(&["TXSET", "k", "v", "100", "OPEN", "SNAPSHOT", "100"]),
    );
    assert!(stored.contains("inserted"), "{stored}");
    assert_eq!(
        reply(&mut stream, &command(&["TXRESET", "200", "6"])),
        "+OK\r\n"
    );
    let both = node.lines_with("TXRESET", 2);
    assert!(both.len() == 2 && both[1].contains("WARN"), "{both:?}");
}
