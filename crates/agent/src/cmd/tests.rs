//! The dispatcher against docs/protocol.md, and each command's reply byte for byte (the
//! library decodes them in `python/txcache/_protocol.py`).

use super::{execute, find, Active, Endpoint, Role, Session, COMMANDS};
use crate::config::Membership;
use crate::database::DatabaseIdentity;
use crate::fanout::Fanout;
use crate::metrics::Sources;
use crate::pincushion::{Pin, PinSettings, PinSource, Pincushion};
use crate::stream_stats::StreamStats;
use crate::term::{Holder, Term};
use crate::tracker::StreamTracker;
use bytes::{Bytes, BytesMut};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use txcache_model::{Timestamp, WallClock};

const PROTOCOL_DOC: &str = include_str!("../../../../docs/protocol.md");

/// The commands the "Agent commands" section documents, in its order: each `#### ` heading
/// names one, or several separated by commas (`PING, AUTH, QUIT`).
fn documented_commands() -> Vec<&'static str> {
    let section = PROTOCOL_DOC
        .split("\n## Agent commands\n")
        .nth(1)
        .expect("docs/protocol.md has an \"Agent commands\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("#### "))
        .flat_map(|heading| heading.split(", "))
        .map(str::trim)
        .collect()
}

#[test]
fn protocol_doc_and_dispatcher_name_the_same_commands_in_the_same_order() {
    let dispatched: Vec<&str> = COMMANDS.iter().map(|spec| spec.name).collect();
    assert_eq!(documented_commands(), dispatched);
}

#[test]
fn names_are_upper_case_and_found_in_any_case() {
    for spec in COMMANDS {
        assert!(
            spec.name.bytes().all(|b| b.is_ascii_uppercase()),
            "{}",
            spec.name
        );
        let lower = spec.name.to_ascii_lowercase();
        assert_eq!(find(lower.as_bytes()).map(|s| s.name), Some(spec.name));
    }
    assert!(find(b"PINSX").is_none() && find(b"").is_none());
}

/// An endpoint over a tracker resuming at 100, no nodes, no standbys, and a pincushion whose
/// pinner never reaches a database (nothing here asks it for a fresh pin).
fn endpoint(password: Option<&str>) -> Endpoint {
    endpoint_with(password, &[], Membership::Static)
}

/// As [`endpoint`], delivering to `nodes` that come from `membership`.
fn endpoint_with(password: Option<&str>, nodes: &[&str], membership: Membership) -> Endpoint {
    endpoint_with_standbys(password, nodes, membership, &[])
}

/// As [`endpoint_with`], with a pincushion without a pinner per name in `standbys`.
fn endpoint_with_standbys(
    password: Option<&str>,
    nodes: &[&str],
    membership: Membership,
    standbys: &[&str],
) -> Endpoint {
    let tracker = Arc::new(StreamTracker::new(Timestamp(100), 0));
    let settings = PinSettings {
        pin_interval: Duration::from_secs(3600),
        max_staleness: Duration::from_secs(1),
        lease: Duration::from_secs(1),
        on_demand: false,
    };
    let dsn = "host=127.0.0.1 port=1 dbname=unreachable connect_timeout=1".to_owned();
    let primary = PinSource::Primary { fingerprints: None };
    let pincushion = Pincushion::start(dsn, settings, Arc::clone(&tracker), primary);
    let standby = |name: &&str| Pincushion::without_pinner(Arc::clone(&tracker), Some(name));
    let standbys: Vec<Arc<Pincushion>> = standbys.iter().map(standby).collect();
    let term = Arc::new(Term::unbounded());
    let nodes: Vec<String> = nodes.iter().map(|node| (*node).to_owned()).collect();
    let fanout = Fanout::new(&nodes, Timestamp(100), 10);
    let metrics = Sources {
        started: Instant::now(),
        clients: Arc::new(AtomicUsize::new(3)),
        stream: Arc::new(StreamStats::default()),
        tracker: Arc::clone(&tracker),
        fanout: Arc::clone(&fanout),
        pincushion: Arc::clone(&pincushion),
        standbys: standbys.clone(),
        term: Arc::clone(&term),
    };
    Endpoint {
        password: password.map(str::to_owned),
        role: Role::Active(Active {
            pincushion,
            standbys,
            tracker,
            database: DatabaseIdentity {
                system_identifier: "7301234567890123456".to_owned(),
                oid: 16384,
                name: "app".to_owned(),
            },
            nodes: fanout,
            membership,
            metrics: Arc::new(metrics),
            term,
        }),
    }
}

