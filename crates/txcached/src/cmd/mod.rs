//! The commands a node answers: one module per command (or per small family), a table that
//! names them, and the dispatcher.
//!
//! Each command module has a `run(args, context, out)` that parses its arguments with
//! [`Args`], applies the command and appends exactly one reply to `out`. Commands reach the
//! shards through their [`Context`] ([`Context::with_shard`], [`Context::for_each_shard`]):
//! a transaction's `EXEC`, and a command naming several keys
//! ([`Context::with_keys_locked`]), lock those shards first and run on the locked stores, so
//! that no other client's command on them comes in between.

mod args;
mod error;
mod reply;
mod transaction;

mod auth;
mod client;
mod config;
mod dbsize;
mod del;
mod exists;
mod expire;
mod flushall;
mod get;
mod hello;
mod incr;
mod info;
mod mget;
mod mset;
mod multi;
mod persist;
mod ping;
mod set;
mod ttl;
mod txdatabase;
mod txepoch;
mod txget;
mod txheartbeat;
mod txinterval;
mod txinvalidate;
mod txorigin;
mod txrelease;
mod txreset;
mod txset;
mod txstatus;

pub use args::{printable, Args};
pub use error::CommandError;
pub use reply::Protocol;
pub use transaction::Transaction;

use crate::node::Node;
use crate::shards::LockedShards;
use bytes::{Bytes, BytesMut};
use parking_lot::RwLockReadGuard;
use txcache_resp::{encode, RequestArgs};
use txcache_store::Store;

/// One connection's state between commands.
#[derive(Debug, Default)]
pub struct Session {
    /// The connection's number, unique per node run (`CLIENT ID`).
    pub id: u64,
    /// The client's address, for log lines about it (`None` in tests without a socket).
    pub peer: Option<std::net::SocketAddr>,
    /// Whether `AUTH` succeeded (or no password is configured).
    pub authenticated: bool,
    /// Whether stream commands may run: authenticated with the stream password, or
    /// authenticated when none is configured.
    pub streams: bool,
    /// Set by `CLIENT SETNAME`.
    pub name: Option<Bytes>,
    /// Set by `QUIT`, or by the last wrong password a connection may send: close after
    /// this reply.
    pub closing: bool,
    /// Wrong passwords sent so far (the connection closes at
    /// [`WRONG_PASSWORDS_PER_CONNECTION`](txcache_resp::auth::WRONG_PASSWORDS_PER_CONNECTION)).
    pub wrong_passwords: u32,
    /// The reply protocol, chosen with `HELLO`.
    pub protocol: Protocol,
    /// The commands queued since `MULTI`, until `EXEC` or `DISCARD`.
    pub transaction: Option<Transaction>,
    /// The fencing epoch this connection announced with `TXEPOCH` (0: none). Its stream
    /// commands are refused once the node's epoch is higher: another agent took over.
    pub epoch: u64,
    /// The database this connection declared with `TXDATABASE`, until the node is seen to
    /// follow it (`None` from then on, or when it declared none): its versioned and stream
    /// commands are refused while the node follows another ([`check_database`]).
    pub unconfirmed_database: Option<Bytes>,
}

impl Session {
    /// The client's address for a log line (`unknown` without one).
    pub fn peer_text(&self) -> String {
        self.peer
            .map_or_else(|| "unknown".to_owned(), |peer| peer.to_string())
    }
}

/// What a command may touch.
pub struct Context<'a> {
    /// The node's shared state.
    pub node: &'a Node,
    /// The calling connection's state.
    pub session: &'a mut Session,
    /// Shards locked before the command ran (by `EXEC`, or for a command naming keys on
    /// several shards); `None`: the command locks each shard it touches itself. A trait
    /// object, because the guards borrow the node for longer than this context lives.
    held: Option<&'a mut (dyn LockedShards + 'a)>,
}

impl<'a> Context<'a> {
    /// A context whose commands lock the shards they touch.
    pub fn new(node: &'a Node, session: &'a mut Session) -> Self {
        Self {
            node,
            session,
            held: None,
        }
    }

