"""Which statements a read-only transaction may run: reads, and nothing that ends or changes
the transaction or the session.

A read-only transaction runs at one pinned snapshot on a pooled connection. A ``COMMIT``
would end that snapshot (what follows runs on newer data yet is stored as valid at the old
one), a ``SET`` outlives the block on the pooled connection, and a write has no place in
it. :func:`check_read_only` classifies every statement of a string with PostgreSQL's own
parser (pglast) and refuses anything but:

- ``SELECT``, ``VALUES``, ``TABLE``, ``WITH`` whose every ``WITH`` query is a ``SELECT``
  (no data-modifying ``WITH``), without ``INTO``, without a locking clause (``FOR UPDATE``,
  ``FOR SHARE``, …: PostgreSQL refuses them in a read-only transaction, and refused here
  they are a :class:`StatementNotAllowed` that a framework answers with a read/write
  transaction, not a failed one) and without a call of ``set_config`` or of a
  session-level advisory lock function;
- ``EXPLAIN`` (with or without ``ANALYZE``) of such a statement;
- ``SHOW``.

Writes hidden in functions a ``SELECT`` calls are left to PostgreSQL's own read-only
check. A string that cannot be parsed is refused with the
parser's message: nothing runs that could not be classified.

The verdict is memoized per statement text (bounded), so the check costs one dictionary
lookup on the common path.

Exceptions::

    TxcacheError
     └── StatementNotAllowed   the message names the statement and why it is refused
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pglast
from pglast import ast, enums
from psycopg import sql

from txcache._current import Params
from txcache._sql import UncacheableQuery, dollar_placeholders
from txcache.errors import StatementNotAllowed

__all__ = ["changes_settings", "check_read_only", "cursor_refusal", "leaves_session_alone"]

V = TypeVar("V")

_MAX_VERDICTS = 4096
_verdicts: dict[tuple[str, bool], int | str] = {}
"""(statement text, type of its parameters) → how many statements it holds, or why it is
refused. The parameters' type matters: with parameters psycopg rewrites placeholders."""

_LOCKING = {
    enums.LockClauseStrength.LCS_FORKEYSHARE: "FOR KEY SHARE",
    enums.LockClauseStrength.LCS_FORSHARE: "FOR SHARE",
    enums.LockClauseStrength.LCS_FORNOKEYUPDATE: "FOR NO KEY UPDATE",
    enums.LockClauseStrength.LCS_FORUPDATE: "FOR UPDATE",
}
_READ_ONLY_REASON = "it writes or changes the database: use cache.read_write()"
_TRANSACTION_REASON = "the transaction begins and ends with its `with cache.read_only()` block"
_SETTING_REASON = (
    "a setting outlives the block on the pooled connection, and even one local to the "
    "transaction changes how its later statements run, which the cache cannot see; a "
    "tenant's settings belong to a cache of its own (its DSN's options, or ALTER ROLE … SET: "
    'docs/library.md, "What a key names")'
)
_SESSION_REASON = "it changes the session, which outlives the block on the pooled connection"
_CODE_REASON = "it runs code whose statements the library cannot see"
_STATEMENT_REASONS: dict[type, str] = {
    ast.TransactionStmt: _TRANSACTION_REASON,
    ast.VariableSetStmt: _SETTING_REASON,
    ast.ConstraintsSetStmt: _SETTING_REASON,
    ast.DiscardStmt: _SESSION_REASON,
    ast.ListenStmt: _SESSION_REASON,
    ast.UnlistenStmt: _SESSION_REASON,
    ast.NotifyStmt: _SESSION_REASON,
    ast.LoadStmt: _SESSION_REASON,
    ast.PrepareStmt: _SESSION_REASON,
    ast.DeallocateStmt: _SESSION_REASON,
    ast.ExecuteStmt: _CODE_REASON,
    ast.DoStmt: _CODE_REASON,
    ast.CallStmt: _CODE_REASON,
}
_KEYWORDS: dict[type, str] = {
    ast.CreateStmt: "CREATE TABLE",
    ast.IndexStmt: "CREATE INDEX",
    ast.ViewStmt: "CREATE VIEW",
    ast.RefreshMatViewStmt: "REFRESH MATERIALIZED VIEW",
    ast.VariableShowStmt: "SHOW",
    ast.ExecuteStmt: "EXECUTE",
    ast.ConstraintsSetStmt: "SET CONSTRAINTS",
    ast.CheckPointStmt: "CHECKPOINT",
    ast.CreateTableAsStmt: "CREATE TABLE AS",
}
# Calls that change the session whatever their arguments: set_config (is_local => false
# outlives the transaction; true still changes how later statements run) and the
# session-level advisory locks (held past the block). The _xact_ variants end with it.
_SESSION_FUNCTIONS = {
    "set_config": _SETTING_REASON,
    **dict.fromkeys(
        (
            "pg_advisory_lock",
            "pg_advisory_lock_shared",
            "pg_try_advisory_lock",
            "pg_try_advisory_lock_shared",
            "pg_advisory_unlock",
            "pg_advisory_unlock_shared",
            "pg_advisory_unlock_all",
        ),
        "a session-level advisory lock outlives the block on the pooled connection",
    ),
}


