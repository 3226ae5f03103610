//! A minimal HTTP responder for Prometheus: `GET /metrics` and nothing else.

use crate::metrics;
use crate::node::Node;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most of a request we read: enough for any scraper's headers.
const MAX_REQUEST: usize = 8 * 1024;

/// Serves the metrics endpoint forever.
pub async fn run(listener: TcpListener, node: Arc<Node>) {
    loop {
        if let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(respond(stream, Arc::clone(&node)));
        }
    }
}

async fn respond(mut stream: TcpStream, node: Arc<Node>) {
    let mut request = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
    let response = if request.starts_with(b"GET /metrics ") {
        let body = metrics::prometheus(&node);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\nConnection: close\r\n\r\nonly GET /metrics here".to_owned()
    };
    let _ = stream.write_all(response.as_bytes()).await;
}
