//! The commands a node answers: one module per command (or per small family), a table that
//! names them, and the dispatcher.
//!
//! Each command module has a `run(args, context, out)` that parses its arguments with
//! [`Args`], applies the command and appends exactly one reply to `out`.

mod args;
mod error;

mod auth;
mod client;
mod config;
mod dbsize;
mod del;
mod exists;
mod flushall;
mod get;
mod hello;
mod info;
mod ping;
mod set;
mod txget;
mod txheartbeat;
mod txinterval;
mod txinvalidate;
mod txorigin;
mod txreset;
mod txset;
mod txstatus;

pub use args::{printable, Args};
pub use error::CommandError;

use crate::node::Node;
use bytes::{Bytes, BytesMut};
use txcache_resp::{encode, RequestArgs};

/// One connection's state between commands.
#[derive(Debug, Default)]
pub struct Session {
    /// The connection's number, unique per node run (`CLIENT ID`).
    pub id: u64,
    /// Whether `AUTH` succeeded (or no password is configured).
    pub authenticated: bool,
    /// Whether stream commands may run: authenticated with the stream password, or
    /// authenticated when none is configured.
    pub streams: bool,
    /// Set by `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// Set by `QUIT`: close after this reply.
    pub closing: bool,
}

/// What a command may touch.
pub struct Context<'a> {
    /// The node's shared state.
    pub node: &'a Node,
    /// The calling connection's state.
    pub session: &'a mut Session,
}

type Run = fn(&mut Args<'_>, &mut Context<'_>, &mut BytesMut) -> Result<(), CommandError>;

/// A command the node answers.
pub struct CommandSpec {
    /// Upper-case name, as documented in docs/protocol.md.
    pub name: &'static str,
    /// Whether the command may run before `AUTH` when a password is set.
    pub before_auth: bool,
    /// Whether the command is part of the invalidation stream (see [`Session::streams`]).
    pub stream: bool,
    run: Run,
}

const fn spec(name: &'static str, run: Run) -> CommandSpec {
    CommandSpec {
        name,
        before_auth: false,
        stream: false,
        run,
    }
}

const fn stream(name: &'static str, run: Run) -> CommandSpec {
    CommandSpec {
        stream: true,
        ..spec(name, run)
    }
}

/// Every command, most frequent first (the dispatcher scans in order).
pub static COMMANDS: &[CommandSpec] = &[
    spec("TXGET", txget::run),
    spec("GET", get::run),
    spec("TXSET", txset::run),
    spec("SET", set::run),
    stream("TXINVALIDATE", txinvalidate::run),
    stream("TXHEARTBEAT", txheartbeat::run),
    spec("DEL", del::run),
    spec("EXISTS", exists::run),
    spec("PING", ping::run_ping),
    spec("ECHO", ping::run_echo),
    stream("TXRESET", txreset::run_reset),
    stream("TXREWIND", txreset::run_rewind),
    stream("TXORIGIN", txorigin::run),
    spec("TXSTATUS", txstatus::run),
    spec("TXINTERVAL", txinterval::run),
    spec("DBSIZE", dbsize::run),
    spec("FLUSHALL", flushall::run),
    spec("INFO", info::run),
    spec("CONFIG", config::run),
    spec("CLIENT", client::run_client),
    spec("SELECT", client::run_select),
    spec("COMMAND", client::run_command),
    CommandSpec {
        name: "AUTH",
        before_auth: true,
        stream: false,
        run: auth::run,
    },
    CommandSpec {
        name: "HELLO",
        before_auth: true,
        stream: false,
        run: hello::run,
    },
    CommandSpec {
        name: "QUIT",
        before_auth: true,
        stream: false,
        run: client::run_quit,
    },
];

/// Runs one request (name and arguments) and appends its reply to `out`.
pub fn execute(mut request: RequestArgs<'_>, context: &mut Context<'_>, out: &mut BytesMut) {
    let Some(name) = request.next() else { return };
    let result = match find(name) {
        None => Err(CommandError::Unknown(printable(name))),
        Some(spec) if !spec.before_auth && !context.session.authenticated => {
            Err(CommandError::NoAuth)
        }
        Some(spec) if spec.stream && !context.session.streams => {
            Err(CommandError::NoStreamPermission(spec.name))
        }
        Some(spec) => (spec.run)(&mut Args::new(spec.name, request), context, out),
    };
    context.node.metrics.count_command(result.is_ok());
    if let Err(error) = result {
        error.encode(out);
    }
}

fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|spec| same_letters(spec.name.as_bytes(), name))
}

/// Whether `name` is `letters` in any case, for `letters` made of ASCII letters only. For
/// those, setting bit 5 (the case bit) folds case exactly: a byte agrees with a letter on it
/// only if it is that letter, upper or lower case. Three instructions a byte, where
/// `eq_ignore_ascii_case` takes ten; commands are matched on every request.
fn same_letters(letters: &[u8], name: &[u8]) -> bool {
    letters.len() == name.len() && letters.iter().zip(name).all(|(l, n)| l | 0x20 == n | 0x20)
}

/// Appends `+OK`.
pub fn ok(out: &mut BytesMut) {
    encode::simple(out, "OK");
}

/// Runs `parts` as one request, encoded and decoded as a connection would (for tests).
#[cfg(test)]
pub fn execute_parts(parts: &[&[u8]], context: &mut Context<'_>, out: &mut BytesMut) {
    let mut wire = BytesMut::new();
    encode::request(&mut wire, parts);
    let mut decoder = txcache_resp::RequestDecoder::new();
    let limits = txcache_resp::Limits::default();
    let request = decoder.peek(&wire, &limits).expect("a valid request");
    execute(request.expect("a complete request").args(), context, out);
}

#[cfg(test)]
mod tests {
    use super::{find, COMMANDS};

    #[test]
    fn names_are_upper_case_letters_found_in_any_case_and_only_so() {
        for spec in COMMANDS {
            let name = spec.name.as_bytes();
            assert!(name.iter().all(u8::is_ascii_uppercase), "{}", spec.name);
            assert_eq!(find(name).map(|s| s.name), Some(spec.name));
            assert_eq!(
                find(&name.to_ascii_lowercase()).map(|s| s.name),
                Some(spec.name)
            );
            // Every byte that is not the letter in either case, at every position.
            for at in 0..name.len() {
                for byte in 0..=u8::MAX {
                    let mut other = name.to_vec();
                    other[at] = byte;
                    let expected = other.eq_ignore_ascii_case(name);
                    let found = find(&other).is_some_and(|s| s.name == spec.name);
                    assert_eq!(found, expected, "{:?} as {}", other, spec.name);
                }
            }
        }
        assert!(find(b"").is_none() && find(b"TXGETX").is_none() && find(b"TXGE").is_none());
    }

    const PROTOCOL_DOC: &str = include_str!("../../../../docs/protocol.md");

    #[test]
    fn protocol_doc_and_dispatcher_name_the_same_commands() {
        let documented: Vec<&str> = PROTOCOL_DOC
            .lines()
            .filter_map(|line| line.strip_prefix("### "))
            .collect();
        for spec in COMMANDS {
            assert!(
                documented.contains(&spec.name),
                "{} is not in docs/protocol.md",
                spec.name
            );
        }
        for name in &documented {
            assert!(
                COMMANDS.iter().any(|spec| spec.name == *name),
                "docs/protocol.md documents {name}, which the dispatcher does not know"
            );
        }
    }
}
