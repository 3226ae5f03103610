"""A value cached under one session context is never served under another: two databases
on one server, tenants by ``search_path`` and by role (``"$user"``), privileges, session
settings reported and not, database- and role-level settings changed under pooled
sessions. Each test has caches that differ in one part of the context read the same
function with the same arguments, sharing nodes and the agent (docs/library.md, "What a
key names")."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import txcache
from library_fixtures import status_report
from postgres_fixtures import drop_database
from txcache import protocol
from txcache.stack import AgentProcess, EmbeddedPostgres, Stack, StackOptions, wait_until

TENANTS = """
CREATE SCHEMA tenant_a;
CREATE SCHEMA tenant_b;
CREATE TABLE public.acct (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE tenant_a.acct (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE tenant_b.acct (id integer PRIMARY KEY, name text NOT NULL);
INSERT INTO public.acct VALUES (1, 'public one');
INSERT INTO tenant_a.acct VALUES (1, 'a one');
INSERT INTO tenant_b.acct VALUES (1, 'b one');
CREATE TABLE public.events (id integer PRIMARY KEY, at timestamptz NOT NULL,
                            amount float8 NOT NULL);
INSERT INTO public.events VALUES (1, '2026-03-01 20:00:00+00', 0.1);
CREATE TABLE public.secret (id integer PRIMARY KEY, code text NOT NULL);
INSERT INTO public.secret VALUES (1, 'the launch code');
"""

AGENT_ARGS = (
    *("--pin-interval", "50ms", "--heartbeat-interval", "50ms"),
    *("--shared-catalog-interval", "100ms"),
)


@txcache.cacheable
def account_name(account_id: int) -> str | None:
    """``acct`` as the session's search path resolves it."""
    row = txcache.query_one("SELECT name FROM acct WHERE id = %s", (account_id,))
    return None if row is None else str(row[0])


@txcache.cacheable
async def account_name_async(account_id: int) -> str | None:
    """:func:`account_name`, for async caches."""
    row = await txcache.aio.query_one("SELECT name FROM acct WHERE id = %s", (account_id,))
    return None if row is None else str(row[0])


@txcache.cacheable
def event_day(event_id: int) -> str:
    """The event's date in the session's time zone."""
    row = txcache.query_one("SELECT at::date::text FROM public.events WHERE id = %s", (event_id,))
    assert row is not None
    return str(row[0])


@txcache.cacheable
def event_amount(event_id: int) -> float:
    """A float8 as the session's ``extra_float_digits`` writes it (not a reported setting)."""
    row = txcache.query_one("SELECT amount * 3 FROM public.events WHERE id = %s", (event_id,))
    assert row is not None
    return float(row[0])


@txcache.cacheable
def secret_code(secret_id: int) -> str:
    """Readable only by roles with SELECT on ``secret``."""
    row = txcache.query_one("SELECT code FROM public.secret WHERE id = %s", (secret_id,))
    assert row is not None
    return str(row[0])


@dataclass
class Tenants:
    """A stack on a database with the tenants' tables, and ways to reach it."""

    stack: Stack
    server: EmbeddedPostgres
    database: str

    def dsn(self, **parameters: Any) -> str:
        """The database's DSN with libpq ``parameters`` changed (``options``, ``user``)."""
        return make_conninfo(self.stack.dsn, **parameters)

    def cache(self, settings: dict[str, Any] | None = None, **parameters: Any) -> txcache.Cache:
        """A cache of the stack with library ``settings``, on :meth:`dsn` with
        ``parameters``."""
        own = {"refresh_interval": 0.05, **(settings or {})}
        return self.stack.connect(dsn=self.dsn(**parameters), **own)

    def admin(self) -> psycopg.Connection[Any]:
        """An autocommit superuser connection to the database."""
        return psycopg.connect(self.stack.dsn, autocommit=True)

    def role(self, prefix: str) -> str:
        """A new login role of the server (dropped with the database's objects at the
        end), with a schema of its own name holding its ``acct``."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with self.admin() as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        return name


@pytest.fixture
def tenants(postgres: EmbeddedPostgres, database: str) -> Iterator[Tenants]:
    options = StackOptions(
        dsn=database,
        nodes=2,
        max_memory="64mb",
        schema_sql=TENANTS,
        schemas=("public", "tenant_a", "tenant_b"),
        agent_args=AGENT_ARGS,
    )
    name = conninfo_to_dict(database)["dbname"]
    with Stack(options) as stack:
        yield Tenants(stack, postgres, str(name))
        with psycopg.connect(stack.dsn, autocommit=True) as admin:
            roles = admin.execute(
                "SELECT rolname FROM pg_roles WHERE rolname ~ '^(alice|bob|r|g)_[0-9a-f]{8}$'"
            ).fetchall()
            for (role,) in roles:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        for (role,) in roles:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def read(cache: txcache.Cache, function: Any, *args: Any, not_before: int | None = None) -> Any:
    """``function(*args)`` in a read-only transaction of ``cache``; with it, the transaction's
    hit count."""
    with cache.read_only(staleness=60, not_before=not_before) as tx:
        return function(*args), tx.hits


def write(cache: txcache.Cache, statement: str, *params: Any) -> int:
    """``statement`` in a read/write transaction of ``cache``; its commit token."""
    with cache.read_write() as tx:
        tx.execute(statement, params)
    assert tx.commit_timestamp is not None
    return tx.commit_timestamp


def cached(cache: txcache.Cache, function: Any, *args: Any) -> Any:
    """Read ``function(*args)`` until it is a hit; the value."""

    def hit() -> tuple[Any] | None:
        value, hits = read(cache, function, *args)
        return (value,) if hits else None

    return wait_until(hit, f"{function.__name__}{args} to be cached", timeout=20)[0]


def search_path(path: str) -> dict[str, Any]:
    return {"options": f"-c search_path={path}"}


def test_tenants_by_search_path_never_share_a_value(tenants: Tenants) -> None:
    with (
        tenants.cache(**search_path("tenant_a,public")) as a,
        tenants.cache(**search_path("tenant_b,public")) as b,
    ):
        assert cached(a, account_name, 1) == "a one"
        assert read(b, account_name, 1)[0] == "b one"
        token = write(b, "UPDATE acct SET name = 'b two' WHERE id = 1")
        assert read(b, account_name, 1, not_before=token)[0] == "b two"
        assert cached(b, account_name, 1) == "b two"
        assert cached(a, account_name, 1) == "a one"
        with a.read_only():
            key_a = account_name.key(1)
        with b.read_only():
            assert account_name.key(1) != key_a


def test_tenants_by_role_and_user_schema_never_share_a_value(tenants: Tenants) -> None:
    alice, bob = tenants.role("alice"), tenants.role("bob")
    with tenants.admin() as admin:
        for role, name in ((alice, "alice one"), (bob, "bob one")):
            who = sql.Identifier(role)
            admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(who, who))
            admin.execute(
                sql.SQL("CREATE TABLE {}.acct (id integer PRIMARY KEY, name text NOT NULL)").format(
                    who
                )
            )
            admin.execute(sql.SQL("ALTER TABLE {}.acct OWNER TO {}").format(who, who))
            admin.execute(sql.SQL("INSERT INTO {}.acct VALUES (1, %s)").format(who), (name,))
    txcache.setup_database(
        tenants.stack.dsn, schemas=("public", "tenant_a", "tenant_b", alice, bob)
    )
    tenants.stack.caught_up()
    with tenants.cache(user=alice) as as_alice, tenants.cache(user=bob) as as_bob:
        assert cached(as_alice, account_name, 1) == "alice one"
        assert read(as_bob, account_name, 1)[0] == "bob one"
        assert cached(as_bob, account_name, 1) == "bob one"
        assert cached(as_alice, account_name, 1) == "alice one"


def test_a_role_without_the_privilege_never_reads_what_another_cached(tenants: Tenants) -> None:
    reader = tenants.role("r")
    with tenants.cache() as owner, tenants.cache(user=reader) as unprivileged:
        assert cached(owner, secret_code, 1) == "the launch code"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            read(unprivileged, secret_code, 1)


def test_a_revoked_membership_stops_cached_reads(tenants: Tenants) -> None:
    """Role membership is a shared catalog no event trigger sees: the agent's watch
    invalidates every cached result once it changes."""
    group, member = tenants.role("g"), tenants.role("r")
    with tenants.admin() as admin:
        admin.execute(sql.SQL("GRANT SELECT ON public.secret TO {}").format(sql.Identifier(group)))
        admin.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(member))
        )
    with tenants.cache(user=member) as cache:
        assert cached(cache, secret_code, 1) == "the launch code"
        with tenants.admin() as admin:
            admin.execute(
                sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(group), sql.Identifier(member))
            )

        def refused() -> bool:
            try:
                read(cache, secret_code, 1)
            except psycopg.errors.InsufficientPrivilege:
                return True
            return False

        wait_until(refused, "the revoked member's cached read to be refused", timeout=20)


def test_a_membership_revoked_while_the_agent_was_down_is_seen_when_it_starts(
    tenants: Tenants,
) -> None:
    """The agent records what it read of the shared catalogs in the database."""
    group, member = tenants.role("g"), tenants.role("r")
    with tenants.admin() as admin:
        admin.execute(sql.SQL("GRANT SELECT ON public.secret TO {}").format(sql.Identifier(group)))
        admin.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(member))
        )
        wait_until(
            lambda: admin.execute("SELECT digest FROM txcache.shared_catalog").fetchone(),
            "the agent to record the shared catalogs",
            timeout=20,
        )
    with tenants.cache(user=member) as cache:
        assert cached(cache, secret_code, 1) == "the launch code"
        assert tenants.stack.agent is not None
        tenants.stack.agent.stop()
        with tenants.admin() as admin:
            admin.execute(
                sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(group), sql.Identifier(member))
            )
        tenants.stack.start_agent()

        def refused() -> bool:
            try:
                read(cache, secret_code, 1)
            except psycopg.errors.InsufficientPrivilege:
                return True
            return False

        wait_until(refused, "the revoked member's cached read to be refused", timeout=30)


@pytest.mark.parametrize(
    ("function", "first", "second"),
    [
        (event_day, {"TimeZone": "UTC"}, {"TimeZone": "Asia/Tokyo"}),
        (event_amount, {"extra_float_digits": "1"}, {"extra_float_digits": "-3"}),
    ],
)
def test_session_settings_are_part_of_the_context(
    tenants: Tenants, function: Any, first: dict[str, str], second: dict[str, str]
) -> None:
    def options(settings: dict[str, str]) -> dict[str, Any]:
        return {"options": " ".join(f"-c {k}={v}" for k, v in settings.items())}

    with tenants.cache(**options(first)) as one, tenants.cache(**options(second)) as other:
        with (
            psycopg.connect(tenants.dsn(**options(first))) as plain_one,
            psycopg.connect(tenants.dsn(**options(second))) as plain_other,
        ):
            statement = {
                event_day: "SELECT at::date::text FROM events WHERE id = 1",
                event_amount: "SELECT amount * 3 FROM events WHERE id = 1",
            }[function]
            (expected_one,) = plain_one.execute(statement).fetchone() or (None,)
            (expected_other,) = plain_other.execute(statement).fetchone() or (None,)
        assert expected_one != expected_other, "the settings must make a difference here"
        assert cached(one, function, 1) == expected_one
        assert read(other, function, 1)[0] == expected_other
        assert cached(other, function, 1) == expected_other
        assert cached(one, function, 1) == expected_one


def test_a_set_in_a_read_write_block_does_not_change_the_next_readers_context(
    tenants: Tenants,
) -> None:
    with tenants.cache(options="-c TimeZone=UTC") as cache:
        assert cached(cache, event_day, 1) == "2026-03-01"
        with cache.read_write() as tx:
            tx.execute("SET TimeZone = 'Asia/Tokyo'")
            assert tx.query_one("SELECT at::date::text FROM events WHERE id = 1") == ("2026-03-02",)
        with cache.read_only() as tx:
            assert tx.query_one("SHOW TimeZone") == ("UTC",)
            assert event_day(1) == "2026-03-01"


def test_two_databases_on_one_server_never_share_a_value(
    tenants: Tenants, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent follows one database: a cache of another database on the same server (a
    test database beside the development one) runs uncached, saying so once."""
    other = f"{tenants.database}_other"
    with tenants.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other)))
    try:
        with psycopg.connect(tenants.dsn(dbname=other), autocommit=True) as conn:
            conn.execute("CREATE TABLE acct (id integer PRIMARY KEY, name text NOT NULL)")
            conn.execute("INSERT INTO acct VALUES (1, 'other one')")
        with tenants.cache() as development, tenants.cache(dbname=other) as second:
            assert cached(development, account_name, 1) == "public one"
            with caplog.at_level(logging.ERROR, logger="txcache"):
                for _ in range(3):
                    assert read(second, account_name, 1) == ("other one", 0)
            refusals = [r for r in caplog.records if "follows database" in r.getMessage()]
            assert len(refusals) == 1, caplog.text
            token = write(second, "UPDATE acct SET name = 'other two' WHERE id = 1")
            assert read(second, account_name, 1, not_before=token) == ("other two", 0)
            assert cached(development, account_name, 1) == "public one"
    finally:
        drop_database(tenants.server, other)


