//! A minimal HTTP responder for Prometheus: `GET /metrics` (and `HEAD`, and any query string,
//! which is ignored) and nothing else.
//!
//! One response per connection, then close. A request is read until its headers end, at most
//! [`MAX_REQUEST`] bytes and [`READ_TIMEOUT`] long; its body, if it claims one, is never read.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The most of a request read: enough for any scraper's headers.
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long a client may take to send its headers.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more are closed unanswered (a scraper needs one).
pub const MAX_CONNECTIONS: usize = 64;

/// Serves `GET /metrics` forever, answering with what `render` returns at each request.
pub async fn serve<F>(listener: TcpListener, render: F)
where
    F: Fn() -> String + Send + Sync + 'static,
{
    let render = Arc::new(render);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let accept_failures = crate::log::Throttle::new(Duration::from_secs(60));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    continue; // dropping the stream closes it
                };
                let render = Arc::clone(&render);
                tokio::spawn(async move {
                    respond(stream, render.as_ref()).await;
                    drop(slot);
                });
            }
            Err(error) => {
                // Out of descriptors, most likely: wait rather than spin, and say so once a
                // minute rather than at every retry.
                if let Some(failures_not_logged) = accept_failures.admit() {
                    tracing::warn!(%error, failures_not_logged,
                        "metrics endpoint: accept failed (out of open files? raise the limit: ulimit -n, or LimitNOFILE= under systemd)");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn respond<F: Fn() -> String>(mut stream: TcpStream, render: &F) {
    let Ok(Some(request)) = tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await else {
        return;
    };
    let response = match request {
        Head::Complete(head) => match metrics_request(&head) {
            Some(method) => {
                let body = render();
                let header = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                // HEAD gets GET's headers, Content-Length included, and no body.
                match method {
                    Method::Get => header + &body,
                    Method::Head => header,
                }
            }
            None => plain("404 Not Found", "only GET /metrics here\n"),
        },
        Head::TooLarge => plain("431 Request Header Fields Too Large", "request too large\n"),
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The two methods answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Head,
}

/// The method of a request for `/metrics` (query string allowed: scrapers and probes add
/// one), or `None` for any other request.
fn metrics_request(head: &[u8]) -> Option<Method> {
    let line = head.split(|&b| b == b'\r').next()?;
    let mut parts = line.split(|&b| b == b' ');
    let method = match parts.next()? {
        b"GET" => Method::Get,
        b"HEAD" => Method::Head,
        _ => return None,
    };
    let target = parts.next()?;
    let path = target.split(|&b| b == b'?').next()?;
    (path == b"/metrics").then_some(method)
}

fn plain(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// What arrived of a request.
enum Head {
    /// Everything up to the blank line ending the headers.
    Complete(Vec<u8>),
    /// [`MAX_REQUEST`] bytes without the end of the headers.
    TooLarge,
}

/// Reads up to the end of the headers; `None` when the client leaves first. The buffer grows
/// only with bytes received, never with what a request claims.
async fn read_head(stream: &mut TcpStream) -> Option<Head> {
    let mut request = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if request.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(Head::Complete(request));
        }
        if request.len() >= MAX_REQUEST {
            return Some(Head::TooLarge);
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    async fn start() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, || "demo_up 1\n".to_owned()));
        address
    }

    async fn exchange(address: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn get_metrics_is_answered_with_the_rendering() {
        let address = start().await;
        let response = exchange(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("Content-Length: 10\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\ndemo_up 1\n"), "{response}");
    }

    #[tokio::test]
    async fn a_query_string_is_ignored_and_head_gets_the_headers_only() {
        let address = start().await;
        let response = exchange(address, b"GET /metrics?x=1 HTTP/1.1\r\n\r\n").await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\ndemo_up 1\n"), "{response}");
        let response = exchange(address, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("Content-Length: 10\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\n"), "{response}");
    }

    #[tokio::test]
    async fn anything_else_is_not_found() {
        let address = start().await;
        for request in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"POST /metrics HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n",
            b"GET /metricsx HTTP/1.1\r\n\r\n",
            b"GET /metricsx?a HTTP/1.1\r\n\r\n",
            b"HEAD / HTTP/1.1\r\n\r\n",
        ] {
            let response = exchange(address, request).await;
            assert!(response.starts_with("HTTP/1.1 404 "), "{response}");
            assert!(!response.contains("demo_up"), "{response}");
        }
    }

    #[tokio::test]
    async fn headers_without_an_end_are_cut_off() {
        let address = start().await;
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        request.resize(MAX_REQUEST, b'a');
        let response = exchange(address, &request).await;
        assert!(response.starts_with("HTTP/1.1 431 "), "{response}");
    }
}