    /// A context for a command running on shards locked beforehand.
    fn holding(
        node: &'a Node,
        session: &'a mut Session,
        held: &'a mut (dyn LockedShards + 'a),
    ) -> Self {
        Self {
            node,
            session,
            held: Some(held),
        }
    }

    /// Runs `f` on the store of `key`'s shard: locked for the call, or already held.
    // Inlined into each command: it is on every data command's path.
    #[inline(always)]
    pub fn with_shard<R>(&mut self, key: &[u8], f: impl FnOnce(&mut Store) -> R) -> R {
        let shards = &self.node.shards;
        match self.held.as_deref_mut() {
            None => f(&mut shards.for_key(key)),
            Some(held) => on_held(self.node, held, shards.index_of(key), f),
        }
    }

    /// Runs `f` with the shards of all `keys` locked together, in index order, so that no
    /// other client sees the command half done (Redis's multi-key commands are atomic). Inside
    /// `EXEC` the shards are held already. One key needs no more than its own lock.
    pub fn with_keys_locked<R>(
        &mut self,
        keys: &[&[u8]],
        f: impl FnOnce(&mut Context<'_>) -> R,
    ) -> R {
        if self.held.is_some() || keys.len() < 2 {
            return f(self);
        }
        let shards = &self.node.shards;
        let mut wanted = vec![false; shards.len()];
        for key in keys {
            wanted[shards.index_of(key)] = true;
        }
        let mut held = shards.lock(&wanted);
        f(&mut Context::holding(self.node, self.session, &mut held))
    }

    /// Runs `f` on the first shard's store (the first to apply each stream message).
    pub fn with_first_shard<R>(&mut self, f: impl FnOnce(&mut Store) -> R) -> R {
        match self.held.as_deref_mut() {
            None => f(&mut self.node.shards.first()),
            Some(held) => on_held(self.node, held, 0, f),
        }
    }

    /// Runs `visit` on every shard's store in turn.
    pub fn for_each_shard(&mut self, mut visit: impl FnMut(&mut Store)) {
        match self.held.as_deref_mut() {
            None => self.node.shards.for_each(visit),
            Some(held) => {
                for index in 0..self.node.shards.len() {
                    on_held(self.node, held, index, &mut visit);
                }
            }
        }
    }

    /// Milliseconds since the Unix epoch, for plain keys' expiry.
    pub fn now_ms(&self) -> u64 {
        self.node.now_ms()
    }
}

/// Runs `f` on shard `index` among the `held` ones. Whoever locked them locked every shard the
/// command's [`Keys`] name; a shard missing is a bug in a command's table entry, and is locked
/// here rather than left unanswered.
fn on_held<R>(
    node: &Node,
    held: &mut dyn LockedShards,
    index: usize,
    f: impl FnOnce(&mut Store) -> R,
) -> R {
    match held.store(index) {
        Some(store) => f(store),
        None => {
            debug_assert!(false, "shard {index} is not locked for this command");
            f(&mut node.shards.lock_index(index))
        }
    }
}

type Run = fn(&mut Args<'_>, &mut Context<'_>, &mut BytesMut) -> Result<(), CommandError>;

/// Which arguments of a command are keys: the shards `EXEC` locks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// No key: no shard (PING, CLIENT, …).
    None,
    /// The first argument.
    First,
    /// Every argument (DEL, EXISTS, MGET).
    All,
    /// The first of each pair of arguments (MSET's keys, before their values).
    Pairs,
    /// Every shard: a command about the whole node (DBSIZE, FLUSHALL, INFO, …).
    Node,
}

impl Keys {
    /// The keys among `args` (the arguments after the command's name).
    pub fn of<'a>(self, args: RequestArgs<'a>) -> impl Iterator<Item = &'a [u8]> {
        let (take, step) = match self {
            Keys::None | Keys::Node => (0, 1),
            Keys::First => (1, 1),
            Keys::All => (usize::MAX, 1),
            Keys::Pairs => (usize::MAX, 2),
        };
        args.step_by(step).take(take)
    }
}

