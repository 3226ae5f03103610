//! Ordered delivery of the invalidation stream to every cache node.
//!
//! ```text
//!  stream task ──push──▶ ReplayBuffer (recent messages, in ts order) ──▶ node task 1 ──▶ txcached
//!                              │  watch: newest ts                   └─▶ node task 2 ──▶ txcached
//! ```
//! Each node has its own task and cursor, so a slow or dead node never holds up the others.
//! A node that (re)connects reports its position `N` (`TXSTATUS`); if the buffer still holds
//! every message after `N` they are replayed, otherwise the node is reset (`TXRESET`) just
//! below the buffer's start and then replayed from there — never stale, only colder. A node
//! whose position is past the database itself (restored from a backup, or failed over to a
//! standby that was behind), or that followed another database history (`TXORIGIN`: another
//! cluster or timeline), is rewound (`TXREWIND`): its versioned entries are dropped — unless
//! the stream's history continues the node's past the node's position (a promoted standby
//! whose timeline branched off after everything the node saw): the node then keeps them.
//!
//! Nodes may join and leave while the agent runs ([`Fanout::add_node`],
//! [`Fanout::remove_node`]): a node that joins connects as any node does (replayed or reset,
//! never stale); one that leaves loses its task and no longer counts anywhere.

use crate::connect::connect_sql;
use crate::database;
use crate::message::StreamMessage;
use crate::node_link::{NodeLink, OtherDatabase};
use crate::retry::Backoff;
use crate::term::{LeaseLapsed, Term};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use txcache_model::{Timestamp, WallClock};

/// The buffer no longer holds every message after a node's position.
#[derive(Debug)]
pub struct Gap;

/// Recent stream messages, for replay to nodes that fall behind or reconnect.
#[derive(Debug)]
pub struct ReplayBuffer {
    messages: VecDeque<StreamMessage>,
    /// Every message with `ts >= low` is in the buffer (or not produced yet).
    low: Timestamp,
    newest: Timestamp,
    newest_time: WallClock,
    capacity: usize,
    /// The database history the messages belong to (`TXORIGIN`); `None` until named.
    history: Option<Arc<str>>,
    /// Earlier histories the current one continues, each up to its switch point (the
    /// timeline history's, where the new timeline begins): a node of one below that point
    /// saw nothing the current history lacks. A commit *at* the switch point starts where
    /// the new timeline does, so it is not the new timeline's.
    ancestors: Vec<(Arc<str>, Timestamp)>,
}

impl ReplayBuffer {
    /// An empty buffer for a stream that resumes at `low`, holding at most `capacity` messages.
    pub fn new(low: Timestamp, capacity: usize) -> Self {
        Self {
            messages: VecDeque::new(),
            low,
            newest: Timestamp(low.0.saturating_sub(1)),
            newest_time: WallClock(0),
            capacity: capacity.max(1),
            history: None,
            ancestors: Vec::new(),
        }
    }

    /// Appends a message; false (and nothing kept) when it is not after the newest, as when
    /// the stream replays after a reconnect.
    pub fn push(&mut self, message: StreamMessage) -> bool {
        if message.ts() <= self.newest && !self.messages.is_empty() {
            return false;
        }
        self.newest = message.ts();
        self.newest_time = self.newest_time.max(message.time());
        self.messages.push_back(message);
        while self.messages.len() > self.capacity {
            if let Some(oldest) = self.messages.pop_front() {
                self.low = oldest.ts().next();
            }
        }
        true
    }

    /// Every message after `position`, or [`Gap`] when some were already dropped.
    pub fn after(&self, position: Timestamp) -> Result<Vec<StreamMessage>, Gap> {
        if position.0.saturating_add(1) < self.low.0 {
            return Err(Gap);
        }
        let start = self.messages.partition_point(|m| m.ts() <= position);
        Ok(self.messages.range(start..).cloned().collect())
    }

    /// The position a node is reset to when it has a gap: just below the oldest message kept.
    pub fn reset_point(&self) -> (Timestamp, WallClock) {
        (Timestamp(self.low.0.saturating_sub(1)), self.newest_time)
    }

    /// Forgets everything: the stream restarts at `low` and earlier commits are lost.
    pub fn restart_at(&mut self, low: Timestamp) {
        self.messages.clear();
        self.low = low;
        self.newest = Timestamp(low.0.saturating_sub(1));
    }

    /// The newest message's position.
    pub fn newest(&self) -> Timestamp {
        self.newest
    }

    /// The database history the messages belong to.
    pub fn history(&self) -> Option<Arc<str>> {
        self.history.clone()
    }

    /// Names the database history the messages from now on belong to.
    pub fn set_history(&mut self, history: &str) {
        self.history = Some(Arc::from(history));
    }

