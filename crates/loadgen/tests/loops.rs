//! The closed and open loops against a tiny in-process RESP server: every request is
//! answered, counted once, and the open loop keeps its rate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use txcache_loadgen::dist::Size;
use txcache_loadgen::protocol::Protocol;
use txcache_loadgen::workload::{KeyDist, Workload};
use txcache_loadgen::{closed, open};
use txcache_resp::{BytesMut, Limits, RequestDecoder};

/// A server that answers `GET` with a 3-byte value and everything else with `+OK`.
fn fake_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream));
        }
    });
    address
}

fn serve(mut stream: TcpStream) {
    let (mut input, mut decoder, limits) =
        (BytesMut::new(), RequestDecoder::new(), Limits::DEFAULT);
    let mut chunk = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = stream.read(&mut chunk) {
        input.extend_from_slice(&chunk[..n]);
        let mut replies = Vec::new();
        while let Ok(Some(request)) = decoder.decode(&mut input, &limits) {
            let reply: &[u8] = if request[0].as_ref() == b"GET" {
                b"$3\r\nabc\r\n"
            } else {
                b"+OK\r\n"
            };
            replies.extend_from_slice(reply);
        }
        if stream.write_all(&replies).is_err() {
            return;
        }
    }
}

fn workload() -> Arc<Workload> {
    Arc::new(Workload::new(
        Protocol::Resp,
        1000,
        KeyDist::Uniform,
        Size::Fixed(16),
        Size::Fixed(100),
        0.9,
        1,
    ))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn preload_stores_every_key_and_the_closed_loop_counts_every_reply() {
    let address = fake_server();
    let runtime = runtime();
    runtime
        .block_on(closed::flush(address, Protocol::Resp))
        .expect("flush");
    let stored = runtime
        .block_on(closed::preload(address, workload(), 4, 1))
        .expect("preload");
    assert_eq!(stored, 1000);
    let plan = closed::ClosedLoop {
        connections: 4,
        depth: 16,
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(300),
        max_requests: 1_000_000,
    };
    let outcome = runtime
        .block_on(closed::run(address, workload(), plan, 1))
        .expect("run");
    let measured = outcome.latency.count();
    assert!(measured > 1000, "{measured}");
    assert!(outcome.requests > measured, "warm-up requests count too");
    assert_eq!(outcome.requests % 16, 0, "whole batches only");
    assert_eq!(outcome.gets + outcome.sets, measured);
    assert_eq!(outcome.hits, outcome.gets);
    assert_eq!(outcome.errors, 0);
}

#[test]
fn the_closed_loop_stops_at_its_request_budget() {
    let address = fake_server();
    let plan = closed::ClosedLoop {
        connections: 2,
        depth: 10,
        warmup: Duration::ZERO,
        duration: Duration::from_secs(30),
        max_requests: 200,
    };
    let outcome = runtime()
        .block_on(closed::run(address, workload(), plan, 1))
        .expect("run");
    assert_eq!(outcome.requests, 200);
}

#[test]
fn the_open_loop_keeps_its_rate_and_answers_everything() {
    let address = fake_server();
    let plan = open::OpenLoop {
        connections: 3,
        rate: 5_000.0,
        warmup: Duration::from_millis(100),
        duration: Duration::from_millis(600),
    };
    let outcome = open::run(address, workload(), plan, 1).expect("run");
    let measured = outcome.latency.count() as f64;
    // Poisson arrivals: 3,000 expected, standard deviation ≈ 55.
    assert!((2_700.0..3_300.0).contains(&measured), "{measured}");
    assert_eq!(outcome.unanswered, 0);
    assert_eq!(outcome.errors, 0);
    assert_eq!(outcome.gets + outcome.sets, outcome.latency.count());
}