/// What a command does between `MULTI` and `EXEC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InMulti {
    /// Queued, run by `EXEC`.
    Queue,
    /// Refused (and the transaction with it): stream commands, which must reach every shard
    /// in the stream's order, and commands that change the connection's authentication or
    /// protocol.
    Refuse,
    /// Run at once: the transaction commands themselves, and `QUIT`.
    Run,
}

/// A command the node answers.
pub struct CommandSpec {
    /// Upper-case name, as documented in docs/protocol.md.
    pub name: &'static str,
    /// Arguments with the name, as Redis counts them: `n` exactly `n`, `-n` at least `n`.
    pub arity: i32,
    /// Which arguments are keys.
    pub keys: Keys,
    /// Whether the command may run before `AUTH` when a password is set.
    pub before_auth: bool,
    /// Whether the command is part of the invalidation stream (see [`Session::streams`]).
    pub stream: bool,
    /// Whether the command is refused on a connection whose epoch is older than the node's
    /// (see [`Session::epoch`]): every stream command but `TXEPOCH`, which is how a
    /// connection announces a newer one.
    pub fenced: bool,
    /// Whether the command reads or writes versions, whose validity the node's stream
    /// vouches for: refused on a connection that declared another database than the one
    /// the node follows (see [`Session::unconfirmed_database`]).
    pub versioned: bool,
    /// What it does inside a transaction.
    pub in_multi: InMulti,
    run: Run,
}

const fn spec(name: &'static str, arity: i32, keys: Keys, run: Run) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        keys,
        before_auth: false,
        stream: false,
        fenced: false,
        versioned: false,
        in_multi: InMulti::Queue,
        run,
    }
}

const fn versioned(name: &'static str, arity: i32, keys: Keys, run: Run) -> CommandSpec {
    CommandSpec {
        versioned: true,
        ..spec(name, arity, keys, run)
    }
}

const fn stream(name: &'static str, arity: i32, run: Run) -> CommandSpec {
    CommandSpec {
        stream: true,
        fenced: true,
        in_multi: InMulti::Refuse,
        ..spec(name, arity, Keys::Node, run)
    }
}

/// `command`, run whatever the connection's epoch: `TXEPOCH`, which a fenced connection must
/// still be able to send (a newer lease lets its agent back in).
const fn unfenced(command: CommandSpec) -> CommandSpec {
    CommandSpec {
        fenced: false,
        ..command
    }
}

const fn control(name: &'static str, arity: i32, run: Run) -> CommandSpec {
    CommandSpec {
        in_multi: InMulti::Run,
        ..spec(name, arity, Keys::None, run)
    }
}

const fn connection(name: &'static str, arity: i32, in_multi: InMulti, run: Run) -> CommandSpec {
    CommandSpec {
        before_auth: true,
        in_multi,
        ..spec(name, arity, Keys::None, run)
    }
}