    /// Whether a node that followed `origin` up to `position` saw only what the current
    /// history holds too.
    pub fn continues(&self, origin: &str, position: Timestamp) -> bool {
        self.ancestors
            .iter()
            .any(|(ancestor, switch)| **ancestor == *origin && position < *switch)
    }
}

/// How the agent talks to every node.
#[derive(Clone, Debug)]
pub struct LinkSettings {
    /// The nodes' password, if they require one.
    pub password: Option<String>,
    /// How `rediss://` nodes are checked (`--node-tls-ca`).
    pub tls: Option<Arc<txcache_tls::ClientConfig>>,
    /// Least time between two deliveries to one node.
    pub spacing: Duration,
    /// The database, read again before a node is rewound.
    pub dsn: String,
    /// The database's name for the nodes (`TXDATABASE`): a node that follows another
    /// database's stream is never fed, nor rewound.
    pub database: String,
    /// This agent's term: its epoch is sent to every node (`TXEPOCH`), and nothing is
    /// sent once it is not valid.
    pub term: Arc<Term>,
}

/// One node's delivery, read at one moment.
#[derive(Clone, Debug, Default)]
pub struct NodeCounts {
    /// `host:port`, as given to `--node` or read from `txcache.cache_nodes`: the series'
    /// label.
    pub address: String,
    /// Whether its task is connected now.
    pub connected: bool,
    /// The stream position delivered to it.
    pub position: u64,
    /// Commits delivered to it.
    pub delivered_commits: u64,
    /// Connections made to it.
    pub connections: u64,
    /// Resets sent to it.
    pub resets: u64,
    /// Rewinds sent to it.
    pub rewinds: u64,
}

/// What the stream task knows of one node.
#[derive(Debug)]
pub struct NodeState {
    /// `host:port`.
    pub address: String,
    connected: AtomicBool,
    delivered: AtomicU64,
    delivered_commits: AtomicU64,
    connections: AtomicU64,
    resets: AtomicU64,
    rewinds: AtomicU64,
}

impl NodeState {
    fn new(address: &str) -> Self {
        Self {
            address: address.to_owned(),
            connected: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            delivered_commits: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            rewinds: AtomicU64::new(0),
        }
    }

    fn read(&self) -> NodeCounts {
        // Destructured whole: a field added above is a compile error here until it is read.
        let Self {
            address,
            connected,
            delivered,
            delivered_commits,
            connections,
            resets,
            rewinds,
        } = self;
        let load = |value: &AtomicU64| value.load(Ordering::Relaxed);
        NodeCounts {
            address: address.clone(),
            connected: connected.load(Ordering::Relaxed),
            position: load(delivered),
            delivered_commits: load(delivered_commits),
            connections: load(connections),
            resets: load(resets),
            rewinds: load(rewinds),
        }
    }

    fn count(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}

/// One node of the membership: what the stream task knows of it and, once started, the task
/// that feeds it (aborted when the node leaves).
#[derive(Debug)]
struct Member {
    state: Arc<NodeState>,
    task: Option<JoinHandle<()>>,
}

/// The shared side of fan-out: the buffer and each node's progress.
pub struct Fanout {
    buffer: Mutex<ReplayBuffer>,
    newest: watch::Sender<Timestamp>,
    /// Sent whenever a node has applied more of the stream ([`Self::delivered_through`]).
    delivered: watch::Sender<()>,
    /// The newest position a caller waits for every node to apply: node tasks deliver up
    /// to it without waiting out `--delivery-spacing`.
    hurry: watch::Sender<Timestamp>,
    /// The membership, in its order (`--node`'s, or the table's).
    nodes: Mutex<Vec<Member>>,
    /// How nodes are spoken to, set when delivery starts: a node that joins later is
    /// started with the same.
    link: OnceLock<LinkSettings>,
    /// The database's WAL insert position when last read (at start, at every stream session
    /// and before rewinding a node): no node that follows this database can be past both it
    /// and `newest`.
    database_position: AtomicU64,
}

impl Fanout {
    /// A fan-out to `addresses` for a stream resuming at `resume`.
    pub fn new(addresses: &[String], resume: Timestamp, capacity: usize) -> Arc<Self> {
        let fanout = Arc::new(Self {
            buffer: Mutex::new(ReplayBuffer::new(resume, capacity)),
            newest: watch::channel(resume).0,
            delivered: watch::channel(()).0,
            hurry: watch::channel(Timestamp(0)).0,
            nodes: Mutex::new(Vec::new()),
            link: OnceLock::new(),
            database_position: AtomicU64::new(u64::MAX),
        });
        for address in addresses {
            fanout.add_node(usize::MAX, address);
        }
        fanout
    }