def status_of(nodes: list[str], agent: str) -> str:
    """What ``txcache status`` prints about ``nodes`` and ``agent``."""
    return status_report(nodes, [agent])[1]


@txcache.cacheable
def other_account_name(account_id: int) -> str | None:
    """:func:`account_name`, counted apart: for the caches of another database."""
    row = txcache.query_one("SELECT name FROM acct WHERE id = %s", (account_id,))
    return None if row is None else str(row[0])


def test_an_agent_of_another_database_never_feeds_this_ones_nodes(tenants: Tenants) -> None:
    """Two databases, each with its agent, given the same nodes: the nodes follow the first
    one's stream, so the second agent's is refused (it would move their N past commits of
    one database with the positions of the other) and so is the second database's library,
    which runs on the database alone rather than trust an N nothing of its own backs."""
    other = f"{tenants.database}_own_agent"
    with tenants.admin() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(other)))
    try:
        dsn = tenants.dsn(dbname=other)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE acct (id integer PRIMARY KEY, name text NOT NULL)")
            conn.execute("INSERT INTO acct VALUES (1, 'other one')")
        txcache.setup_database(dsn, slot="txcache_other")
        nodes = tenants.stack.node_addresses
        with (
            AgentProcess(dsn, nodes, "--slot", "txcache_other", *AGENT_ARGS) as agent,
            tenants.cache() as first,
            txcache.connect(
                dsn, nodes=nodes, agent=f"{agent.host}:{agent.port}", refresh_interval=0.05
            ) as second,
        ):
            wait_until(
                lambda: "FOLLOWS ANOTHER DATABASE" in agent.log_text(),
                "the second agent to be refused by the nodes",
                log=agent.log_text,
            )
            assert cached(first, account_name, 1) == "public one"
            stats = other_account_name.stats
            assert read(second, other_account_name, 1) == ("other one", 0)
            # Whatever became of the store (an unprotected node takes it), it is over.
            wait_until(
                lambda: stats.inserts.get("inserted") or stats.misses.get("unavailable"),
                "the second database's first miss to be stored or to find the nodes down",
            )
            for name in ("other two", "other three"):
                token = write(second, "UPDATE acct SET name = %s WHERE id = 1", name)
                write(first, "UPDATE acct SET name = name WHERE id = 1")
                tenants.stack.caught_up()  # the nodes' N past the second database's write
                for _ in range(3):
                    assert read(second, other_account_name, 1, not_before=token) == (name, 0)
            assert stats.inserts.get("inserted", 0) == 0, stats
            assert cached(first, account_name, 1) == "public one"
            assert first.agent is not None
            assert first.agent.database is not None
            followed = protocol.stream_name(first.agent.database)
            report = status_of(nodes, f"{agent.host}:{agent.port}")
            assert f"follows database {followed}, not the agent's" in report, report
    finally:
        drop_database(tenants.server, other)