/// The active parts of an endpoint [`endpoint`] made.
fn parts(endpoint: &Endpoint) -> &Active {
    match &endpoint.role {
        Role::Active(active) => active,
        Role::Standby(_) => unreachable!("endpoint() makes an active endpoint"),
    }
}

/// The reply to `request` (space-separated words) on `session`.
async fn reply(endpoint: &Endpoint, session: &mut Session, request: &str) -> String {
    let request: Vec<Bytes> = request
        .split(' ')
        .map(|word| Bytes::from(word.to_owned()))
        .collect();
    let mut out = BytesMut::new();
    execute(&request, endpoint, session, &mut out).await;
    String::from_utf8(out.to_vec()).unwrap()
}

#[tokio::test]
async fn replies_to_the_commands_without_arguments() {
    let endpoint = endpoint(None);
    parts(&endpoint).tracker.catalog(
        Timestamp::ZERO,
        vec![(
            "public.items".to_owned(),
            vec!["id".to_owned(), "owner".to_owned()],
        )],
    );
    parts(&endpoint)
        .tracker
        .commit(Timestamp(500), 7, WallClock(1));
    parts(&endpoint).tracker.barrier(Timestamp(500));
    let session = &mut Session::new(&endpoint);
    assert_eq!(reply(&endpoint, session, "PING").await, "+PONG\r\n");
    assert_eq!(reply(&endpoint, session, "pins").await, "*0\r\n");
    assert_eq!(reply(&endpoint, session, "STANDBYPINS").await, "*0\r\n");
    assert_eq!(
        reply(&endpoint, session, "TAGCOLUMNS").await,
        "*1\r\n*2\r\n:0\r\n*1\r\n*2\r\n$12\r\npublic.items\r\n*2\r\n$2\r\nid\r\n$5\r\nowner\r\n"
    );
    let (barrier, decoded) = parts(&endpoint).tracker.schema_fence();
    assert_eq!(barrier, Timestamp(500));
    assert_eq!(
        reply(&endpoint, session, "BARRIER").await,
        format!("*2\r\n:500\r\n:{}\r\n", decoded.0)
    );
    assert_eq!(
        reply(&endpoint, session, "DATABASE").await,
        "*3\r\n$19\r\n7301234567890123456\r\n:16384\r\n$3\r\napp\r\n"
    );
}

#[tokio::test]
async fn status_is_one_bulk_string_of_field_lines() {
    let endpoint = endpoint(None);
    let session = &mut Session::new(&endpoint);
    let status = reply(&endpoint, session, "STATUS").await;
    let (header, body) = status.split_once("\r\n").unwrap();
    assert_eq!(header, format!("${}", body.len() - 2));
    assert!(
        body.starts_with("role:active\r\nuptime_in_seconds:0\r\nconnected_clients:3\r\n"),
        "{body}"
    );
}

/// A pin at `ts` whose snapshot id names it.
fn standby_pin(ts: u64) -> Pin {
    let mut pin = Pin::sample(ts, None, None);
    pin.snapshot_id = format!("id-{ts}");
    pin
}

