//! The real binary, on a free port, answering raw RESP with exact bytes.

mod common;

use common::{command, Node};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends `request` and reads exactly `expected.len()` bytes back.
fn exchange(stream: &mut TcpStream, request: &[u8], expected: &[u8]) {
    stream.write_all(request).expect("sends");
    let mut reply = vec![0; expected.len()];
    stream.read_exact(&mut reply).expect("replies");
    assert_eq!(
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(request)
    );
}

#[test]
fn versioned_round_trip_has_exact_replies() {
    let node = Node::with(&["--max-memory", "16mb"]);
    let mut stream = node.connect();
    exchange(
        &mut stream,
        &command(&["TXHEARTBEAT", "100", "5"]),
        b":1\r\n",
    );
    exchange(
        &mut stream,
        &command(&[
            "TXSET", "k", "hello", "0", "OPEN", "SNAPSHOT", "100", "TAGS", "s.t:id=1",
        ]),
        b"*3\r\n$8\r\ninserted\r\n:100\r\n$-1\r\n",
    );
    exchange(
        &mut stream,
        &command(&["TXGET", "k", "90", "200", "WITHTAGS"]),
        b"*5\r\n$5\r\nhello\r\n:100\r\n:101\r\n:1\r\n*1\r\n$8\r\ns.t:id=1\r\n",
    );
    exchange(
        &mut stream,
        &command(&["TXINVALIDATE", "150", "6", "s.t"]),
        b":1\r\n",
    );
    exchange(
        &mut stream,
        &command(&["TXGET", "k", "90", "200"]),
        b"*4\r\n$5\r\nhello\r\n:100\r\n:150\r\n:0\r\n",
    );
    exchange(
        &mut stream,
        &command(&["TXGET", "k", "150", "200"]),
        b"*2\r\n$-1\r\n$9\r\nstaleness\r\n",
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let node = Node::with(&[]);
    let mut stream = node.connect();
    let mut batch = Vec::new();
    for part in [
        command(&["SET", "a", "1"]),
        command(&["GET", "a"]),
        command(&["NOPE"]),
        command(&["EXISTS", "a", "b"]),
        command(&["DEL", "a"]),
        command(&["GET", "a"]),
    ] {
        batch.extend(part);
    }
    exchange(
        &mut stream,
        &batch,
        b"+OK\r\n$1\r\n1\r\n-ERR unknown command 'NOPE'\r\n:1\r\n:1\r\n$-1\r\n",
    );
}

#[test]
fn a_pipelined_transaction_on_resp3_has_exact_replies() {
    // What redis-py 8 sends for a transactional pipeline: HELLO 3 on connecting, then MULTI,
    // the commands and EXEC in one write.
    let node = Node::with(&[]);
    let mut stream = node.connect();
    stream.write_all(&command(&["HELLO", "3"])).expect("sends");
    let mut hello = [0u8; 4];
    stream.read_exact(&mut hello).expect("replies");
    assert_eq!(&hello, b"%7\r\n");
    // The rest of the map, whose id and version vary: up to its last field.
    let mut rest = Vec::new();
    while !rest.ends_with(b"$7\r\nmodules\r\n*0\r\n") {
        let mut byte = [0u8];
        stream.read_exact(&mut byte).expect("replies");
        rest.push(byte[0]);
    }
    assert!(rest.starts_with(b"$6\r\nserver\r\n$8\r\ntxcached\r\n"));
    let mut batch = Vec::new();
    for part in [
        command(&["MULTI"]),
        command(&["MSET", "a", "1", "b", "2"]),
        command(&["EXPIRE", "a", "300"]),
        command(&["INCRBY", "b", "5"]),
        command(&["GET", "missing"]),
        command(&["EXEC"]),
        command(&["TTL", "a"]),
    ] {
        batch.extend(part);
    }
    exchange(
        &mut stream,
        &batch,
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+OK\r\n:1\r\n:7\r\n_\r\n:300\r\n",
    );
}

#[test]
fn the_sweep_removes_expired_keys_nobody_reads() {
    let node = Node::with(&[]);
    let mut stream = node.connect();
    exchange(
        &mut stream,
        &command(&["SET", "brief", "v", "PX", "20"]),
        b"+OK\r\n",
    );
    exchange(&mut stream, &command(&["SET", "kept", "v"]), b"+OK\r\n");
    exchange(&mut stream, &command(&["DBSIZE"]), b":2\r\n");
    // DBSIZE counts an expired key until it is removed; the sweep runs ten times a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        stream.write_all(&command(&["DBSIZE"])).expect("sends");
        let mut reply = [0u8; 4];
        stream.read_exact(&mut reply).expect("replies");
        if &reply == b":1\r\n" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the expired key stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    exchange(&mut stream, &command(&["GET", "kept"]), b"$1\r\nv\r\n");
}

#[test]
fn protocol_error_closes_only_that_connection() {
    let node = Node::with(&[]);
    let mut healthy = node.connect();
    let mut hostile = node.connect();
    hostile.write_all(b"*1\r\n$99999999999\r\n").expect("sends");
    let mut reply = Vec::new();
    hostile.read_to_end(&mut reply).expect("closed by the node");
    assert!(reply.starts_with(b"-ERR Protocol error"), "{reply:?}");
    exchange(&mut healthy, &command(&["PING"]), b"+PONG\r\n");
}

#[test]
fn txinterval_has_exact_replies() {
    let node = Node::with(&["--max-memory", "16mb"]);
    let mut stream = node.connect();
    // No message yet (N = 0): above N it is open from s, valid at s alone; at N, only at s.
    exchange(
        &mut stream,
        &command(&["TXINTERVAL", "5"]),
        b"*3\r\n:5\r\n:6\r\n:1\r\n",
    );
    exchange(
        &mut stream,
        &command(&["TXINTERVAL", "0", "TAGS", "s.t:id=1"]),
        b"*3\r\n:0\r\n:1\r\n:0\r\n",
    );
    for (request, reply) in [
        (&["TXHEARTBEAT", "100", "1"][..], &b":1\r\n"[..]),
        (&["TXINVALIDATE", "120", "2", "s.t:id=42"], b":1\r\n"),
        (&["TXINVALIDATE", "200", "3", "s.t:id=7"], b":1\r\n"),
        (&["TXINVALIDATE", "260", "4", "s.t:id=9"], b":1\r\n"),
        (&["TXHEARTBEAT", "300", "5"], b":1\r\n"),
    ] {
        exchange(&mut stream, &command(request), reply);
    }
    for (request, reply) in [
        // Open: valid through N.
        (
            &["TXINTERVAL", "250", "TAGS", "s.t:id=42"][..],
            &b"*3\r\n:120\r\n:301\r\n:1\r\n"[..],
        ),
        // The wildcard matches every row: bounded by the first later commit.
        (
            &["TXINTERVAL", "250", "TAGS", "s.t"],
            b"*3\r\n:200\r\n:260\r\n:0\r\n",
        ),
        // No earlier matching commit: from the horizon.
        (
            &["TXINTERVAL", "150", "tags", "s.t:id=7", "s.u:id=1"],
            b"*3\r\n:100\r\n:200\r\n:0\r\n",
        ),
        // Below the horizon, above N, and without tags.
        (
            &["TXINTERVAL", "50", "TAGS", "s.t:id=42"],
            b"*3\r\n:50\r\n:51\r\n:0\r\n",
        ),
        (
            &["TXINTERVAL", "400", "TAGS", "s.t:id=42"],
            b"*3\r\n:400\r\n:401\r\n:1\r\n",
        ),
        (&["TXINTERVAL", "250"], b"*3\r\n:100\r\n:301\r\n:1\r\n"),
        // TXSET stores the same database interval.
        (
            &[
                "TXSET", "k", "v", "0", "OPEN", "SNAPSHOT", "250", "TAGS", "s.t",
            ],
            b"*3\r\n$8\r\ninserted\r\n:200\r\n:260\r\n",
        ),
    ] {
        exchange(&mut stream, &command(request), reply);
    }
    for (request, reply) in [
        (
            &["TXINTERVAL", "x"][..],
            &b"-ERR TXINTERVAL: s must be a timestamp (0..=9223372036854775807), got 'x'\r\n"[..],
        ),
        (
            &["TXINTERVAL", "250", "TAGS", ":id=1"],
            b"-ERR TXINTERVAL: invalidation tag \":id=1\" has an empty table name (':id=1')\r\n",
        ),
        (
            &["TXINTERVAL", "250", "s.t"],
            b"-ERR syntax error in 'txinterval' command\r\n",
        ),
        (
            &["TXINTERVAL"],
            b"-ERR wrong number of arguments for 'txinterval' command\r\n",
        ),
    ] {
        exchange(&mut stream, &command(request), reply);
    }
}

#[test]
fn txinvalidate_with_the_global_tag_bounds_every_open_entry() {
    let node = Node::with(&["--max-memory", "16mb", "--shards", "4"]);
    let mut stream = node.connect();
    exchange(
        &mut stream,
        &command(&["TXHEARTBEAT", "100", "5"]),
        b":1\r\n",
    );
    // Keys on every shard, untagged (their queries read no table) and tagged.
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let tags: &[&str] = match i % 2 {
            0 => &[],
            _ => &["TAGS", "s.t:id=1"],
        };
        let request = [&["TXSET", key, "v", "0", "OPEN", "SNAPSHOT", "100"], tags].concat();
        exchange(
            &mut stream,
            &command(&request),
            b"*3\r\n$8\r\ninserted\r\n:100\r\n$-1\r\n",
        );
    }
    exchange(
        &mut stream,
        &command(&["TXINVALIDATE", "150", "6", "*"]),
        b":1\r\n",
    );
    for key in &keys {
        exchange(
            &mut stream,
            &command(&["TXGET", key, "90", "200"]),
            b"*4\r\n$1\r\nv\r\n:100\r\n:150\r\n:0\r\n",
        );
    }
    for (request, reply) in [
        // A repeat is a duplicate.
        (&["TXINVALIDATE", "150", "6", "*"][..], &b":0\r\n"[..]),
        // The history has it: it bounds results with no tags from either side.
        (&["TXINTERVAL", "120"], b"*3\r\n:100\r\n:150\r\n:0\r\n"),
        (&["TXINTERVAL", "150"], b"*3\r\n:150\r\n:151\r\n:1\r\n"),
        (
            &["TXSET", "late", "v", "0", "OPEN", "SNAPSHOT", "120"],
            b"*3\r\n$8\r\ninserted\r\n:100\r\n:150\r\n",
        ),
    ] {
        exchange(&mut stream, &command(request), reply);
    }
}
