//! The commands the agent answers libraries (docs/protocol.md, "Agent commands"): one module
//! per command, a table that names them, and the dispatcher.
//!
//! Each command module holds a struct of its parsed arguments: `parse` reads them through
//! [`Args`] (a refusal is a [`CommandError`] naming the command and the argument), `apply`
//! runs it and appends exactly one reply. [`COMMANDS`] lists every command with how many
//! arguments it takes and whether it runs before `AUTH`; [`execute`] finds, checks and runs
//! one request. A test keeps the table and the protocol document naming the same commands.

mod args;
mod error;
mod reply;

mod auth;
mod barrier;
mod commitlsn;
mod database;
mod nodes;
mod pin;
mod ping;
mod pins;
mod quit;
mod standbypins;
mod status;
mod tagcolumns;

pub use args::Args;
pub use error::CommandError;

use auth::Auth;
use barrier::Barrier;
use commitlsn::CommitLsn;
use database::Database;
use nodes::Nodes;
use pin::Pin;
use ping::Ping;
use pins::Pins;
use quit::Quit;
use standbypins::StandbyPins;
use status::Status;
use tagcolumns::TagColumns;

use crate::config::Membership;
use crate::database::DatabaseIdentity;
use crate::fanout::Fanout;
use crate::metrics::Sources;
use crate::pincushion::Pincushion;
use crate::term::{Holder, Term};
use crate::tracker::StreamTracker;
use bytes::{Bytes, BytesMut};
use std::ops::RangeInclusive;
use std::sync::Arc;

/// What the commands serve from, shared by every connection.
pub struct Endpoint {
    /// The password clients must send (`AUTH`), if any.
    pub password: Option<String>,
    /// Whether this agent answers from its parts or sends libraries to another agent.
    pub role: Role,
}

/// Whether this agent holds the lease (docs/agent.md, "High availability").
pub enum Role {
    /// It does: commands are answered from its parts while its term is valid.
    Active(Active),
    /// Another agent does (as last read): only `PING`, `AUTH`, `QUIT` and `STATUS` are
    /// answered; every other command gets `STANDBY`, which sends libraries to another agent.
    Standby(Arc<Holder>),
}

/// The parts an active agent answers from.
pub struct Active {
    /// The pins (`PINS`, `PIN`).
    pub pincushion: Arc<Pincushion>,
    /// The pins on each `--standby`, in the flags' order (`STANDBYPINS`).
    pub standbys: Vec<Arc<Pincushion>>,
    /// The stream's record (`COMMITLSN`, `TAGCOLUMNS`, `BARRIER`).
    pub tracker: Arc<StreamTracker>,
    /// The database the stream decodes (`DATABASE`).
    pub database: DatabaseIdentity,
    /// The cache nodes delivered to (`NODES`).
    pub nodes: Arc<Fanout>,
    /// Where the cache nodes come from (`STATUS`).
    pub membership: Membership,
    /// What `STATUS` reads.
    pub metrics: Arc<Sources>,
    /// This agent's term: once it is not valid, the agent answers as a standby.
    pub term: Arc<Term>,
}

impl Endpoint {
    /// The active parts, or `STANDBY` when another agent holds the lease or this one's term
    /// ran out (its pins and catalog may then be another agent's to vouch for).
    fn active(&self) -> Result<&Active, CommandError> {
        match &self.role {
            Role::Active(active) if active.term.valid() => Ok(active),
            Role::Active(active) => Err(CommandError::Standby(format!(
                "its lease of epoch {} was not renewed in time",
                active.term.epoch()
            ))),
            Role::Standby(holder) => Err(CommandError::Standby(format!(
                "the active agent: {}",
                holder.describe()
            ))),
        }
    }
}

/// One connection's state between commands.
#[derive(Debug, Default)]
pub struct Session {
    /// Whether `AUTH` succeeded (or no password is configured).
    pub authenticated: bool,
    /// Set by `QUIT`, or by the last wrong password a connection may send: close after
    /// this reply.
    pub closing: bool,
    /// The library's address, for the log of failed `AUTH`s (`None` when unknown).
    pub peer: Option<std::net::SocketAddr>,
    /// Wrong passwords sent so far (the connection closes at
    /// [`WRONG_PASSWORDS_PER_CONNECTION`](txcache_resp::auth::WRONG_PASSWORDS_PER_CONNECTION)).
    pub wrong_passwords: u32,
}

impl Session {
    /// A new connection's state: authenticated when `endpoint` has no password.
    pub fn new(endpoint: &Endpoint) -> Self {
        Self {
            authenticated: endpoint.password.is_none(),
            closing: false,
            peer: None,
            wrong_passwords: 0,
        }
    }
}

/// A parsed request, ready to run.
#[derive(Debug)]
enum Command {
    Pins(Pins),
    StandbyPins(StandbyPins),
    Pin(Pin),
    CommitLsn(CommitLsn),
    TagColumns(TagColumns),
    Barrier(Barrier),
    Database(Database),
    Nodes(Nodes),
    Status(Status),
    Ping(Ping),
    Auth(Auth),
    Quit(Quit),
}

