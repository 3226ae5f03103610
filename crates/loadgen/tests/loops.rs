//! The closed and open loops against a tiny in-process RESP server: every request is
//! answered, counted once, and the open loop keeps its rate; with txcached's versioned
//! commands, on a runtime of eight threads, every store carries a timestamp no other store
//! of the run or its preload carries.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use txcache_loadgen::dist::Size;
use txcache_loadgen::protocol::Protocol;
use txcache_loadgen::workload::{KeyDist, Workload};
use txcache_loadgen::{closed, open};
use txcache_resp::{BytesMut, Limits, RequestDecoder};

/// Every `TXSET`'s `lo` and `hi`, as a fake server received them.
type Stored = Arc<Mutex<Vec<(u64, u64)>>>;

/// A server that answers `GET` with a 3-byte value and everything else with `+OK`.
fn fake_server() -> SocketAddr {
    fake_versioned_server().0
}

/// [`fake_server`] that also answers txcached's versioned commands as txcached does: `TXGET`
/// with a hit (value, interval, open flag), `TXSET` with `inserted` and its interval; and
/// records every `TXSET`'s timestamps.
fn fake_versioned_server() -> (SocketAddr, Stored) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let stored = Stored::default();
    let recorded = Arc::clone(&stored);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let stored = Arc::clone(&recorded);
            thread::spawn(move || serve(stream, &stored));
        }
    });
    (address, stored)
}

fn serve(mut stream: TcpStream, stored: &Mutex<Vec<(u64, u64)>>) {
    let (mut input, mut decoder, limits) =
        (BytesMut::new(), RequestDecoder::new(), Limits::DEFAULT);
    let mut chunk = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = stream.read(&mut chunk) {
        input.extend_from_slice(&chunk[..n]);
        let mut replies = Vec::new();
        while let Ok(Some(request)) = decoder.decode(&mut input, &limits) {
            let timestamp = |i: usize| -> u64 {
                let text = std::str::from_utf8(&request[i]).expect("UTF-8");
                text.parse().expect("a timestamp")
            };
            match request[0].as_ref() {
                b"GET" => replies.extend_from_slice(b"$3\r\nabc\r\n"),
                b"TXGET" => replies.extend_from_slice(b"*4\r\n$3\r\nabc\r\n:1\r\n:2\r\n:0\r\n"),
                b"TXSET" => {
                    let (lo, hi) = (timestamp(3), timestamp(4));
                    stored.lock().expect("not poisoned").push((lo, hi));
                    let reply = format!("*3\r\n$8\r\ninserted\r\n:{lo}\r\n:{hi}\r\n");
                    replies.extend_from_slice(reply.as_bytes());
                }
                _ => replies.extend_from_slice(b"+OK\r\n"),
            }
        }
        if stream.write_all(&replies).is_err() {
            return;
        }
    }
}

fn workload() -> Arc<Workload> {
    workload_of(Protocol::Resp)
}

fn workload_of(protocol: Protocol) -> Arc<Workload> {
    Arc::new(Workload::new(
        protocol,
        1000,
        KeyDist::Uniform,
        Size::Fixed(16),
        Size::Fixed(100),
        0.9,
        1,
    ))
}

fn runtime() -> tokio::runtime::Runtime {
    runtime_of(1)
}

fn runtime_of(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
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

#[test]
fn versioned_loops_on_eight_threads_count_every_reply_and_never_repeat_a_timestamp() {
    let (address, stored) = fake_versioned_server();
    let runtime = runtime_of(8);
    let workload = workload_of(Protocol::Versioned);
    runtime
        .block_on(closed::flush(address, Protocol::Versioned))
        .expect("flush");
    let preloaded = runtime
        .block_on(closed::preload(address, Arc::clone(&workload), 8, 1))
        .expect("preload");
    assert_eq!(preloaded, 1000);
    // Short runs and long, pipelined and not, one batch per connection or many: a run whose
    // connections did nothing measured must report too.
    for (depth, warmup, duration, max_requests) in [
        (16, 50, 300, 1_000_000),
        (1, 0, 200, 1_000_000),
        (64, 0, 100, 1_000_000),
        (16, 0, 300, 7),
        (16, 300, 1, 1_000_000),
    ] {
        let plan = closed::ClosedLoop {
            connections: 8,
            depth,
            warmup: Duration::from_millis(warmup),
            duration: Duration::from_millis(duration),
            max_requests,
        };
        let outcome = runtime
            .block_on(closed::run(address, Arc::clone(&workload), plan, 1))
            .expect("run");
        assert_eq!(outcome.requests % depth as u64, 0, "whole batches only");
        assert_eq!(outcome.gets + outcome.sets, outcome.latency.count());
        assert_eq!((outcome.hits, outcome.errors), (outcome.gets, 0));
        let text = txcache_loadgen::report::results(&outcome, plan.duration).render();
        assert!(text.starts_with(r#"{"ops_per_sec": "#), "{text}");
        // Each run's connections store the same versions again, as separate invocations do:
        // their stores are checked against the preload's, one run at a time.
        let run = stored.lock().expect("not poisoned").split_off(1000);
        assert_all_new(&stored, run);
    }
    let plan = open::OpenLoop {
        connections: 8,
        rate: 4_000.0,
        warmup: Duration::from_millis(50),
        duration: Duration::from_millis(300),
    };
    let outcome = open::run(address, workload, plan, 1).expect("open loop");
    assert_eq!((outcome.unanswered, outcome.errors), (0, 0));
    assert_eq!(outcome.gets + outcome.sets, outcome.latency.count());
    let run = stored.lock().expect("not poisoned").split_off(1000);
    assert_all_new(&stored, run);
}

/// Every store of `run` has a one-timestamp interval that neither another store of the run
/// nor one of the preload (`stored`) has.
fn assert_all_new(stored: &Mutex<Vec<(u64, u64)>>, run: Vec<(u64, u64)>) {
    assert!(run.iter().all(|&(lo, hi)| hi == lo + 1));
    let mut all = [stored.lock().expect("not poisoned").clone(), run].concat();
    all.sort_unstable();
    let stores = all.len();
    all.dedup();
    assert_eq!(all.len(), stores, "a timestamp stored twice");
}

#[test]
fn a_plan_without_connections_or_with_too_many_is_refused() {
    let address = fake_server();
    for connections in [0, txcache_loadgen::workload::MAX_CONNECTIONS + 1] {
        let plan = closed::ClosedLoop {
            connections,
            depth: 1,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(10),
            max_requests: 10,
        };
        assert!(runtime()
            .block_on(closed::run(address, workload(), plan, 1))
            .is_err());
        let plan = open::OpenLoop {
            connections,
            rate: 100.0,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(10),
        };
        assert!(open::run(address, workload(), plan, 1).is_err());
    }
    assert!(runtime()
        .block_on(closed::preload(address, workload(), 0, 1))
        .is_err());
}