    /// Starts one delivery task per node, speaking to each as `link` says; nodes added
    /// later start at once with the same. A second call changes nothing.
    pub fn spawn_nodes(self: &Arc<Self>, link: LinkSettings) {
        if self.link.set(link).is_err() {
            return;
        }
        for member in self.members().iter_mut() {
            member.task = self.start(&member.state);
        }
    }

    /// Adds a node at `position` in the membership (at the end when past it), and starts
    /// its delivery if delivery has started. False, and nothing changed, when it is a
    /// member already. It connects as any node does: asked where it stands (`TXSTATUS`),
    /// then replayed or reset, so it never serves what it missed while out of the feed.
    pub fn add_node(self: &Arc<Self>, position: usize, address: &str) -> bool {
        let mut members = self.members();
        if members.iter().any(|m| m.state.address == address) {
            return false;
        }
        let state = Arc::new(NodeState::new(address));
        let task = self.start(&state);
        let position = position.min(members.len());
        members.insert(position, Member { state, task });
        true
    }

    /// Removes a node from the membership and ends its delivery task: it no longer holds
    /// back [`Self::delivered_everywhere`] (the slot's acknowledgement) nor counts in
    /// [`Self::connected_nodes`] or [`Self::node_counts`]. False when it was no member.
    pub fn remove_node(&self, address: &str) -> bool {
        let mut members = self.members();
        let Some(index) = members.iter().position(|m| m.state.address == address) else {
            return false;
        };
        // A node that left is fed no more: it keeps what it holds, valid up to its position.
        if let Some(task) = members.remove(index).task {
            task.abort();
        }
        self.delivered.send_replace(());
        true
    }

    /// The members' addresses, in the membership's order.
    pub fn addresses(&self) -> Vec<String> {
        let members = self.members();
        members.iter().map(|m| m.state.address.clone()).collect()
    }

    /// How many nodes are members now.
    pub fn node_count(&self) -> usize {
        self.members().len()
    }

    /// The delivery task of the node `state`, if delivery has started.
    fn start(self: &Arc<Self>, state: &Arc<NodeState>) -> Option<JoinHandle<()>> {
        let link = self.link.get()?.clone();
        let task = run_node(Arc::clone(self), Arc::clone(state), link);
        Some(tokio::spawn(task))
    }

    /// Queues a message for every node.
    pub fn push(&self, message: StreamMessage) {
        let ts = message.ts();
        if self.lock().push(message) {
            self.newest.send_replace(ts);
        }
    }

    /// The newest message pushed.
    pub fn newest(&self) -> Timestamp {
        self.lock().newest()
    }

    /// Records the database's WAL insert position, just read.
    pub fn set_database_position(&self, position: Timestamp) {
        self.database_position.store(position.0, Ordering::Release);
    }

    /// Whether a node at `position` is past the database: past its WAL insert position when
    /// last read and past every message this agent has pushed. Positions only grow while the
    /// database keeps its history, so such a node saw commits the database no longer has.
    pub fn is_past_database(&self, position: Timestamp) -> bool {
        let database = Timestamp(self.database_position.load(Ordering::Acquire));
        position > database.max(self.newest())
    }

    /// The stream lost commits before `restart`: every node is reset before it gets more.
    pub fn declare_gap(&self, restart: Timestamp) {
        self.lock().restart_at(restart);
        self.restarted_at(restart);
    }

    /// The stream starts again at `restart` (positions may go back): what pins waited for
    /// no longer hurries the node tasks.
    fn restarted_at(&self, restart: Timestamp) {
        self.newest.send_replace(restart);
        self.hurry.send_replace(Timestamp(0));
    }

    /// The database history the stream follows (`None` before it is first named).
    pub fn history(&self) -> Option<Arc<str>> {
        self.lock().history()
    }

    /// The stream follows `history` from `restart` on. Naming it first, or again, changes
    /// nothing; a new one (after a failover, or a restore to a new timeline) restarts the
    /// buffer, and every node that followed another history is rewound before it gets more.
    pub fn follow_history(&self, history: &str, restart: Timestamp) {
        let mut buffer = self.lock();
        match buffer.history() {
            Some(current) if *current == *history => return,
            Some(_) => {
                buffer.restart_at(restart);
                buffer.ancestors.clear(); // a history that does not continue them
                self.restarted_at(restart);
            }
            None => {}
        }
        buffer.set_history(history);
    }