/// Every command, most frequent first (the dispatcher scans in order).
pub static COMMANDS: &[CommandSpec] = &[
    versioned("TXGET", -4, Keys::First, txget::run),
    spec("GET", 2, Keys::First, get::run),
    versioned("TXSET", -5, Keys::First, txset::run),
    versioned("TXRELEASE", 2, Keys::First, txrelease::run),
    spec("SET", -3, Keys::First, set::run),
    spec("MGET", -2, Keys::All, mget::run),
    spec("MSET", -3, Keys::Pairs, mset::run),
    stream("TXINVALIDATE", -3, txinvalidate::run),
    stream("TXHEARTBEAT", 3, txheartbeat::run),
    spec("DEL", -2, Keys::All, del::run),
    spec("EXISTS", -2, Keys::All, exists::run),
    spec("EXPIRE", -3, Keys::First, expire::run_expire),
    spec("PEXPIRE", -3, Keys::First, expire::run_pexpire),
    spec("TTL", 2, Keys::First, ttl::run_ttl),
    spec("PTTL", 2, Keys::First, ttl::run_pttl),
    spec("PERSIST", 2, Keys::First, persist::run),
    spec("INCR", 2, Keys::First, incr::run_incr),
    spec("DECR", 2, Keys::First, incr::run_decr),
    spec("INCRBY", 3, Keys::First, incr::run_incrby),
    spec("DECRBY", 3, Keys::First, incr::run_decrby),
    control("MULTI", 1, multi::run_multi),
    control("EXEC", 1, transaction::run_exec),
    control("DISCARD", 1, multi::run_discard),
    control("WATCH", -2, multi::run_watch),
    spec("UNWATCH", 1, Keys::None, multi::run_unwatch),
    spec("PING", -1, Keys::None, ping::run_ping),
    spec("ECHO", 2, Keys::None, ping::run_echo),
    stream("TXRESET", 3, txreset::run_reset),
    stream("TXREWIND", 3, txreset::run_rewind),
    stream("TXORIGIN", -1, txorigin::run),
    unfenced(stream("TXEPOCH", -1, txepoch::run)),
    versioned("TXSTATUS", 1, Keys::Node, txstatus::run),
    versioned("TXINTERVAL", -2, Keys::Node, txinterval::run),
    // A connection's declaration, as AUTH is: not something a transaction does.
    CommandSpec {
        in_multi: InMulti::Refuse,
        ..spec("TXDATABASE", -1, Keys::None, txdatabase::run)
    },
    spec("DBSIZE", 1, Keys::Node, dbsize::run),
    spec("FLUSHDB", -1, Keys::Node, flushall::run_flushdb),
    spec("FLUSHALL", -1, Keys::Node, flushall::run_flushall),
    spec("INFO", -1, Keys::Node, info::run),
    spec("CONFIG", -2, Keys::Node, config::run),
    spec("CLIENT", -2, Keys::None, client::run_client),
    spec("SELECT", 2, Keys::None, client::run_select),
    spec("COMMAND", -1, Keys::None, client::run_command),
    connection("AUTH", -2, InMulti::Refuse, auth::run),
    connection("HELLO", -1, InMulti::Refuse, hello::run),
    connection("QUIT", -1, InMulti::Run, client::run_quit),
];

/// Runs one request (name and arguments) and appends its reply to `out`; between `MULTI` and
/// `EXEC`, queues it instead.
// Inlined into the connection's loop, as it was before transactions made it longer: every
// request goes through it (callgrind: 30 instructions per TXGET more when it is a call).
#[inline(always)]
pub fn execute(mut request: RequestArgs<'_>, context: &mut Context<'_>, out: &mut BytesMut) {
    let Some(name) = request.next() else { return };
    let spec = find(name);
    if context.session.transaction.is_some() {
        return execute_in_transaction(spec, name, request, context, out);
    }
    let result = match spec {
        None => Err(CommandError::Unknown(printable(name))),
        Some(spec) if !spec.before_auth && !context.session.authenticated => {
            Err(CommandError::NoAuth)
        }
        // Stream commands' checks are out of line: a data command still tests one flag here,
        // and one field of its connection's.
        Some(spec) if spec.stream => execute_stream(spec, request, context, out),
        Some(spec) if spec.versioned && context.session.unconfirmed_database.is_some() => {
            check_database(context.node, context.session, false)
                .and_then(|()| (spec.run)(&mut Args::new(spec.name, request), context, out))
        }
        Some(spec) => (spec.run)(&mut Args::new(spec.name, request), context, out),
    };
    context.node.metrics.count_command(result.is_ok());
    if let Err(error) = result {
        error.encode(out);
    }
}

/// [`execute`] for a stream command: the connection's stream rights, then the fence, held
/// until the command has run so that no `TXEPOCH` raises the epoch in between.
#[inline(never)]
fn execute_stream(
    spec: &'static CommandSpec,
    request: RequestArgs<'_>,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if !context.session.streams {
        return Err(CommandError::NoStreamPermission(spec.name));
    }
    let node = context.node;
    // Every stream command but TXEPOCH claims the node for the connection's database.
    check_database(node, context.session, spec.fenced)?;
    let _admitted = if spec.fenced {
        Some(pass_fence(node, context.session)?)
    } else {
        None
    };
    (spec.run)(&mut Args::new(spec.name, request), context, out)
}