# What a read/write block may run and still leave its session as it found it — only its
# sequences' state (currval, lastval) changes: nextval runs in column defaults unseen.
_TRANSACTION_SCOPED = (
    ast.InsertStmt,
    ast.UpdateStmt,
    ast.DeleteStmt,
    ast.MergeStmt,
    ast.LockStmt,
    ast.ConstraintsSetStmt,
    ast.VariableShowStmt,
)
_SAVEPOINT_KINDS = (
    enums.TransactionStmtKind.TRANS_STMT_SAVEPOINT,
    enums.TransactionStmtKind.TRANS_STMT_RELEASE,
    enums.TransactionStmtKind.TRANS_STMT_ROLLBACK_TO,
)
_session_verdicts: dict[tuple[str, bool], bool] = {}
"""(statement text, type of its parameters) → whether it leaves the session alone."""
_setting_verdicts: dict[tuple[str, bool], bool] = {}
"""(statement text, type of its parameters) → whether it changes a session setting."""


def _is(node: Any, kind: Any) -> bool:
    """``isinstance`` without narrowing: pglast's stubs declare every node field optional, so
    nodes are handled as ``Any`` once their kind is known (as in ``_sql``)."""
    return isinstance(node, kind)


def check_read_only(statement: object, params: Params = None) -> int:
    """How many statements ``statement`` holds, if every one may run in a read-only
    transaction; else raise :class:`~txcache.errors.StatementNotAllowed`."""
    verdict = _memoized(_verdicts, _classify, statement, params)
    if isinstance(verdict, str):
        raise StatementNotAllowed(verdict)
    return verdict


def leaves_session_alone(statement: object, params: Params = None) -> bool:
    """Whether every statement of ``statement`` is one a read/write block may run without
    changing its session beyond its sequences' state: a query without ``INTO`` or a call of
    ``set_config`` or a session-level advisory lock function, an ``INSERT``, ``UPDATE``,
    ``DELETE`` or ``MERGE`` without such a call, a ``LOCK``, ``SET CONSTRAINTS``, ``SHOW``,
    ``EXPLAIN`` of those, or a savepoint. Anything else — and a string that cannot be
    parsed — may change it. What functions do inside is not seen, as in a read-only
    transaction; the settings PostgreSQL reports are watched instead (:class:`SessionWatch
    <txcache._session_watch.SessionWatch>`)."""
    return _memoized(_session_verdicts, _leaves_session_alone, statement, params)