    /// The stream follows `history`, which continues the current one up to `switch` (a
    /// promoted standby's timeline): when everything pushed lies below `switch`, the buffer
    /// and the nodes keep what they hold; otherwise as [`Self::follow_history`]. Returns
    /// whether they keep it.
    pub fn continue_history(&self, history: &str, switch: Timestamp, restart: Timestamp) -> bool {
        let mut buffer = self.lock();
        let Some(current) = buffer.history().filter(|_| buffer.newest() < switch) else {
            drop(buffer);
            self.follow_history(history, restart);
            return false;
        };
        adopt(&mut buffer, current, history, switch, switch);
        true
    }

    /// The server the stream is decoded on switched to `history` at `switch` under the
    /// stream (a standby promoted in place), and everything pushed past `switch` was decoded
    /// from it: the buffer and the nodes keep what they hold, up to the newest pushed.
    pub fn adopt_history(&self, history: &str, switch: Timestamp) {
        let mut buffer = self.lock();
        let Some(current) = buffer.history() else {
            buffer.set_history(history);
            return;
        };
        let held = Timestamp(buffer.newest().0.saturating_add(1));
        adopt(&mut buffer, current, history, switch, held.max(switch));
    }

    /// The position every connected node has received (the newest pushed when none is
    /// connected: a node that comes back later replays from the buffer or is reset).
    pub fn delivered_everywhere(&self) -> Timestamp {
        let newest = self.lock().newest();
        self.members()
            .iter()
            .map(|member| &member.state)
            .filter(|node| node.connected.load(Ordering::Acquire))
            .map(|node| Timestamp(node.delivered.load(Ordering::Acquire)))
            .min()
            .unwrap_or(newest)
            .min(newest)
    }

    /// Waits, at most `wait`, until every connected node has applied the stream through
    /// `ts` (asking the node tasks to deliver at once); whether they did. A pin is of use
    /// only once the nodes know the versions still valid at it: before, a lookup at it
    /// misses every version that is still open (its validity is known only through the
    /// node's position).
    pub async fn delivered_through(&self, ts: Timestamp, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut delivered = self.delivered.subscribe();
        if self.delivered_everywhere() >= ts {
            return true;
        }
        self.hurry.send_if_modified(|wanted| {
            let later = ts > *wanted;
            *wanted = (*wanted).max(ts);
            later
        });
        loop {
            match tokio::time::timeout_at(deadline, delivered.changed()).await {
                Ok(Ok(())) if self.delivered_everywhere() >= ts => return true,
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => return self.delivered_everywhere() >= ts,
            }
        }
    }

    /// How many nodes are connected now.
    pub fn connected_nodes(&self) -> usize {
        self.members()
            .iter()
            .filter(|member| member.state.connected.load(Ordering::Relaxed))
            .count()
    }