/// `*5` of one standby pin [`standby_pin`] made.
fn standby_pin_reply(name: &str, ts: u64) -> String {
    let id = format!("id-{ts}");
    format!(
        "*5\r\n${}\r\n{name}\r\n:{ts}\r\n${}\r\n{id}\r\n:1700000000000000\r\n$8\r\n10:12:10\r\n",
        name.len(),
        id.len()
    )
}

#[tokio::test]
async fn standbypins_lists_each_standby_in_flag_order_its_pins_oldest_first() {
    let endpoint = endpoint_with_standbys(None, &[], Membership::Static, &["r2", "replica-1"]);
    let active = parts(&endpoint);
    active.standbys[0].push_for_test(standby_pin(300));
    active.standbys[0].push_for_test(standby_pin(400));
    active.standbys[1].push_for_test(standby_pin(350));
    let session = &mut Session::new(&endpoint);
    let expected = [
        standby_pin_reply("r2", 300),
        standby_pin_reply("r2", 400),
        standby_pin_reply("replica-1", 350),
    ];
    assert_eq!(
        reply(&endpoint, session, "STANDBYPINS").await,
        format!("*3\r\n{}", expected.concat())
    );
    // As PINS: none older than the newest barrier.
    active.tracker.barrier(Timestamp(360));
    assert_eq!(
        reply(&endpoint, session, "standbypins").await,
        format!("*1\r\n{}", standby_pin_reply("r2", 400))
    );
    assert_eq!(
        reply(&endpoint, session, "STANDBYPINS r2").await,
        "-ERR STANDBYPINS: used must be comma-separated commit points\r\n"
    );
}

#[tokio::test]
async fn standbypins_used_renews_the_standbys_pins_and_pins_used_the_primary_s_alone() {
    let endpoint = endpoint_with_standbys(None, &[], Membership::Static, &["r1"]);
    let standby = &parts(&endpoint).standbys[0];
    standby.push_for_test(standby_pin(300));
    standby.push_for_test(standby_pin(400));
    let used = || -> Vec<bool> {
        let pins = standby.pins();
        pins.iter().map(|pin| pin.last_used.is_some()).collect()
    };
    let session = &mut Session::new(&endpoint);
    // A primary pin at a standby pin's commit point is used by PINS: the standby's is not.
    assert_eq!(reply(&endpoint, session, "PINS 400,500").await, "*0\r\n");
    assert_eq!(used(), [false, false]);
    reply(&endpoint, session, "STANDBYPINS 400,500").await;
    assert_eq!(used(), [false, true]);
    // WANTED, after the commit points or alone, is demand: no pin is marked used by it.
    let listed = format!(
        "*2\r\n{}{}",
        standby_pin_reply("r1", 300),
        standby_pin_reply("r1", 400)
    );
    assert_eq!(
        reply(&endpoint, session, "STANDBYPINS 300 WANTED").await,
        listed
    );
    assert_eq!(
        reply(&endpoint, session, "STANDBYPINS WANTED").await,
        listed
    );
    assert_eq!(used(), [true, true]);
    assert_eq!(
        reply(&endpoint, session, "STANDBYPINS 300 SOON").await,
        "-ERR STANDBYPINS: the word after used must be WANTED\r\n"
    );
}

#[tokio::test]
async fn status_lists_each_standbys_pin_count_last() {
    let with = endpoint_with_standbys(None, &[], Membership::Static, &["a", "b.2"]);
    let active = parts(&with);
    active.standbys[0].push_for_test(standby_pin(300));
    active.standbys[0].push_for_test(standby_pin(400));
    let session = &mut Session::new(&with);
    let status = reply(&with, session, "STATUS").await;
    assert!(
        status.ends_with("\r\nmembership:static\r\nstandby_pins:a=2,b.2=0\r\n\r\n"),
        "{status}"
    );
    let without = endpoint(None);
    let none = reply(&without, session, "STATUS").await;
    assert!(none.ends_with("\r\nstandby_pins:\r\n\r\n"), "{none}");
}