def changes_settings(statement: object, params: Params = None) -> bool:
    """Whether ``statement`` changes a setting of the session beyond its transaction: a
    ``SET`` (``search_path``, ``ROLE``, ``SESSION AUTHORIZATION``, …) or ``RESET`` that is not
    ``LOCAL`` and not the transaction's own (``SET TRANSACTION``), or a call of
    ``set_config``; a string that cannot be parsed counts as one. DDL, writes and
    transaction control do not."""
    return _memoized(_setting_verdicts, _changes_settings, statement, params)


def _changes_settings(text: str, params: Params) -> bool:
    try:
        converted = dollar_placeholders(text, params)
        statements = pglast.parse_sql(converted)
    except (UncacheableQuery, pglast.parser.ParseError):
        return True
    for raw in statements:
        for node in _nodes(raw.stmt):
            if _is(node, ast.VariableSetStmt) and _outlives_transaction(node):
                return True
            if _is(node, ast.FuncCall) and node.funcname[-1].sval == "set_config":
                return True
    return False


def _outlives_transaction(node: Any) -> bool:
    """Whether a ``SET``/``RESET`` changes the session: not ``LOCAL``, nor the transaction's
    own characteristics (``SET TRANSACTION``)."""
    return not node.is_local and not (node.name or "").startswith("TRANSACTION")


def _memoized(
    verdicts: dict[tuple[str, bool], V],
    classify: Callable[[str, Params], V],
    statement: object,
    params: Params,
) -> V:
    """``classify(text, params)`` of ``statement``, memoized in ``verdicts`` by its text and
    whether it has parameters, all a verdict depends on (bounded: cleared when full)."""
    text = statement if type(statement) is str else _text(statement)
    key = (text, params is None)
    verdict = verdicts.get(key)
    if verdict is None:
        verdict = classify(text, params)
        if len(verdicts) >= _MAX_VERDICTS:
            verdicts.clear()
        verdicts[key] = verdict
    return verdict


def _leaves_session_alone(text: str, params: Params) -> bool:
    try:
        converted = dollar_placeholders(text, params)
        statements = pglast.parse_sql(converted)
    except (UncacheableQuery, pglast.parser.ParseError):
        return False
    return all(_session_neutral(raw.stmt) for raw in statements)


def _session_neutral(node: Any) -> bool:
    """Whether one parsed statement leaves the session alone (:func:`leaves_session_alone`)."""
    if _is(node, ast.ExplainStmt):
        return _session_neutral(node.query)
    if _is(node, ast.TransactionStmt):
        return node.kind in _SAVEPOINT_KINDS
    if _is(node, ast.SelectStmt) or _is(node, _TRANSACTION_SCOPED):
        return _no_session_calls(node)
    return False


def _no_session_calls(node: Any) -> bool:
    """Whether ``node`` holds, anywhere, neither ``SELECT … INTO`` (a new table, perhaps a
    temporary one) nor a call of a function that changes the session."""
    for current in _nodes(node):
        if _is(current, ast.SelectStmt) and current.intoClause is not None:
            return False
        if _is(current, ast.FuncCall) and current.funcname[-1].sval in _SESSION_FUNCTIONS:
            return False
    return True


def _nodes(node: Any) -> Iterator[Any]:
    """``node`` and every node under it, subqueries included."""
    pending: list[Any] = [node]
    while pending:
        current = pending.pop()
        if _is(current, list | tuple):
            pending.extend(current)
        elif _is(current, ast.Node):
            yield current
            pending.extend(getattr(current, name) for name in type(current).__slots__)


def _text(statement: object) -> str:
    """The text of a query psycopg accepts: ``str``, ``bytes``, or a composed ``sql``
    object (rendered without a connection, as psycopg does for literals)."""
    if isinstance(statement, bytes):
        return statement.decode()
    if isinstance(statement, sql.Composable):
        return statement.as_string(None)
    return str(statement)


