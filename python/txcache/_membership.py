"""The cache nodes an agent started without ``--node`` feeds: the rows of
``txcache.cache_nodes`` for its slot (``txcache setup`` creates the table). The agent reads
them every ``--membership-interval`` and serves them to libraries as ``NODES``, which place
keys on exactly those; ``txcache nodes`` (:mod:`txcache.cli.nodes`) edits them here
(docs/agent.md, "Cache nodes that join and leave")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg

from txcache import _validate as validate

__all__ = ["MembershipError", "add_nodes", "list_nodes", "remove_nodes", "slot_known"]

_MISSING = (
    "txcache.cache_nodes does not exist: run `txcache setup` again (it creates the table of "
    "cache nodes)"
)


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
    ``slot``; returns those that were not members yet."""
    rows = [(slot, address) for address in _checked(addresses)]
    return [
        row[0]
        for row in _run(
            dsn,
            "INSERT INTO txcache.cache_nodes (slot, address) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING RETURNING address",
            rows,
        )
    ]


def remove_nodes(dsn: str, slot: str, addresses: Iterable[str]) -> list[str]:
    """Remove ``addresses`` from the membership of ``slot``; returns those that were
    members."""
    rows = [(slot, address) for address in _checked(addresses)]
    return [
        row[0]
        for row in _run(
            dsn,
            "DELETE FROM txcache.cache_nodes WHERE slot = %s AND address = %s RETURNING address",
            rows,
        )
    ]


def slot_known(dsn: str, slot: str) -> bool:
    """Whether an agent of ``slot`` is known to this database: a replication slot of that
    name here, or a lease an agent of it took (an agent decoding on a standby keeps its slot
    there)."""
    statement = (
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_replication_slots WHERE slot_name = %s) "
        "OR EXISTS (SELECT FROM txcache.agent_lease WHERE slot = %s)"
    )
    return bool(_run(dsn, statement, [(slot, slot)])[0][0])


def _checked(addresses: Iterable[str]) -> list[str]:
    """Each address checked (a node's ``host:port``), each once."""
    checked: list[str] = []
    for given in addresses:
        try:
            checked.append(validate.address(given))
        except validate.Refused as refused:
            raise MembershipError(refused.message("a cache node's address", given)) from None
    return list(dict.fromkeys(checked))


def _run(dsn: str, statement: str, rows: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``statement`` once per row of parameters in one transaction; every row returned."""
    try:
        with psycopg.connect(dsn) as connection:
            found: list[tuple[str, ...]] = []
            for parameters in rows:
                found += connection.execute(statement, parameters).fetchall()
            return found
    except psycopg.errors.UndefinedTable:
        raise MembershipError(_MISSING) from None
    except psycopg.errors.InsufficientPrivilege as error:
        raise MembershipError(
            f"{error.diag.message_primary}: the role needs SELECT, INSERT and DELETE on "
            "txcache.cache_nodes (`txcache setup --print-sql` prints the GRANT)"
        ) from None
    except psycopg.OperationalError as error:
        raise MembershipError(f"cannot reach the database: {error}") from None