#[tokio::test]
async fn nodes_lists_the_membership_in_its_order() {
    let nodes = ["b:6381", "rediss://a.example:6380"];
    let endpoint = endpoint_with(None, &nodes, Membership::Database);
    let session = &mut Session::new(&endpoint);
    assert_eq!(
        reply(&endpoint, session, "NODES").await,
        "*2\r\n$6\r\nb:6381\r\n$23\r\nrediss://a.example:6380\r\n"
    );
    let fanout = &parts(&endpoint).nodes;
    assert!(fanout.add_node(0, "a:6379") && fanout.remove_node("b:6381"));
    assert_eq!(
        reply(&endpoint, session, "nodes").await,
        "*2\r\n$6\r\na:6379\r\n$23\r\nrediss://a.example:6380\r\n"
    );
    assert!(fanout.remove_node("a:6379") && fanout.remove_node("rediss://a.example:6380"));
    assert_eq!(reply(&endpoint, session, "NODES").await, "*0\r\n");
    assert_eq!(
        reply(&endpoint, session, "NODES all").await,
        "-ERR unknown command or wrong arguments 'NODES'\r\n"
    );
}

#[tokio::test]
async fn status_names_the_membership_and_counts_its_nodes() {
    let database = endpoint_with(None, &["a:1", "b:2"], Membership::Database);
    let session = &mut Session::new(&database);
    let status = reply(&database, session, "STATUS").await;
    assert!(
        status.contains("\r\nnodes:2\r\nnodes_connected:0\r\n"),
        "{status}"
    );
    assert!(
        status.ends_with("\r\nmembership:database\r\nstandby_pins:\r\n\r\n"),
        "{status}"
    );
    let fixed = endpoint(None);
    let status = reply(&fixed, session, "STATUS").await;
    assert!(status.contains("\r\nnodes:0\r\n"), "{status}");
    assert!(
        status.ends_with("\r\nmembership:static\r\nstandby_pins:\r\n\r\n"),
        "{status}"
    );
}

#[tokio::test]
async fn commitlsn_answers_the_lsn_notdecoded_or_timeout() {
    let endpoint = endpoint(None);
    parts(&endpoint)
        .tracker
        .commit(Timestamp(500), 7, WallClock(1));
    let session = &mut Session::new(&endpoint);
    assert_eq!(reply(&endpoint, session, "COMMITLSN 7").await, ":500\r\n");
    // The low 32 bits of an xid8 name the transaction.
    let epoch_1 = (1u64 << 32) + 7;
    let request = format!("COMMITLSN {epoch_1} 10");
    assert_eq!(reply(&endpoint, session, &request).await, ":500\r\n");
    assert_eq!(
        reply(&endpoint, session, "COMMITLSN 8 60000 400").await,
        "-NOTDECODED the stream passed the position given without the commit: the transaction changed nothing it decodes\r\n"
    );
    assert_eq!(
        reply(&endpoint, session, "COMMITLSN 8 10").await,
        "-TIMEOUT the commit was not decoded in time (did the transaction write to a tracked table?)\r\n"
    );
    assert_eq!(
        reply(&endpoint, session, "COMMITLSN 8 ten").await,
        "-ERR COMMITLSN: timeout must be milliseconds\r\n"
    );
    assert_eq!(
        reply(&endpoint, session, "PINS 5,x").await,
        "-ERR PINS: used must be comma-separated commit points\r\n"
    );
}

#[tokio::test]
async fn unknown_commands_and_wrong_arguments_are_refused_alike() {
    let endpoint = endpoint(None);
    let session = &mut Session::new(&endpoint);
    for (request, name) in [
        ("nope", "NOPE"),
        ("PING hello", "PING"),
        ("PINS 1 2", "PINS"),
        ("COMMITLSN", "COMMITLSN"),
        ("commitlsn 1 2 3 4", "COMMITLSN"),
    ] {
        let expected = format!("-ERR unknown command or wrong arguments '{name}'\r\n");
        assert_eq!(
            reply(&endpoint, session, request).await,
            expected,
            "{request}"
        );
    }
}