def test_a_database_setting_changed_under_pooled_sessions_reaches_them(tenants: Tenants) -> None:
    """``ALTER DATABASE … SET search_path`` changes new sessions only: the agent's watch
    sees it, the library reads its session context again, replaces its pooled sessions,
    and caches under the new context — never a value no session would return."""
    with tenants.cache({"pool_size": 2}) as cache:
        assert cached(cache, account_name, 1) == "public one"
        with tenants.admin() as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET search_path = tenant_b, public").format(
                    sql.Identifier(tenants.database)
                )
            )
        try:
            wait_until(
                lambda: read(cache, account_name, 1)[0] == "b one",
                "the pooled sessions to take the new search_path",
                timeout=20,
            )
            token = write(cache, "UPDATE tenant_b.acct SET name = 'b two' WHERE id = 1")
            assert read(cache, account_name, 1, not_before=token)[0] == "b two"
            write(cache, "UPDATE public.acct SET name = 'public two' WHERE id = 1")
            assert cached(cache, account_name, 1) == "b two"
            with cache.read_only() as tx:
                assert tx.query_one("SHOW search_path") == ("tenant_b, public",)
        finally:
            with tenants.admin() as admin:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} RESET search_path").format(
                        sql.Identifier(tenants.database)
                    )
                )


def test_async_caches_key_by_their_session_context(tenants: Tenants) -> None:
    async def body() -> None:
        a = await txcache.connect_async(
            tenants.dsn(**search_path("tenant_a,public")),
            nodes=tenants.stack.node_addresses,
            agent=tenants.stack.agent_address,
            refresh_interval=0.05,
        )
        b = await txcache.connect_async(
            tenants.dsn(**search_path("tenant_b,public")),
            nodes=tenants.stack.node_addresses,
            agent=tenants.stack.agent_address,
            refresh_interval=0.05,
        )
        async with a, b:
            for _ in range(200):
                async with a.read_only(staleness=60) as tx:
                    assert await account_name_async(1) == "a one"
                    if tx.hits:
                        break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("account_name_async(1) was never cached")
            async with b.read_only(staleness=60):
                assert await account_name_async(1) == "b one"

    asyncio.run(body())