    /// Each node's delivery, in the membership's order.
    pub fn node_counts(&self) -> Vec<NodeCounts> {
        let members = self.members();
        members.iter().map(|member| member.state.read()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, ReplayBuffer> {
        // A panic while holding the lock leaves a consistent buffer: every method is one step.
        self.buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn members(&self) -> MutexGuard<'_, Vec<Member>> {
        // Each change of the list is one step: a panic leaves it whole.
        self.nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether a node at `position` is past the database as read now. The agent's last reading
/// may be old: another agent feeding the same node may have moved it on since, and a rewind
/// would then drop its entries for nothing.
async fn still_past_database(
    fanout: &Fanout,
    dsn: &str,
    position: Timestamp,
) -> anyhow::Result<bool> {
    let sql = connect_sql(dsn, "txcache-agent position check").await?;
    fanout.set_database_position(database::position(&sql).await?);
    Ok(fanout.is_past_database(position))
}

/// `buffer` follows `history` from now on, which holds the `current` one below `held` and
/// every older one below `switch` as far as it held them.
fn adopt(
    buffer: &mut ReplayBuffer,
    current: Arc<str>,
    history: &str,
    switch: Timestamp,
    held: Timestamp,
) {
    for (_, older) in &mut buffer.ancestors {
        *older = (*older).min(switch);
    }
    buffer.ancestors.push((current, held));
    buffer.set_history(history);
}

/// Rewinds a node that followed another database history `other` than the stream's
/// `history`, wherever its position: returns its new position.
async fn leave_history(
    fanout: &Fanout,
    node: &NodeState,
    link: &mut NodeLink,
    position: Timestamp,
    other: &str,
    history: &str,
) -> anyhow::Result<Timestamp> {
    let (reset_point, time) = fanout.lock().reset_point();
    // A rewind only moves back: to below the node's own position, it drops every versioned
    // entry whatever that position is.
    let ts = reset_point.min(Timestamp(position.0.saturating_sub(1)));
    tracing::error!(node = %node.address, node_origin = %other, database = %history, rewind_to = %ts,
        "CACHE NODE FOLLOWED ANOTHER DATABASE HISTORY (a failover, a restore to a new timeline, or another database): rewinding the node, which drops its versioned entries");
    link.rewind(ts, time).await?;
    NodeState::count(&node.rewinds, 1);
    Ok(ts)
}

/// Keeps one node connected and fed, forever.
async fn run_node(fanout: Arc<Fanout>, node: Arc<NodeState>, link: LinkSettings) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut outage = OutageLog::default();
    loop {
        let error = match serve_node(&fanout, &node, &link).await {
            Ok(()) => return, // the stream ended: the agent is shutting down
            Err(error) => error,
        };
        if node.connected.swap(false, Ordering::AcqRel) {
            fanout.delivered.send_replace(()); // it holds back no wait for delivery now
            backoff.reset();
            outage = OutageLog::default();
        }
        match outage.report(&error) {
            None => {}
            Some(_) if error.downcast_ref::<LeaseLapsed>().is_some() => {
                tracing::info!(node = %node.address, %error,
                    "not feeding the cache node: this agent does not hold the lease now");
            }
            Some(_) if error.downcast_ref::<OtherDatabase>().is_some() => {
                tracing::error!(node = %node.address, %error,
                    "CACHE NODE FOLLOWS ANOTHER DATABASE: this agent does not feed it, and libraries of this database do not use it; give each database nodes of its own, or restart the node to give it to this one");
            }
            Some(true) => {
                tracing::warn!(node = %node.address, error = %format_args!("{error:#}"), hint = password_hint(&error),
                    "cache node unreachable; retrying (on return it is replayed or reset, never stale)");
            }
            Some(false) => {
                tracing::warn!(node = %node.address, error = %format_args!("{error:#}"), hint = password_hint(&error),
                    "cache node still unreachable, now for another reason; retrying (logged again only when the reason changes)");
            }
        }
        backoff.wait().await;
    }
}

/// What is logged of one node's outage: its first error, then each error of a kind not
/// seen yet in it ([`error_kind`]) — a node back with another password says so — and no
/// retry that fails the same way again.
#[derive(Debug, Default)]
struct OutageLog {
    /// The kinds logged in this outage (a few: the oldest are forgotten past [`Self::KINDS`]).
    kinds: Vec<String>,
}

impl OutageLog {
    /// How many kinds an outage remembers: more would be a node failing every way at once.
    const KINDS: usize = 8;

    /// `Some(first)` when `error` is to be logged (`first`: the outage's first error),
    /// `None` when one of its kind was.
    fn report(&mut self, error: &anyhow::Error) -> Option<bool> {
        let kind = error_kind(error);
        if self.kinds.contains(&kind) {
            return None;
        }
        let first = self.kinds.is_empty();
        if self.kinds.len() == Self::KINDS {
            self.kinds.remove(0);
        }
        self.kinds.push(kind);
        Some(first)
    }
}

/// What to do about a node that refuses the agent's password, or wants one; else nothing.
fn password_hint(error: &anyhow::Error) -> Option<&'static str> {
    let text = format!("{error:#}");
    if text.contains("WRONGPASS") {
        Some("the node refuses --node-password: give the agent the node's --stream-password")
    } else if text.contains("NOAUTH") {
        Some("the node needs a password: give the agent its --stream-password as --node-password")
    } else {
        None
    }
}

/// What kind of failure `error` is: a node of another database, an I/O error's kind (the
/// connection refused, reset…), or else its text without digits (positions and epochs in
/// it make no new kind; `node answered WRONGPASS …` and `node closed the connection` do).
fn error_kind(error: &anyhow::Error) -> String {
    if error.downcast_ref::<OtherDatabase>().is_some() {
        return "another database".to_owned();
    }
    let io = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<std::io::Error>());
    if let Some(io) = io {
        return format!("{:?}", io.kind());
    }
    let text = format!("{error:#}");
    text.chars().filter(|c| !c.is_ascii_digit()).collect()
}

async fn serve_node(
    fanout: &Fanout,
    node: &NodeState,
    settings: &LinkSettings,
) -> anyhow::Result<()> {
    let mut link = NodeLink::connect(
        &node.address,
        settings.password.as_deref(),
        settings.tls.as_ref(),
        &settings.database,
        Arc::clone(&settings.term),
    )
    .await?;
    let mut position = link.position().await?.applied;
    let mut origin = link.origin().await?;
    let mut newest = fanout.newest.subscribe();
    let mut hurry = fanout.hurry.subscribe();
    NodeState::count(&node.connections, 1);
    tracing::info!(node = %node.address, position = %position, "cache node connected");
    let mut last_delivery: Option<Instant> = None;
    loop {
        if fanout.is_past_database(position)
            && still_past_database(fanout, &settings.dsn, position).await?
        {
            let (ts, time) = fanout.lock().reset_point();
            tracing::error!(node = %node.address, node_position = %position, rewind_to = %ts,
                "CACHE NODE IS PAST THE DATABASE: the database's positions went back (restored from a backup, or failed over to a standby that was behind); rewinding the node, which drops its versioned entries");
            link.rewind(ts, time).await?;
            NodeState::count(&node.rewinds, 1);
            position = ts;
        }
        let (batch, history) = {
            let buffer = fanout.lock();
            (buffer.after(position), buffer.history())
        };
        if let Some(history) = history.filter(|h| origin.as_deref() != Some(&**h)) {
            if let Some(other) = &origin {
                if fanout.lock().continues(other, position) {
                    tracing::info!(node = %node.address, node_origin = %other, database = %history, node_position = %position,
                        "cache node followed a history the database's continues past the node's position (a promoted standby): it keeps its entries");
                } else {
                    position =
                        leave_history(fanout, node, &mut link, position, other, &history).await?;
                }
            }
            link.set_origin(&history).await?;
            origin = Some(history.to_string());
            continue;
        }
        let batch = match batch {
            Ok(batch) => batch,
            Err(Gap) => {
                let (ts, time) = fanout.lock().reset_point();
                if position == Timestamp(0) {
                    tracing::info!(node = %node.address, reset_to = %ts,
                        "new cache node (it applied nothing yet): resetting it to where the buffer starts");
                } else {
                    tracing::warn!(node = %node.address, node_position = %position, reset_to = %ts,
                        "cache node missed commits that are no longer buffered; resetting it (its open entries are bounded at its old position)");
                }
                link.reset(ts, time).await?;
                NodeState::count(&node.resets, 1);
                position = ts;
                continue;
            }
        };
        if let Some(last) = batch.last() {
            link.deliver(&batch).await?;
            let commits = batch.iter().filter(|message| message.is_commit()).count();
            NodeState::count(&node.delivered_commits, commits as u64);
            position = last.ts();
            last_delivery = Some(Instant::now());
        }
        node.delivered.store(position.0, Ordering::Release);
        node.connected.store(true, Ordering::Release);
        fanout.delivered.send_replace(());
        if newest.changed().await.is_err() {
            return Ok(());
        }
        // Under a steady stream, what arrives meanwhile goes out with this message: every
        // delivery wakes the node (and this task, for the replies) once. Unless a pin waits
        // for what is not delivered yet.
        if let Some(due) = last_delivery.map(|at| at + settings.spacing) {
            if due > Instant::now() && *hurry.borrow_and_update() <= position {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    _ = hurry.changed() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(ts: u64) -> StreamMessage {
        StreamMessage::Heartbeat {
            ts: Timestamp(ts),
            time: WallClock(ts * 10),
        }
    }

    #[test]
    fn replays_everything_after_a_covered_position() {
        let mut buffer = ReplayBuffer::new(Timestamp(100), 10);
        for ts in [100, 110, 120] {
            assert!(buffer.push(heartbeat(ts)));
        }
        let after: Vec<u64> = buffer
            .after(Timestamp(105))
            .unwrap()
            .iter()
            .map(|m| m.ts().0)
            .collect();
        assert_eq!(after, vec![110, 120]);
        assert_eq!(buffer.after(Timestamp(99)).unwrap().len(), 3);
        assert!(
            buffer.after(Timestamp(98)).is_err(),
            "commits before 100 were never buffered"
        );
    }

    /// A fan-out that followed history `1:1` through position 200.
    fn followed_through_200() -> Arc<Fanout> {
        let fanout = Fanout::new(&[], Timestamp(100), 10);
        fanout.follow_history("1:1", Timestamp(100));
        fanout.push(heartbeat(200));
        fanout
    }

    #[test]
    fn a_timeline_continuing_past_everything_pushed_keeps_what_the_nodes_hold() {
        let fanout = followed_through_200();
        assert!(fanout.continue_history("1:2", Timestamp(250), Timestamp(100)));
        let buffer = fanout.lock();
        assert!(buffer.continues("1:1", Timestamp(200)));
        assert!(!buffer.continues("1:1", Timestamp(250)));
    }

    #[test]
    fn a_timeline_switching_below_what_was_pushed_rewinds_the_nodes() {
        let fanout = followed_through_200();
        assert!(!fanout.continue_history("1:2", Timestamp(150), Timestamp(100)));
        assert!(!fanout.lock().continues("1:1", Timestamp(120)));
    }

    #[test]
    fn a_promotion_under_the_stream_keeps_what_it_pushed_past_the_switch() {
        // The stream decoded the promoted server's own timeline past its switch at 150.
        let fanout = followed_through_200();
        fanout.adopt_history("1:2", Timestamp(150));
        fanout.push(heartbeat(300));
        let buffer = fanout.lock();
        assert_eq!(buffer.history().as_deref(), Some("1:2"));
        assert!(
            buffer.continues("1:1", Timestamp(200)),
            "pushed before the adoption"
        );
        assert!(
            !buffer.continues("1:1", Timestamp(300)),
            "never followed under 1:1"
        );
    }

    #[test]
    fn trimming_moves_the_low_mark_and_reports_gaps() {
        let mut buffer = ReplayBuffer::new(Timestamp(100), 2);
        for ts in [100, 110, 120] {
            buffer.push(heartbeat(ts));
        }
        assert!(buffer.after(Timestamp(100)).is_ok());
        assert!(buffer.after(Timestamp(99)).is_err());
        assert_eq!(buffer.reset_point().0, Timestamp(100));
    }

    #[test]
    fn replayed_stream_messages_are_not_buffered_twice() {
        let mut buffer = ReplayBuffer::new(Timestamp(100), 10);
        assert!(buffer.push(heartbeat(110)));
        assert!(!buffer.push(heartbeat(110)));
        assert!(!buffer.push(heartbeat(105)));
        assert_eq!(buffer.after(Timestamp(99)).unwrap().len(), 1);
    }

    fn addresses(list: &[&str]) -> Vec<String> {
        list.iter().map(|address| (*address).to_owned()).collect()
    }

    /// Marks `address` connected at `position`, as its delivery task would.
    fn delivered(fanout: &Fanout, address: &str, position: u64) {
        let members = fanout.members();
        let member = members.iter().find(|m| m.state.address == address);
        let node = &member.expect("a member").state;
        node.delivered.store(position, Ordering::Release);
        node.connected.store(true, Ordering::Release);
    }

    #[test]
    fn a_node_that_left_no_longer_holds_back_the_acknowledgement() {
        let fanout = Fanout::new(&addresses(&["a:1", "b:2"]), Timestamp(100), 10);
        fanout.push(heartbeat(150));
        delivered(&fanout, "a:1", 150);
        delivered(&fanout, "b:2", 120);
        assert_eq!(fanout.delivered_everywhere(), Timestamp(120));
        assert_eq!(fanout.connected_nodes(), 2);
        assert!(fanout.remove_node("b:2"));
        assert!(!fanout.remove_node("b:2"), "no member any more");
        assert_eq!(fanout.delivered_everywhere(), Timestamp(150));
        assert_eq!(fanout.connected_nodes(), 1);
        assert!(fanout.remove_node("a:1"));
        assert_eq!(fanout.node_count(), 0);
        assert_eq!(
            fanout.delivered_everywhere(),
            Timestamp(150),
            "with no node, everything pushed"
        );
    }

    /// A task waiting (a minute at most) until every node applied `ts`.
    fn wait_in_background(fanout: &Arc<Fanout>, ts: u64) -> JoinHandle<bool> {
        let fanout = Arc::clone(fanout);
        tokio::spawn(async move {
            fanout
                .delivered_through(Timestamp(ts), Duration::from_secs(60))
                .await
        })
    }

    #[tokio::test]
    async fn a_wait_for_delivery_ends_when_every_node_applied_the_position_or_times_out() {
        let fanout = Fanout::new(&addresses(&["a:1", "b:2"]), Timestamp(100), 10);
        fanout.push(heartbeat(150));
        delivered(&fanout, "a:1", 150);
        delivered(&fanout, "b:2", 120);
        let wait = Duration::from_millis(20);
        assert!(!fanout.delivered_through(Timestamp(150), wait).await);
        assert_eq!(
            *fanout.hurry.borrow(),
            Timestamp(150),
            "the node tasks are hurried"
        );
        assert!(fanout.delivered_through(Timestamp(120), wait).await);
        let waiting = wait_in_background(&fanout, 150);
        tokio::task::yield_now().await;
        delivered(&fanout, "b:2", 150);
        fanout.delivered.send_replace(());
        assert!(waiting.await.unwrap(), "woken by the delivery");
        fanout.push(heartbeat(160));
        let waiting = wait_in_background(&fanout, 160);
        tokio::task::yield_now().await;
        delivered(&fanout, "a:1", 160);
        assert!(fanout.remove_node("b:2"));
        assert!(
            waiting.await.unwrap(),
            "a node that left holds back no wait"
        );
        fanout.declare_gap(Timestamp(90));
        assert_eq!(
            *fanout.hurry.borrow(),
            Timestamp(0),
            "positions may go back"
        );
    }

    #[test]
    fn nodes_join_at_their_place_and_leave_every_reading() {
        let fanout = Fanout::new(&addresses(&["b:2"]), Timestamp(100), 10);
        assert!(fanout.add_node(0, "a:1"));
        assert!(fanout.add_node(usize::MAX, "c:3"));
        assert!(!fanout.add_node(1, "c:3"), "a member already");
        assert_eq!(fanout.addresses(), addresses(&["a:1", "b:2", "c:3"]));
        delivered(&fanout, "b:2", 90);
        let counts = fanout.node_counts();
        let read: Vec<(&str, bool, u64)> = counts
            .iter()
            .map(|node| (node.address.as_str(), node.connected, node.position))
            .collect();
        assert_eq!(
            read,
            [("a:1", false, 0), ("b:2", true, 90), ("c:3", false, 0)]
        );
        assert!(fanout.remove_node("b:2"));
        let counts = fanout.node_counts();
        let read: Vec<&str> = counts.iter().map(|node| node.address.as_str()).collect();
        assert_eq!(read, ["a:1", "c:3"]);
        assert!(fanout.add_node(1, "b:2"));
        let again = &fanout.node_counts()[1];
        assert_eq!((again.connected, again.position), (false, 0), "a new start");
    }

    #[tokio::test]
    async fn a_node_added_after_the_start_is_fed_and_one_that_left_is_not() {
        let fanout = Fanout::new(&addresses(&["127.0.0.1:1"]), Timestamp(100), 10);
        let task = |fanout: &Fanout, index: usize| {
            let members = fanout.members();
            members[index].task.as_ref().map(JoinHandle::abort_handle)
        };
        assert!(task(&fanout, 0).is_none(), "nothing runs before the start");
        fanout.spawn_nodes(LinkSettings {
            password: None,
            tls: None,
            spacing: Duration::ZERO,
            dsn: String::new(),
            database: "1/5".to_owned(),
            term: Arc::new(Term::unbounded()),
        });
        assert!(fanout.add_node(1, "127.0.0.1:2"));
        let (first, second) = (task(&fanout, 0).unwrap(), task(&fanout, 1).unwrap());
        assert!(fanout.remove_node("127.0.0.1:1"));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(first.is_finished(), "the task of a node that left ends");
        assert!(!second.is_finished(), "the other goes on retrying");
    }

    #[test]
    fn only_a_new_history_restarts_the_buffer() {
        let fanout = Fanout::new(&[], Timestamp(100), 10);
        fanout.follow_history("7:1", Timestamp(100));
        fanout.push(heartbeat(110));
        fanout.follow_history("7:1", Timestamp(100));
        assert_eq!(fanout.newest(), Timestamp(110), "the same history again");
        assert_eq!(fanout.lock().after(Timestamp(99)).unwrap().len(), 1);
        fanout.follow_history("7:2", Timestamp(105));
        assert_eq!(fanout.history().as_deref(), Some("7:2"));
        assert_eq!(fanout.newest(), Timestamp(104));
        assert!(fanout.lock().after(Timestamp(104)).unwrap().is_empty());
        assert!(
            fanout.lock().after(Timestamp(103)).is_err(),
            "nothing of the old history is replayed"
        );
    }

    /// A node's outage is logged at its first error and again when the kind of error
    /// changes (the node back with another password), never for a retry that fails alike.
    #[test]
    fn an_outage_is_logged_again_only_when_its_error_changes() {
        let mut outage = OutageLog::default();
        let closed = || anyhow::anyhow!("node closed the connection");
        let refused = || {
            let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            anyhow::Error::from(io).context("connecting")
        };
        let wrongpass =
            || anyhow::anyhow!("node answered WRONGPASS invalid username-password pair");
        assert_eq!(outage.report(&closed()), Some(true));
        assert_eq!(outage.report(&refused()), Some(false));
        assert_eq!(outage.report(&refused()), None);
        assert_eq!(outage.report(&wrongpass()), Some(false));
        for _ in 0..10 {
            assert_eq!(outage.report(&wrongpass()), None);
            assert_eq!(outage.report(&closed()), None);
        }
        // Numbers in the text (a position, an epoch) make no new kind.
        assert!(password_hint(&wrongpass()).is_some_and(|hint| hint.contains("--node-password")));
        assert_eq!(password_hint(&closed()), None);
        let at = |n: u64| anyhow::anyhow!("node refused a stream message: ERR behind {n}");
        assert_eq!(outage.report(&at(1)), Some(false));
        assert_eq!(outage.report(&at(22)), None);
    }
}
