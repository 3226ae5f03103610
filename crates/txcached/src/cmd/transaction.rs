//! `MULTI` … `EXEC`: commands queued on the connection, run together with the shards they
//! touch locked.
//!
//! Between `MULTI` and `EXEC` each admitted command is copied into the session (re-encoded as
//! a multibulk request) and answered `+QUEUED`; an error while queuing (an unknown command, a
//! wrong number of arguments, a command refused in transactions, a transaction too large)
//! makes `EXEC` discard them all with `-EXECABORT`, as in Redis. `EXEC` locks every shard a
//! queued command touches (by its [`Keys`]), in index order, runs the commands one after the
//! other on the locked stores, and replies with the array of their replies (an error in one
//! is its reply; the others still run, as in Redis: there is no rollback). No other client's
//! command on those shards runs in between, so the transaction is atomic with respect to every
//! other client of the node. Stream messages are refused inside a transaction; an invalidation
//! arriving meanwhile waits at the first locked shard.

use super::{execute, Args, CommandError, CommandSpec, Context, InMulti, Keys};
use bytes::BytesMut;
use txcache_resp::{encode, Limits, RequestArgs, RequestDecoder};

/// The commands queued since `MULTI`.
#[derive(Debug)]
pub struct Transaction {
    /// The queued commands, each as a multibulk request.
    queued: BytesMut,
    /// How many there are.
    count: usize,
    /// Which shards they touch, one flag per shard.
    shards: Vec<bool>,
    /// Set by an error while queuing: `EXEC` will discard the transaction.
    pub dirty: bool,
}

impl Transaction {
    /// An empty transaction on a node of `shards` shards.
    pub fn new(shards: usize) -> Self {
        Self {
            queued: BytesMut::new(),
            count: 0,
            shards: vec![false; shards],
            dirty: false,
        }
    }
}

/// Queues an admitted command and replies `+QUEUED`.
pub fn queue(
    spec: &CommandSpec,
    request: RequestArgs<'_>,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    if spec.in_multi == InMulti::Refuse {
        return Err(CommandError::NotInTransaction(spec.name));
    }
    // What the connection would buffer of one request, and as many commands as an array
    // reply may hold: the queue is client data held in memory, bounded like a request.
    let limits = context.node.limits();
    let max_bytes = limits.max_bulk_len.saturating_add(1 << 20);
    let node = context.node;
    let Some(transaction) = context.session.transaction.as_mut() else {
        return Err(CommandError::ExecWithoutMulti);
    };
    let bytes: usize = request.clone().map(|arg| arg.len() + 16).sum();
    if transaction.queued.len() + bytes + 32 > max_bytes
        || transaction.count >= limits.max_array_len
    {
        return Err(CommandError::TransactionTooLarge(max_bytes));
    }
    match spec.keys {
        Keys::Node => transaction.shards.fill(true),
        keys => {
            for key in keys.of(request.clone()) {
                transaction.shards[node.shards.index_of(key)] = true;
            }
        }
    }
    let mut parts = Vec::with_capacity(request.len() + 1);
    parts.push(spec.name.as_bytes());
    parts.extend(request);
    encode::request(&mut transaction.queued, &parts);
    transaction.count += 1;
    encode::simple(out, "QUEUED");
    Ok(())
}

/// `EXEC`: runs the queued commands with their shards locked; replies with their replies.
pub fn run_exec(
    args: &mut Args,
    context: &mut Context<'_>,
    out: &mut BytesMut,
) -> Result<(), CommandError> {
    args.finish()?;
    let Some(transaction) = context.session.transaction.take() else {
        return Err(CommandError::ExecWithoutMulti);
    };
    let node = context.node;
    if transaction.dirty {
        node.metrics.count_transaction(false);
        return Err(CommandError::ExecAbort);
    }
    let mut held = node.shards.lock(&transaction.shards);
    let mut inner = Context::holding(node, context.session, &mut held);
    encode::array_header(out, transaction.count);
    // The queue holds what this connection already accepted; no limit applies again.
    let limits = Limits {
        max_bulk_len: usize::MAX,
        max_array_len: usize::MAX,
        ..Limits::DEFAULT
    };
    let mut decoder = RequestDecoder::new();
    let mut rest = &transaction.queued[..];
    let (start, reply_limit) = (out.len(), node.reply_limit());
    while let Ok(Some(request)) = decoder.peek(rest, &limits) {
        let len = request.len();
        let before = out.len();
        execute(request.args(), &mut inner, out);
        // Every command runs (the transaction is atomic); the replies past the limit are
        // errors, so that many reads of one large value cannot grow the reply unbounded.
        if out.len() - start > reply_limit {
            out.truncate(before);
            CommandError::ReplyTooLarge { limit: reply_limit }.encode(out);
        }
        rest = &rest[len..];
    }
    node.metrics.count_transaction(true);
    Ok(())
}
