//! The Redis commands as Redis clients see them, byte for byte, in RESP2 and RESP3: options
//! and errors, expiry on a stopped clock, transactions, and the shards a multi-key command or
//! an `EXEC` holds (every command runs inside a transaction on exactly the shards it locked;
//! no other client sees a transaction or an `MSET` half done).

use super::{execute_parts, Context, InMulti, Session, COMMANDS};
use crate::config::Config;
use crate::node::Node;
use bytes::BytesMut;
use clap::Parser;
use std::sync::Arc;

/// A connection to `node` with the stream rights (the agent's), sending one command at a
/// time and returning the reply's bytes; the other command modules' tests use it too.
pub(super) struct Client<'a> {
    node: &'a Node,
    pub(super) session: Session,
}

impl<'a> Client<'a> {
    pub(super) fn new(node: &'a Node) -> Self {
        let session = Session {
            authenticated: true,
            streams: true,
            ..Session::default()
        };
        Client { node, session }
    }

    pub(super) fn send(&mut self, parts: &[&str]) -> String {
        let mut out = BytesMut::new();
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        execute_parts(
            &parts,
            &mut Context::new(self.node, &mut self.session),
            &mut out,
        );
        String::from_utf8_lossy(&out).into_owned()
    }
}

pub(super) fn node() -> Node {
    Node::new(Config::parse_from(["txcached", "--shards", "4"]))
}

/// A time far from the epoch, to see deadlines counted from it.
const NOW: u64 = 1_700_000_000_000;