def _classify(text: str, params: Params) -> int | str:
    """The number of statements in ``text``, or why it is refused."""
    try:
        converted = dollar_placeholders(text, params)
    except UncacheableQuery as error:
        return f"cannot read the statement's placeholders: {error}"
    try:
        statements = pglast.parse_sql(converted)
    except pglast.parser.ParseError as error:
        return f"cannot classify the statement, so it does not run: {error}"
    for raw in statements:
        refusal = _refusal(raw.stmt)
        if refusal is not None:
            return refusal
    return len(statements)


def _refusal(node: Any) -> str | None:
    """Why one parsed statement may not run in a read-only transaction, or ``None``."""
    if _is(node, ast.SelectStmt):
        return _select_refusal(node)
    if _is(node, ast.VariableShowStmt):
        return None
    if _is(node, ast.ExplainStmt):
        inner = _refusal(node.query)
        return None if inner is None else f"EXPLAIN of {inner}"
    reason = _STATEMENT_REASONS.get(type(node), _READ_ONLY_REASON)
    return f"{_keyword(node)} is not allowed in a read-only transaction: {reason}"


def _select_refusal(node: Any) -> str | None:
    """Why a query may not run: a data-modifying ``WITH``, ``SELECT INTO``, a call that
    changes the session — anywhere in it, subqueries included."""
    for current in _nodes(node):
        refusal = _node_refusal(current)
        if refusal is not None:
            return refusal
    return None


def _node_refusal(node: Any) -> str | None:
    if _is(node, ast.CommonTableExpr) and not _is(node.ctequery, ast.SelectStmt):
        keyword = _keyword(node.ctequery)
        return (
            f"WITH … AS ({keyword} …) is not allowed in a read-only transaction: "
            f"{_READ_ONLY_REASON}"
        )
    if _is(node, ast.SelectStmt) and node.intoClause is not None:
        return f"SELECT … INTO is not allowed in a read-only transaction: {_READ_ONLY_REASON}"
    if _is(node, ast.SelectStmt) and node.lockingClause:
        strength = _LOCKING[node.lockingClause[0].strength]
        return (
            f"SELECT … {strength} is not allowed in a read-only transaction: it locks rows "
            "for a write (update_or_create(), select_for_update(), with_for_update()): use "
            "cache.read_write()"
        )
    if _is(node, ast.FuncCall):
        name = node.funcname[-1].sval
        reason = _SESSION_FUNCTIONS.get(name)
        if reason is not None:
            return f"calling {name}() is not allowed in a read-only transaction: {reason}"
    return None


def _keyword(node: Any) -> str:
    """The SQL command a parsed statement is, as the message names it: ``COMMIT``,
    ``SET search_path``, ``ALTER TABLE``, …"""
    if _is(node, ast.TransactionStmt):
        return _transaction_keyword(node.kind)
    if _is(node, ast.VariableSetStmt):
        if node.kind in (enums.VariableSetKind.VAR_RESET, enums.VariableSetKind.VAR_RESET_ALL):
            return "RESET"
        local = "LOCAL " if node.is_local else ""
        return f"SET {local}{node.name}"
    known = _KEYWORDS.get(type(node))
    if known is not None:
        return known
    name = type(node).__name__.removesuffix("Stmt")
    words = "".join(f" {c}" if c.isupper() and i else c for i, c in enumerate(name))
    return words.upper()


def _transaction_keyword(kind: enums.TransactionStmtKind) -> str:
    word = kind.name.removeprefix("TRANS_STMT_").replace("_", " ")
    return {"START": "START TRANSACTION", "PREPARE": "PREPARE TRANSACTION"}.get(word, word)


def cursor_refusal() -> StatementNotAllowed:
    """What the cursor a read-only transaction returns raises for a statement of its own: a
    statement sent through it would skip this check, the rewrite check and the tags."""
    return StatementNotAllowed(
        "the cursor a read-only transaction returns only holds results: run statements "
        "through the transaction (txcache.execute / tx.execute), which checks them"
    )