#[tokio::test]
async fn before_auth_only_auth_and_quit_run() {
    let endpoint = endpoint(Some("secret"));
    let session = &mut Session::new(&endpoint);
    let noauth = "-NOAUTH Authentication required.\r\n";
    for request in ["PING", "PINS", "nope", "COMMITLSN x", "AUTH"] {
        assert_eq!(
            reply(&endpoint, session, request).await,
            noauth,
            "{request}"
        );
    }
    assert_eq!(
        reply(&endpoint, session, "AUTH wrong").await,
        "-WRONGPASS invalid username-password pair\r\n"
    );
    assert_eq!(
        reply(&endpoint, session, "AUTH default secret").await,
        "+OK\r\n"
    );
    assert_eq!(reply(&endpoint, session, "PING").await, "+PONG\r\n");
    assert_eq!(
        reply(&endpoint, session, "AUTH").await,
        "-ERR unknown command or wrong arguments 'AUTH'\r\n"
    );
    assert!(!session.closing);
    assert_eq!(reply(&endpoint, session, "QUIT now").await, "+OK\r\n");
    assert!(session.closing);
}

#[tokio::test]
async fn the_third_wrong_password_closes_the_connection() {
    let endpoint = endpoint(Some("secret"));
    let session = &mut Session::new(&endpoint);
    for attempt in 1..=3 {
        assert!(!session.closing, "attempt {attempt}");
        let refused = reply(&endpoint, session, "AUTH guess").await;
        assert!(refused.starts_with("-WRONGPASS"), "{refused}");
    }
    assert!(session.closing);
}

#[tokio::test]
async fn auth_without_a_configured_password_says_so() {
    let endpoint = endpoint(None);
    let session = &mut Session::new(&endpoint);
    assert_eq!(
        reply(&endpoint, session, "AUTH x").await,
        "-ERR AUTH: no password is configured (txcache-agent --password)\r\n"
    );
}

#[tokio::test]
async fn a_standby_answers_only_ping_auth_quit_and_status() {
    let holder = Arc::new(Holder::default());
    holder.set(Some(("127.0.0.1:6390 (pid 7)".to_owned(), 3)));
    let endpoint = Endpoint {
        password: None,
        role: Role::Standby(holder),
    };
    let session = &mut Session::new(&endpoint);
    assert_eq!(reply(&endpoint, session, "PING").await, "+PONG\r\n");
    let standby =
        "-STANDBY this agent is a standby (the active agent: 127.0.0.1:6390 (pid 7), epoch 3)\r\n";
    for request in [
        "PINS",
        "STANDBYPINS",
        "PIN",
        "TAGCOLUMNS",
        "BARRIER",
        "DATABASE",
        "NODES",
        "COMMITLSN 7",
    ] {
        assert_eq!(
            reply(&endpoint, session, request).await,
            standby,
            "{request}"
        );
    }
    let status = reply(&endpoint, session, "STATUS").await;
    assert!(
        status
            .ends_with("\r\nrole:standby\r\nactive_agent:127.0.0.1:6390 (pid 7), epoch 3\r\n\r\n"),
        "{status}"
    );
}

#[tokio::test]
async fn an_agent_whose_term_ran_out_answers_as_a_standby() {
    let endpoint = endpoint(None);
    parts(&endpoint).term.end();
    let session = &mut Session::new(&endpoint);
    assert_eq!(
        reply(&endpoint, session, "PINS").await,
        "-STANDBY this agent is a standby (its lease of epoch 0 was not renewed in time)\r\n"
    );
    assert!(reply(&endpoint, session, "STATUS")
        .await
        .contains("\r\nrole:standby\r\n"));
}