#[test]
fn set_options_reply_as_redis() {
    let node = node();
    let mut c = Client::new(&node);
    assert_eq!(c.send(&["SET", "k", "1", "XX"]), "$-1\r\n");
    assert_eq!(c.send(&["SET", "k", "1", "NX"]), "+OK\r\n");
    assert_eq!(c.send(&["SET", "k", "2", "NX"]), "$-1\r\n");
    assert_eq!(c.send(&["SET", "k", "2", "XX", "GET"]), "$1\r\n1\r\n");
    assert_eq!(c.send(&["SET", "k", "3", "NX", "GET"]), "$1\r\n2\r\n");
    assert_eq!(c.send(&["SET", "new", "x", "GET"]), "$-1\r\n");
    assert_eq!(c.send(&["GET", "k"]), "$1\r\n2\r\n");
    let syntax = "-ERR syntax error in 'set' command\r\n";
    assert_eq!(c.send(&["SET", "k", "v", "NX", "XX"]), syntax);
    assert_eq!(c.send(&["SET", "k", "v", "EX", "1", "KEEPTTL"]), syntax);
    assert_eq!(c.send(&["SET", "k", "v", "EX"]), syntax);
    let invalid = "-ERR invalid expire time in 'set' command\r\n";
    assert_eq!(c.send(&["SET", "k", "v", "EX", "0"]), invalid);
    assert_eq!(c.send(&["SET", "k", "v", "PX", "-5"]), invalid);
    let not_integer = "-ERR value is not an integer or out of range\r\n";
    assert_eq!(c.send(&["SET", "k", "v", "EX", "ten"]), not_integer);
    assert_eq!(
        c.send(&["GET", "k"]),
        "$1\r\n2\r\n",
        "refused SETs change nothing"
    );
    c.send(&["TXSET", "versioned", "v", "1", "2"]);
    assert_eq!(
        c.send(&["SET", "versioned", "p", "GET"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(c.send(&["SET", "versioned", "p", "NX"]), "$-1\r\n");
    assert_eq!(c.send(&["SET", "versioned", "p", "XX"]), "+OK\r\n");
}

#[test]
fn expiry_follows_the_clock() {
    let node = node();
    node.freeze_clock(NOW);
    let mut c = Client::new(&node);
    assert_eq!(c.send(&["SET", "ex", "v", "EX", "10"]), "+OK\r\n");
    assert_eq!(c.send(&["SET", "px", "v", "PX", "1500"]), "+OK\r\n");
    let at = (NOW / 1000 + 20).to_string();
    assert_eq!(c.send(&["SET", "exat", "v", "EXAT", &at]), "+OK\r\n");
    let pxat = (NOW + 2500).to_string();
    assert_eq!(c.send(&["SET", "pxat", "v", "PXAT", &pxat]), "+OK\r\n");
    assert_eq!(c.send(&["SET", "past", "v", "PXAT", "1"]), "+OK\r\n");
    assert_eq!(c.send(&["SET", "forever", "v"]), "+OK\r\n");
    assert_eq!(c.send(&["TTL", "ex"]), ":10\r\n");
    assert_eq!(c.send(&["PTTL", "px"]), ":1500\r\n");
    assert_eq!(
        c.send(&["TTL", "px"]),
        ":2\r\n",
        "rounded to the nearest second"
    );
    assert_eq!(c.send(&["TTL", "exat"]), ":20\r\n");
    assert_eq!(c.send(&["PTTL", "pxat"]), ":2500\r\n");
    assert_eq!(c.send(&["TTL", "past"]), ":-2\r\n");
    assert_eq!(c.send(&["TTL", "forever"]), ":-1\r\n");
    assert_eq!(c.send(&["TTL", "missing"]), ":-2\r\n");
    assert_eq!(c.send(&["EXISTS", "ex", "px", "past", "ex"]), ":3\r\n");
    node.freeze_clock(NOW + 1500);
    assert_eq!(
        c.send(&["GET", "px"]),
        "$1\r\nv\r\n",
        "alive at its deadline"
    );
    node.freeze_clock(NOW + 1501);
    assert_eq!(c.send(&["GET", "px"]), "$-1\r\n");
    assert_eq!(
        c.send(&["MGET", "px", "ex", "pxat"]),
        "*3\r\n$-1\r\n$1\r\nv\r\n$1\r\nv\r\n"
    );
    node.freeze_clock(NOW + 3000);
    assert_eq!(
        c.send(&["DEL", "pxat", "ex"]),
        ":1\r\n",
        "an expired key is not deleted"
    );
    // KEEPTTL keeps it; a plain SET drops it; INCR keeps it.
    assert_eq!(c.send(&["SET", "exat", "w", "KEEPTTL"]), "+OK\r\n");
    assert_eq!(c.send(&["TTL", "exat"]), ":17\r\n");
    assert_eq!(c.send(&["SET", "n", "1", "EX", "100"]), "+OK\r\n");
    assert_eq!(c.send(&["INCR", "n"]), ":2\r\n");
    assert_eq!(c.send(&["TTL", "n"]), ":100\r\n");
    assert_eq!(c.send(&["SET", "n", "5"]), "+OK\r\n");
    assert_eq!(c.send(&["TTL", "n"]), ":-1\r\n");
    // The sweep finds what nobody reads.
    assert_eq!(c.send(&["SET", "swept", "v", "PX", "1"]), "+OK\r\n");
    node.freeze_clock(NOW + 4000);
    node.shards.expire_due(node.now_ms(), 100);
    assert_eq!(c.send(&["DBSIZE"]), ":3\r\n");
}

#[test]
fn expire_persist_and_their_errors() {
    let node = node();
    node.freeze_clock(NOW);
    let mut c = Client::new(&node);
    c.send(&["SET", "k", "v"]);
    assert_eq!(c.send(&["EXPIRE", "missing", "10"]), ":0\r\n");
    assert_eq!(c.send(&["EXPIRE", "k", "10", "XX"]), ":0\r\n");
    assert_eq!(c.send(&["EXPIRE", "k", "10", "GT"]), ":0\r\n");
    assert_eq!(c.send(&["EXPIRE", "k", "10", "NX"]), ":1\r\n");
    assert_eq!(c.send(&["EXPIRE", "k", "20", "NX"]), ":0\r\n");
    assert_eq!(c.send(&["PEXPIRE", "k", "5000", "LT"]), ":1\r\n");
    assert_eq!(c.send(&["PTTL", "k"]), ":5000\r\n");
    assert_eq!(c.send(&["EXPIRE", "k", "20", "XX", "GT"]), ":1\r\n");
    assert_eq!(c.send(&["TTL", "k"]), ":20\r\n");
    assert_eq!(c.send(&["PERSIST", "k"]), ":1\r\n");
    assert_eq!(c.send(&["PERSIST", "k"]), ":0\r\n");
    assert_eq!(c.send(&["TTL", "k"]), ":-1\r\n");
    assert_eq!(
        c.send(&["EXPIRE", "k", "-1"]),
        ":1\r\n",
        "a time in the past deletes"
    );
    assert_eq!(c.send(&["EXISTS", "k"]), ":0\r\n");
    assert_eq!(
        c.send(&["EXPIRE", "k", "1", "NX", "XX"]),
        "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"
    );
    assert_eq!(
        c.send(&["EXPIRE", "k", "1", "GT", "LT"]),
        "-ERR GT and LT options at the same time are not compatible\r\n"
    );
    assert_eq!(
        c.send(&["EXPIRE", "k", "1", "EX"]),
        "-ERR Unsupported option EX\r\n"
    );
    assert_eq!(
        c.send(&["EXPIRE", "k", "1.5"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        c.send(&["EXPIRE", "k", "9223372036854775807"]),
        "-ERR invalid expire time in 'expire' command\r\n"
    );
    assert_eq!(
        c.send(&["PEXPIRE", "k", "9223372036854775807"]),
        "-ERR invalid expire time in 'pexpire' command\r\n"
    );
    c.send(&["TXSET", "versioned", "v", "1", "2"]);
    assert_eq!(
        c.send(&["EXPIRE", "versioned", "10"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(c.send(&["TTL", "versioned"]), ":-1\r\n");
    assert_eq!(c.send(&["PERSIST", "versioned"]), ":0\r\n");
}

#[test]
fn counters_follow_redis() {
    let node = node();
    let mut c = Client::new(&node);
    assert_eq!(c.send(&["INCR", "n"]), ":1\r\n");
    assert_eq!(c.send(&["INCRBY", "n", "41"]), ":42\r\n");
    assert_eq!(c.send(&["DECR", "n"]), ":41\r\n");
    assert_eq!(c.send(&["DECRBY", "n", "-9"]), ":50\r\n");
    assert_eq!(c.send(&["GET", "n"]), "$2\r\n50\r\n");
    assert_eq!(c.send(&["DECRBY", "fresh", "3"]), ":-3\r\n");
    let not_integer = "-ERR value is not an integer or out of range\r\n";
    c.send(&["SET", "text", "abc"]);
    assert_eq!(c.send(&["INCR", "text"]), not_integer);
    assert_eq!(c.send(&["INCRBY", "n", "1.5"]), not_integer);
    assert_eq!(c.send(&["GET", "text"]), "$3\r\nabc\r\n");
    c.send(&["SET", "max", "9223372036854775807"]);
    assert_eq!(
        c.send(&["INCR", "max"]),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(
        c.send(&["DECRBY", "n", "-9223372036854775808"]),
        "-ERR decrement would overflow\r\n"
    );
    c.send(&["TXSET", "versioned", "v", "1", "2"]);
    assert_eq!(
        c.send(&["INCR", "versioned"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(
        c.send(&["INCRBY", "n"]),
        "-ERR wrong number of arguments for 'incrby' command\r\n"
    );
}

#[test]
fn several_keys_at_once() {
    let node = node();
    let mut c = Client::new(&node);
    assert_eq!(c.send(&["MSET", "a", "1", "b", "2", "c", "3"]), "+OK\r\n");
    c.send(&["TXSET", "versioned", "v", "1", "2"]);
    assert_eq!(
        c.send(&["MGET", "a", "missing", "versioned", "c"]),
        "*4\r\n$1\r\n1\r\n$-1\r\n$-1\r\n$1\r\n3\r\n",
        "MGET answers a key of another kind with a null"
    );
    assert_eq!(
        c.send(&["MSET", "a", "1", "b"]),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(c.send(&["EXISTS", "a", "a", "versioned", "x"]), ":3\r\n");
    assert_eq!(c.send(&["DEL", "a", "b", "versioned", "x"]), ":3\r\n");
    assert_eq!(c.send(&["DBSIZE"]), ":1\r\n");
}

#[test]
fn flushdb_clears_plain_keys_and_flushall_everything() {
    let node = node();
    let mut c = Client::new(&node);
    c.send(&["MSET", "a", "1", "b", "2"]);
    c.send(&["SET", "brief", "1", "EX", "100"]);
    c.send(&["TXSET", "versioned", "v", "1", "2"]);
    assert_eq!(c.send(&["FLUSHDB"]), "+OK\r\n");
    assert_eq!(c.send(&["DBSIZE"]), ":1\r\n");
    assert!(c
        .send(&["TXGET", "versioned", "1", "1"])
        .starts_with("*4\r\n$1\r\nv"));
    assert_eq!(c.send(&["FLUSHDB", "ASYNC"]), "+OK\r\n");
    assert_eq!(
        c.send(&["FLUSHDB", "NOW"]),
        "-ERR syntax error in 'flushdb' command\r\n"
    );
    assert_eq!(c.send(&["FLUSHALL", "SYNC"]), "+OK\r\n");
    assert_eq!(c.send(&["DBSIZE"]), ":0\r\n");
}

#[test]
fn resp3_replies_use_resp3_types() {
    let node = node();
    let mut c = Client::new(&node);
    let hello = c.send(&["HELLO", "3"]);
    assert!(
        hello.starts_with("%7\r\n$6\r\nserver\r\n$8\r\ntxcached\r\n"),
        "{hello}"
    );
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");
    assert!(hello.ends_with("$7\r\nmodules\r\n*0\r\n"), "{hello}");
    assert_eq!(c.send(&["GET", "missing"]), "_\r\n");
    assert_eq!(c.send(&["SET", "k", "v", "NX"]), "+OK\r\n");
    assert_eq!(c.send(&["SET", "k", "v", "NX"]), "_\r\n");
    assert_eq!(c.send(&["MGET", "k", "x"]), "*2\r\n$1\r\nv\r\n_\r\n");
    assert_eq!(c.send(&["CLIENT", "GETNAME"]), "_\r\n");
    assert_eq!(
        c.send(&["CONFIG", "GET", "maxclients"]),
        "%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n"
    );
    assert_eq!(c.send(&["CONFIG", "GET", "nosuch"]), "%0\r\n");
    assert!(c.send(&["INFO", "server"]).starts_with("="));
    assert_eq!(c.send(&["INFO", "nosuch"]), "=4\r\ntxt:\r\n");
    // The versioned commands speak RESP3 too: their nulls are RESP3 nulls.
    assert_eq!(
        c.send(&["TXGET", "v", "1", "2"]),
        "*2\r\n_\r\n$10\r\ncompulsory\r\n"
    );
    assert_eq!(
        c.send(&["TXSET", "v", "x", "0", "OPEN", "SNAPSHOT", "5"]),
        "*3\r\n$8\r\ninserted\r\n:5\r\n_\r\n"
    );
    assert_eq!(c.send(&["TXSTATUS"]), "*3\r\n:0\r\n_\r\n:0\r\n");
    assert!(c.send(&["HELLO", "2"]).starts_with("*14\r\n"));
    assert_eq!(c.send(&["GET", "missing"]), "$-1\r\n");
}

#[test]
fn hello_refuses_other_versions_and_options_as_redis() {
    let node = node();
    let mut c = Client::new(&node);
    assert_eq!(
        c.send(&["HELLO", "4"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        c.send(&["HELLO", "1"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        c.send(&["HELLO", "three"]),
        "-ERR Protocol version is not an integer or out of range\r\n"
    );
    assert_eq!(
        c.send(&["HELLO", "3", "AUTH", "default"]),
        "-ERR Syntax error in HELLO option 'AUTH'\r\n"
    );
    assert_eq!(
        c.session.protocol,
        super::Protocol::Resp2,
        "nothing changed"
    );
    let named = c.send(&["HELLO", "3", "SETNAME", "me"]);
    assert!(named.starts_with("%7\r\n"));
    assert_eq!(c.send(&["CLIENT", "GETNAME"]), "$2\r\nme\r\n");
    let same = c.send(&["HELLO"]);
    assert!(
        same.starts_with("%7\r\n"),
        "HELLO without a version keeps RESP3"
    );
}

#[test]
fn transactions_queue_and_run_together() {
    let node = node();
    let mut c = Client::new(&node);
    assert_eq!(c.send(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c.send(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(c.send(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.send(&["MULTI"]), "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(c.send(&["SET", "a", "1"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["INCR", "a"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["INCR", "b",]), "+QUEUED\r\n");
    assert_eq!(c.send(&["SET", "text", "x"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["INCR", "text"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["MGET", "a", "b"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["DBSIZE"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["GET", "a"]), "+QUEUED\r\n");
    assert_eq!(c.session.transaction.as_ref().map(|t| t.dirty), Some(false));
    assert_eq!(
        c.send(&["EXEC"]),
        "*8\r\n+OK\r\n:2\r\n:1\r\n+OK\r\n-ERR value is not an integer or out of range\r\n\
         *2\r\n$1\r\n2\r\n$1\r\n1\r\n:3\r\n$1\r\n2\r\n",
        "an error in one command is its reply; the others run"
    );
    assert_eq!(c.send(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c.send(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.send(&["EXEC"]), "*0\r\n");
    // DISCARD drops the queue.
    c.send(&["MULTI"]);
    c.send(&["SET", "a", "discarded"]);
    assert_eq!(c.send(&["DISCARD"]), "+OK\r\n");
    assert_eq!(c.send(&["GET", "a"]), "$1\r\n2\r\n");
    let stats = crate::metrics::info_text(&crate::metrics::collect(&node), Some("stats"));
    assert!(
        stats.contains("transactions:2\r\ntransactions_aborted:0\r\n"),
        "{stats}"
    );
}

#[test]
fn an_error_while_queuing_discards_the_transaction() {
    let node = node();
    let mut c = Client::new(&node);
    let abort = "-EXECABORT Transaction discarded because of previous errors.\r\n";
    for bad in [
        &["NOSUCH", "x"][..],
        &["GET"],
        &["GET", "a", "b"],
        &["TXHEARTBEAT", "5", "1"],
        &["HELLO", "3"],
        &["AUTH", "pw"],
    ] {
        c.send(&["MULTI"]);
        c.send(&["SET", "a", "changed"]);
        let reply = c.send(bad);
        assert!(reply.starts_with("-ERR"), "{bad:?}: {reply}");
        assert_eq!(c.send(&["SET", "b", "changed"]), "+QUEUED\r\n");
        assert_eq!(c.send(&["EXEC"]), abort, "{bad:?}");
        assert_eq!(
            c.send(&["EXISTS", "a", "b"]),
            ":0\r\n",
            "{bad:?}: nothing ran"
        );
    }
    assert_eq!(
        {
            c.send(&["MULTI"]);
            c.send(&["TXINVALIDATE", "5", "1", "t"])
        },
        "-ERR Command not allowed inside a transaction (TXINVALIDATE must be sent outside MULTI)\r\n"
    );
    c.send(&["DISCARD"]);
    // WATCH is refused, and inside MULTI does not abort (as in Redis).
    assert!(c
        .send(&["WATCH", "a"])
        .starts_with("-ERR WATCH is not supported"));
    c.send(&["MULTI"]);
    assert_eq!(
        c.send(&["WATCH", "a"]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(c.send(&["UNWATCH"]), "+QUEUED\r\n");
    assert_eq!(c.send(&["EXEC"]), "*1\r\n+OK\r\n");
    let stats = crate::metrics::info_text(&crate::metrics::collect(&node), Some("stats"));
    assert!(
        stats.contains("transactions:1\r\ntransactions_aborted:6\r\n"),
        "{stats}"
    );
}

#[test]
fn a_quit_inside_multi_closes_at_once() {
    let node = node();
    let mut c = Client::new(&node);
    c.send(&["MULTI"]);
    assert_eq!(c.send(&["QUIT"]), "+OK\r\n");
    assert!(c.session.closing);
}

/// One invocation of every command a transaction may queue, with keys spread over the
/// shards: each runs inside `EXEC` on the shards its table entry made `EXEC` lock (a shard
/// it reached without a lock would fail a debug assertion) and is no arity error.
#[test]
fn every_queueable_command_runs_inside_exec_on_the_shards_it_locked() {
    let node = node();
    let mut c = Client::new(&node);
    c.send(&["TXHEARTBEAT", "10", "1"]);
    let keys: Vec<String> = (0..16).map(|i| format!("key{i}")).collect();
    let key = |i: usize| keys[i].as_str();
    let invocations: Vec<Vec<&str>> = vec![
        vec!["TXGET", "vkey", "1", "20", "WITHTAGS"],
        vec!["TXGET", "lkey", "1", "20", "LEASE", "100"],
        vec!["TXRELEASE", "lkey"],
        vec!["GET", key(0)],
        vec![
            "TXSET", "vkey", "v", "0", "OPEN", "SNAPSHOT", "10", "TAGS", "s.t",
        ],
        vec!["SET", key(1), "v", "EX", "100", "GET"],
        vec!["MGET", key(0), key(1), key(2), key(3), key(4), key(5)],
        vec!["MSET", key(6), "1", key(7), "2", key(8), "3", key(9), "4"],
        vec!["DEL", key(10), key(11), key(12)],
        vec!["EXISTS", key(6), key(7), key(8), key(13)],
        vec!["EXPIRE", key(6), "100"],
        vec!["PEXPIRE", key(7), "100000", "NX"],
        vec!["TTL", key(6)],
        vec!["PTTL", key(7)],
        vec!["PERSIST", key(6)],
        vec!["INCR", key(14)],
        vec!["DECR", key(14)],
        vec!["INCRBY", key(15), "5"],
        vec!["DECRBY", key(15), "2"],
        vec!["UNWATCH"],
        vec!["PING"],
        vec!["ECHO", "hi"],
        vec!["TXSTATUS"],
        vec!["TXINTERVAL", "5", "TAGS", "s.t"],
        vec!["DBSIZE"],
        vec!["INFO", "memory"],
        vec!["CONFIG", "SET", "maxmemory", "64mb"],
        vec!["CONFIG", "GET", "maxmemory"],
        vec!["CLIENT", "SETNAME", "tx"],
        vec!["SELECT", "0"],
        vec!["COMMAND"],
        vec!["FLUSHDB"],
        vec!["FLUSHALL"],
    ];
    let queueable: Vec<&str> = COMMANDS
        .iter()
        .filter(|spec| spec.in_multi == InMulti::Queue)
        .map(|spec| spec.name)
        .collect();
    let tried: Vec<&str> = invocations.iter().map(|parts| parts[0]).collect();
    for name in &queueable {
        assert!(tried.contains(name), "{name} is not tried in a transaction");
    }
    c.send(&["MULTI"]);
    for parts in &invocations {
        assert_eq!(c.send(parts), "+QUEUED\r\n", "{parts:?}");
    }
    let reply = c.send(&["EXEC"]);
    assert!(
        reply.starts_with(&format!("*{}\r\n", invocations.len())),
        "{reply}"
    );
    assert!(!reply.contains("-ERR"), "{reply}");
    // The same commands outside a transaction (multi-key ones lock their shards together).
    for parts in &invocations {
        let reply = c.send(parts);
        assert!(!reply.starts_with("-ERR"), "{parts:?}: {reply}");
    }
}

/// Writers change two keys (on different shards) together, by `MSET` and by a transaction;
/// readers read them together, by `MGET` and by a transaction, and never see them differ.
/// Meanwhile stream messages and whole-node commands run: nothing deadlocks.
#[test]
fn other_clients_never_see_a_transaction_half_done() {
    let node = Arc::new(node());
    let (a, b) = pair_on_two_shards(&node);
    Client::new(&node).send(&["MSET", &a, "0", &b, "0"]);
    let rounds = 2_000;
    std::thread::scope(|scope| {
        let (a, b) = (a.as_str(), b.as_str());
        let writer = |by_transaction: bool| {
            let node = &node;
            move || {
                let mut c = Client::new(node);
                for i in 0..rounds {
                    let value = i.to_string();
                    if by_transaction {
                        c.send(&["MULTI"]);
                        c.send(&["SET", a, &value]);
                        c.send(&["SET", b, &value]);
                        c.send(&["EXEC"]);
                    } else {
                        c.send(&["MSET", b, &value, a, &value]);
                    }
                }
            }
        };
        let reader = |by_transaction: bool| {
            let node = &node;
            move || {
                let mut c = Client::new(node);
                for _ in 0..rounds {
                    let reply = if by_transaction {
                        c.send(&["MULTI"]);
                        c.send(&["GET", b]);
                        c.send(&["GET", a]);
                        c.send(&["EXEC"])
                    } else {
                        c.send(&["MGET", a, b])
                    };
                    let values: Vec<&str> = reply.split("\r\n").skip(2).step_by(2).collect();
                    assert_eq!(values[0], values[1], "{reply}");
                }
            }
        };
        scope.spawn(writer(true));
        scope.spawn(writer(false));
        scope.spawn(reader(true));
        scope.spawn(reader(false));
        scope.spawn(|| {
            let mut c = Client::new(&node);
            for ts in 1..=rounds {
                c.send(&["TXHEARTBEAT", &ts.to_string(), "1"]);
                c.send(&["DBSIZE"]);
                c.send(&["MULTI"]);
                c.send(&["INFO"]);
                c.send(&["FLUSHDB"]);
                c.send(&["MSET", a, "x", b, "x"]);
                c.send(&["EXEC"]);
            }
        });
    });
}

/// Two keys that live on different shards.
fn pair_on_two_shards(node: &Node) -> (String, String) {
    let first = "pair-a".to_owned();
    let shard = node.shards.index_of(first.as_bytes());
    let second = (0..)
        .map(|i| format!("pair-b{i}"))
        .find(|key| node.shards.index_of(key.as_bytes()) != shard)
        .unwrap_or_default();
    (first, second)
}