impl Command {
    /// Runs the command, appending its reply (or returning its error).
    async fn apply(
        self,
        endpoint: &Endpoint,
        session: &mut Session,
        out: &mut BytesMut,
    ) -> Result<(), CommandError> {
        match self {
            Command::Pins(pins) => pins.apply(endpoint.active()?, out),
            Command::StandbyPins(pins) => pins.apply(endpoint.active()?, out),
            Command::Pin(pin) => {
                let start = out.len();
                pin.apply(endpoint.active()?, out).await?;
                still_active(endpoint, out, start)
            }
            Command::CommitLsn(wait) => {
                let start = out.len();
                wait.apply(endpoint.active()?, out).await?;
                still_active(endpoint, out, start)
            }
            Command::TagColumns(columns) => columns.apply(endpoint.active()?, out),
            Command::Barrier(barrier) => barrier.apply(endpoint.active()?, out),
            Command::Database(database) => database.apply(endpoint.active()?, out),
            Command::Nodes(nodes) => nodes.apply(endpoint.active()?, out),
            Command::Status(status) => status.apply(endpoint, out),
            Command::Ping(ping) => ping.apply(out),
            Command::Auth(auth) => auth.apply(endpoint, session, out),
            Command::Quit(quit) => quit.apply(session, out),
        }
    }
}

/// After a command that waited: its reply (from `start` in `out`) stands only if the term
/// did not end meanwhile (another agent may vouch for the database by now).
fn still_active(endpoint: &Endpoint, out: &mut BytesMut, start: usize) -> Result<(), CommandError> {
    if let Err(error) = endpoint.active() {
        out.truncate(start);
        return Err(error);
    }
    Ok(())
}

type Parse = fn(&mut Args<'_>) -> Result<Command, CommandError>;

/// A command the agent answers.
pub struct CommandSpec {
    /// Upper-case name, as docs/protocol.md writes it.
    pub name: &'static str,
    /// How many arguments it takes after its name.
    pub args: RangeInclusive<usize>,
    /// Whether it may run before `AUTH` when a password is set.
    pub before_auth: bool,
    parse: Parse,
}

const fn spec(name: &'static str, args: RangeInclusive<usize>, parse: Parse) -> CommandSpec {
    CommandSpec {
        name,
        args,
        before_auth: false,
        parse,
    }
}

const fn connection(name: &'static str, args: RangeInclusive<usize>, parse: Parse) -> CommandSpec {
    CommandSpec {
        before_auth: true,
        ..spec(name, args, parse)
    }
}

/// Every command, in docs/protocol.md's order.
pub static COMMANDS: &[CommandSpec] = &[
    spec("PINS", 0..=1, |a| Pins::parse(a).map(Command::Pins)),
    spec("STANDBYPINS", 0..=2, |a| {
        StandbyPins::parse(a).map(Command::StandbyPins)
    }),
    spec("PIN", 0..=1, |a| Pin::parse(a).map(Command::Pin)),
    spec("COMMITLSN", 1..=3, |a| {
        CommitLsn::parse(a).map(Command::CommitLsn)
    }),
    spec("TAGCOLUMNS", 0..=0, |a| {
        TagColumns::parse(a).map(Command::TagColumns)
    }),
    spec("BARRIER", 0..=0, |a| {
        Barrier::parse(a).map(Command::Barrier)
    }),
    spec("DATABASE", 0..=0, |a| {
        Database::parse(a).map(Command::Database)
    }),
    spec("NODES", 0..=0, |a| Nodes::parse(a).map(Command::Nodes)),
    spec("STATUS", 0..=0, |a| Status::parse(a).map(Command::Status)),
    spec("PING", 0..=0, |a| Ping::parse(a).map(Command::Ping)),
    connection("AUTH", 1..=usize::MAX, |a| {
        Auth::parse(a).map(Command::Auth)
    }),
    connection("QUIT", 0..=usize::MAX, |a| {
        Quit::parse(a).map(Command::Quit)
    }),
];

/// Runs one request (name and arguments) and appends its reply to `out`. Before `AUTH`, only
/// `AUTH` and `QUIT` with their arguments run: anything else, even unknown or malformed, is
/// told to authenticate.
pub async fn execute(
    request: &[Bytes],
    endpoint: &Endpoint,
    session: &mut Session,
    out: &mut BytesMut,
) {
    let Some((name, args)) = request.split_first() else {
        return;
    };
    let spec = find(name);
    let result = match spec {
        Some(spec) if admits(spec, args, session) => run(spec, args, endpoint, session, out).await,
        _ if !session.authenticated => Err(CommandError::NoAuth),
        Some(spec) => Err(CommandError::WrongArity(spec.name)),
        None => Err(CommandError::Unknown(
            String::from_utf8_lossy(&name.to_ascii_uppercase()).into_owned(),
        )),
    };
    if let Err(error) = result {
        error.encode(out);
    }
}

/// Whether `spec` runs with `args` on `session`: the right number of them, and authenticated
/// unless the command needs no authentication.
fn admits(spec: &CommandSpec, args: &[Bytes], session: &Session) -> bool {
    spec.args.contains(&args.len()) && (spec.before_auth || session.authenticated)
}

async fn run(
    spec: &CommandSpec,
    args: &[Bytes],
    endpoint: &Endpoint,
    session: &mut Session,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    let command = (spec.parse)(&mut Args::new(spec.name, args))?;
    command.apply(endpoint, session, out).await
}

fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests;