/// The database check of a connection that declared one not yet confirmed (a no-op for
/// the others): `Ok` while the node follows none — or, with `claim` (a stream command),
/// once it follows the declared one from now on —, and for good once it follows the
/// declared one; `-WRONGDB` while it follows another.
#[cold]
#[inline(never)]
pub(crate) fn check_database(
    node: &Node,
    session: &mut Session,
    claim: bool,
) -> Result<(), CommandError> {
    let Some(declared) = &session.unconfirmed_database else {
        return Ok(());
    };
    let followed = if claim {
        Some(node.claim_database(declared))
    } else {
        node.database()
    };
    match followed {
        None => Ok(()),
        Some(followed) if followed == declared => {
            session.unconfirmed_database = None;
            Ok(())
        }
        Some(followed) => Err(CommandError::WrongDatabase {
            node: printable(followed),
            declared: printable(declared),
        }),
    }
}

/// Admits a fenced command from `session`, holding the node's epoch until the guard drops;
/// a connection whose epoch is older than the node's gets `-FENCED` (and is counted).
fn pass_fence<'n>(
    node: &'n Node,
    session: &Session,
) -> Result<RwLockReadGuard<'n, ()>, CommandError> {
    node.admit_stream(session.epoch).map_err(|current| {
        node.metrics.count_fenced();
        CommandError::Fenced {
            connection: session.epoch,
            node: current,
        }
    })
}

/// [`execute`] between `MULTI` and `EXEC`: queues the command, or runs it when it is one of
/// the transaction commands (or `QUIT`). Out of the way of the usual path.
#[cold]
#[inline(never)]
fn execute_in_transaction(
    spec: Option<&'static CommandSpec>,
    name: &[u8],
    request: RequestArgs<'_>,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) {
    let result: Result<(), CommandError> = match spec {
        None => Err(CommandError::Unknown(printable(name))),
        Some(spec) => match admit(spec, &request, context.node, context.session) {
            Err(error) => Err(error),
            Ok(()) if spec.in_multi == InMulti::Run => {
                // Its own errors (MULTI nested, WATCH inside MULTI) leave the queue alone.
                let result = (spec.run)(&mut Args::new(spec.name, request), context, out);
                context.node.metrics.count_command(result.is_ok());
                if let Err(error) = result {
                    error.encode(out);
                }
                return;
            }
            Ok(()) => match transaction::queue(spec, request, context, out) {
                // Counted when `EXEC` runs it, as Redis counts calls.
                Ok(()) => return,
                Err(error) => Err(error),
            },
        },
    };
    context.node.metrics.count_command(result.is_ok());
    if let Err(error) = result {
        // An error while queuing makes `EXEC` discard the transaction, as in Redis.
        if let Some(transaction) = context.session.transaction.as_mut() {
            transaction.dirty = true;
        }
        error.encode(out);
    }
}

/// The checks before a command is queued: arity (so that `EXEC` aborts on it, as in Redis;
/// outside a transaction each command checks its own), authentication, stream rights, the
/// fence (a fenced connection hears `-FENCED` rather than that stream commands cannot be
/// queued: its agent must learn that it was taken over from).
fn admit(
    spec: &CommandSpec,
    request: &RequestArgs<'_>,
    node: &Node,
    session: &Session,
) -> Result<(), CommandError> {
    let given = request.len() + 1;
    let arity = spec.arity.unsigned_abs() as usize;
    if given < arity || (spec.arity > 0 && given > arity) {
        return Err(CommandError::WrongArity(spec.name));
    }
    if !spec.before_auth && !session.authenticated {
        return Err(CommandError::NoAuth);
    }
    if spec.stream && !session.streams {
        return Err(CommandError::NoStreamPermission(spec.name));
    }
    if spec.fenced {
        // Released at once: the command is refused in a transaction anyway (`InMulti::Refuse`).
        drop(pass_fence(node, session)?);
    }
    Ok(())
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
mod compat_tests;

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
