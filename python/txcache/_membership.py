"""The cache nodes an agent started without ``--node`` feeds: the rows of
``txcache.cache_nodes`` for its slot (``txcache setup`` creates the table). The agent reads
them every ``--membership-interval`` and serves them to libraries as ``NODES``, which place
keys on exactly those; ``txcache nodes`` (:mod:`txcache.cli.nodes`) edits them here
(docs/agent.md, "Cache nodes that join and leave")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import psycopg

from txcache import _validate as validate

__all__ = ["MembershipError", "add_nodes", "list_nodes", "remove_nodes", "slot_known"]

_MISSING = (
    "txcache.cache_nodes does not exist: run `txcache setup` again (it creates the table of "
    "cache nodes)"
)


T = TypeVar("T")


class MembershipError(Exception):
    """The membership could not be read or changed (the message says why and what to do)."""


def list_nodes(dsn: str, slot: str) -> list[str]:
    """The cache nodes the agents of ``slot`` feed, in the order they serve them."""
    return [
        row[0]
        for row in _run(
            dsn,
            "SELECT address FROM txcache.cache_nodes WHERE slot = %s ORDER BY address",
            [(slot,)],
        )
    ]


def add_nodes(dsn: str, slot: str, addresses: Iterable[str]) -> list[str]:
    """Add ``addresses`` (``host:port``, or ``rediss://host:port``) to the membership of
    ``slot``, each stored as the agent names it (:func:`~txcache._validate.canonical_address`);
    returns those (as given) that were not members yet — a member written another way
    (``redis://``, another case, a port with leading zeros) is the same node."""
    wanted = _checked(addresses)

    def add(connection: psycopg.Connection[tuple[str, ...]]) -> list[str]:
        members = {_canonical(row) for row in _rows(connection, slot)}
        added = []
        for given, canonical in wanted:
            if canonical not in members:
                connection.execute(
                    "INSERT INTO txcache.cache_nodes (slot, address) VALUES (%s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (slot, canonical),
                )
                members.add(canonical)
                added.append(given)
        return added

    return _transaction(dsn, add)


def remove_nodes(dsn: str, slot: str, addresses: Iterable[str]) -> list[str]:
    """Remove ``addresses`` from the membership of ``slot`` — every row naming the node,
    however it is written; returns those (as given) that were members."""
    wanted = _checked(addresses)

    def remove(connection: psycopg.Connection[tuple[str, ...]]) -> list[str]:
        rows = _rows(connection, slot)
        removed = []
        for given, canonical in wanted:
            matching = [row for row in rows if _canonical(row) == canonical]
            for row in matching:
                connection.execute(
                    "DELETE FROM txcache.cache_nodes WHERE slot = %s AND address = %s",
                    (slot, row),
                )
            if matching:
                removed.append(given)
        return removed

    return _transaction(dsn, remove)


def slot_known(dsn: str, slot: str) -> bool:
    """Whether an agent of ``slot`` is known to this database: a replication slot of that
    name here, or a lease an agent of it took (an agent decoding on a standby keeps its slot
    there)."""
    statement = (
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = %s) "
        "OR EXISTS (SELECT FROM txcache.agent_lease WHERE slot = %s)"
    )
    return bool(_run(dsn, statement, [(slot, slot)])[0][0])


def _checked(addresses: Iterable[str]) -> list[tuple[str, str]]:
    """Each address checked (a node's ``host:port``): as given (stripped) and canonical,
    each node once."""
    checked: dict[str, str] = {}
    for given in addresses:
        try:
            canonical = validate.canonical_address(given)
        except validate.Refused as refused:
            raise MembershipError(refused.message("a cache node's address", given)) from None
        checked.setdefault(canonical, given.strip())
    return [(given, canonical) for canonical, given in checked.items()]


def _canonical(row: str) -> str:
    """A row's node as the agent names it; a row that names none, as it is written."""
    try:
        return validate.canonical_address(row)
    except validate.Refused:
        return row


def _rows(connection: psycopg.Connection[tuple[str, ...]], slot: str) -> list[str]:
    cursor = connection.execute("SELECT address FROM txcache.cache_nodes WHERE slot = %s", (slot,))
    return [row[0] for row in cursor.fetchall()]


def _run(dsn: str, statement: str, rows: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``statement`` once per row of parameters in one transaction; every row returned."""

    def run(connection: psycopg.Connection[tuple[str, ...]]) -> list[tuple[str, ...]]:
        found: list[tuple[str, ...]] = []
        for parameters in rows:
            found += connection.execute(statement, parameters).fetchall()
        return found

    return _transaction(dsn, run)


def _transaction(dsn: str, work: Callable[[psycopg.Connection[tuple[str, ...]]], T]) -> T:
    """``work`` in one transaction on a connection to ``dsn``; its failures as
    :class:`MembershipError` naming what to do."""
    try:
        with psycopg.connect(dsn) as connection:
            return work(connection)
    except psycopg.errors.UndefinedTable:
        raise MembershipError(_MISSING) from None
    except psycopg.errors.InsufficientPrivilege as error:
        raise MembershipError(
            f"{error.diag.message_primary}: the role needs SELECT, INSERT and DELETE on "
            "txcache.cache_nodes (`txcache setup --print-sql` prints the GRANT)"
        ) from None
    except psycopg.OperationalError as error:
        raise MembershipError(f"cannot reach the database: {error}") from None
