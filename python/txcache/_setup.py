"""``txcache setup``: prepare a PostgreSQL database for txcache, idempotently.

:func:`setup_database` first *plans* every step from the catalogs (changing nothing), raises
:class:`SetupError` naming every unmet prerequisite, and only then applies the plan, step by
step, unless ``check`` is set. Each step of the :class:`SetupReport` says what it found or
did. The objects it creates and the DDL message format are described in ``docs/setup.md``.
With ``administrator`` it plans for a role that may do everything (the DBA who runs
:meth:`SetupReport.script`, the plan as SQL), not for the connecting one. On a managed
service (:mod:`txcache._managed`) its advice is the service's.

Exceptions::

    TxcacheError            base of every txcache error
     └── SetupError         the database cannot be set up; the message says what to change
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from txcache._ddl_notice import (
    DDL_COUNTER,
    DDL_MESSAGE_PREFIX,
    TRUNCATE_TRIGGER,
    function_signatures,
    functions,
    read_sql,
)
from txcache._managed import Service, find_service
from txcache.errors import TxcacheError

__all__ = [
    "DDL_MESSAGE_PREFIX",
    "SetupError",
    "SetupReport",
    "SetupStep",
    "StepStatus",
    "TxcacheError",
    "setup_database",
]

_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
_SHOWN = 8  # objects named in a step's detail before "and N more"
_EVENT_TRIGGERS = (
    ("txcache_ddl_command_start", "ddl_command_start"),
    ("txcache_ddl_command_end", "ddl_command_end"),
    ("txcache_sql_drop", "sql_drop"),
)
EVENT_TRIGGER_NAMES = tuple(name for name, _ in _EVENT_TRIGGERS)
"""The DDL event triggers setup installs."""
Connection = psycopg.Connection[TupleRow]


class SetupError(TxcacheError):
    """The database cannot be set up for txcache; ``problems`` lists what to change."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            message = self.problems[0]
        else:
            lines = "\n".join(f"  - {problem}" for problem in self.problems)
            message = f"the database is not ready for txcache:\n{lines}"
        super().__init__(message)


class StepStatus(enum.Enum):
    """What one step found or did."""

    OK = "ok"  # already in place
    CHANGED = "changed"  # created or altered by this run
    MISSING = "missing"  # ``check`` only: a real run would change this
    WARNING = "warning"  # works, with a caveat the detail explains


@dataclass(frozen=True)
class SetupStep:
    """One line of the report: the step's name, its status and a sentence of detail."""

    name: str
    status: StepStatus
    detail: str


@dataclass
class SetupReport:
    """Everything one run of :func:`setup_database` found and did, in order."""

    target: str
    check: bool
    steps: list[SetupStep] = field(default_factory=list)
    statements: list[tuple[str, str]] = field(default_factory=list)
    """Every statement the run executed (``check``: would execute), with its step's name."""
    administrator: bool = False
    """Planned for a role that may do everything (``--print-sql``)."""

    @property
    def changed(self) -> bool:
        """Whether this run changed the database."""
        return any(step.status is StepStatus.CHANGED for step in self.steps)

    @property
    def missing(self) -> list[SetupStep]:
        """With ``check``: the steps a real run would carry out."""
        return [step for step in self.steps if step.status is StepStatus.MISSING]

    @property
    def warnings(self) -> list[SetupStep]:
        """Steps that work but deserve attention."""
        return [step for step in self.steps if step.status is StepStatus.WARNING]

    def step(self, name: str) -> SetupStep:
        """The step called ``name``."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def format(self) -> str:
        """The report as aligned lines of text, with a closing summary."""
        mode = " --print-sql" if self.administrator else " --check" if self.check else ""
        lines = [f"txcache setup{mode}: {self.target}"]
        width = max((len(step.name) for step in self.steps), default=0)
        for step in self.steps:
            lines.append(f"  {step.status.value:<8} {step.name:<{width}}  {step.detail}")
        lines.append(self._summary())
        return "\n".join(lines)

    def script(self) -> str:
        """:attr:`statements` as a SQL script for an administrator to run (``psql -f``):
        each step's statements under a comment naming it; empty when nothing is to do."""
        if not self.statements:
            return ""
        lines = [
            f"-- txcache setup for {self.target}",
            "-- Run as a superuser (or the managed service's administrator), outside a",
            "-- transaction block: psql -v ON_ERROR_STOP=1 -f <this file>",
        ]
        step = None
        for name, statement in self.statements:
            if name != step:
                lines += ["", f"-- {name}"]
                step = name
            lines.append(f"{statement};")
        return "\n".join(lines) + "\n"

    def _summary(self) -> str:
        warned = f" ({len(self.warnings)} warning(s))" if self.warnings else ""
        if self.missing:
            how = (
                "have an administrator run the SQL printed to stdout"
                if self.administrator
                else "run `txcache setup` without --check to carry them out"
            )
            return f"{len(self.missing)} step(s) missing{warned}: {how}"
        if self.changed:
            changes = sum(step.status is StepStatus.CHANGED for step in self.steps)
            return f"done: {changes} step(s) changed the database{warned}"
        return f"everything was already in place{warned}"


@dataclass
class _Plan:
    """One step: what is there, and the statements that would complete it."""

    name: str
    found: str  # the detail when nothing is to do
    todo: str = ""  # the detail of the change, as a verb phrase ("create …")
    statements: list[sql.SQL | sql.Composed] = field(default_factory=list)
    warning: str = ""  # a caveat that makes an otherwise complete step a WARNING

    def step(self, *, check: bool) -> SetupStep:
        if self.statements and check:
            return SetupStep(self.name, StepStatus.MISSING, f"would {self.todo}")
        if self.statements and self.warning:
            return SetupStep(self.name, StepStatus.WARNING, f"{_past(self.todo)}; {self.warning}")
        if self.statements:
            return SetupStep(self.name, StepStatus.CHANGED, _past(self.todo))
        if self.warning:
            return SetupStep(self.name, StepStatus.WARNING, f"{self.found}; {self.warning}")
        return SetupStep(self.name, StepStatus.OK, self.found)


def _past(todo: str) -> str:
    verb, _, rest = todo.partition(" ")
    done = {
        "create": "created",
        "add": "added",
        "set": "set",
        "install": "installed",
        "take": "took",
    }
    return f"{done.get(verb, verb)} {rest}"


@dataclass(frozen=True)
class _Table:
    oid: int
    display: str  # schema-qualified, quoted where needed
    schema: str
    relname: str
    is_partition: bool
    owned: bool
    owner: str
    identity: str  # pg_class.relreplident: d(efault), n(othing), f(ull), i(ndex)
    problem: str | None = None  # why PostgreSQL would refuse its UPDATE and DELETE under FULL
    keyed: bool = False  # it has a primary key (REPLICA IDENTITY DEFAULT keeps them working)
    key_chosen: bool = False  # named by --key-identity: its key is its identity, not FULL

    @property
    def wanted(self) -> str | None:
        """The replica identity setup gives the table (``FULL``, ``DEFAULT``), or ``None``
        to leave it as it is: FULL wherever PostgreSQL allows it and the operator did not
        choose the key; otherwise DEFAULT in place of FULL or NOTHING if the table has a
        primary key (a USING INDEX identity is kept)."""
        if self.problem is None and not self.key_chosen:
            return None if self.identity == "f" else "FULL"
        return "DEFAULT" if self.identity in ("f", "n") and self.keyed else None

    @property
    def full(self) -> bool:
        """Whether the table has REPLICA IDENTITY FULL once setup has run."""
        return (self.wanted or {"f": "FULL"}.get(self.identity)) == "FULL"

    @property
    def unwritable(self) -> bool:
        """Whether no identity lets PostgreSQL publish the table's UPDATE and DELETE: FULL is
        refused, and there is neither a primary key nor an identity index."""
        return self.problem is not None and self.identity != "i" and not self.keyed


@dataclass(frozen=True)
class _Capabilities:
    """What the role may do, found by trying it in a transaction rolled back, not read
    from its attributes: managed services grant these through roles of their own (on RDS
    ``rds_superuser`` may create event triggers and members of ``rds_replication`` may
    replicate), which ``rolsuper`` and ``rolreplication`` do not show."""

    replicate: bool
    event_triggers: bool
    schema_publications: bool

    @classmethod
    def of_superuser(cls) -> _Capabilities:
        return cls(replicate=True, event_triggers=True, schema_publications=True)


# Each probe's statements, run in a transaction that is rolled back whatever happens.
_PROBE_REPLICATION = (
    "SELECT pg_drop_replication_slot(slot_name::text) "
    "FROM pg_create_physical_replication_slot('txcache_probe_' || pg_backend_pid(), false, true)"
)
_PROBE_EVENT_TRIGGER = (
    "CREATE FUNCTION pg_temp.txcache_probe() RETURNS event_trigger LANGUAGE plpgsql "
    "AS $$BEGIN END$$; "
    "CREATE EVENT TRIGGER txcache_probe ON ddl_command_end "
    "EXECUTE FUNCTION pg_temp.txcache_probe()"
)
_PROBE_SCHEMA_PUBLICATION = "CREATE PUBLICATION txcache_probe FOR TABLES IN SCHEMA {}"


def _capabilities(conn: Connection, facts: dict[str, Any], schema: str) -> _Capabilities:
    """Try what setup and the agent need; a superuser is not asked (it may do all, and a
    probe's DDL would be one more notice to the caches)."""
    if facts["rolsuper"]:
        return _Capabilities.of_superuser()
    schema_publication = sql.SQL(_PROBE_SCHEMA_PUBLICATION).format(sql.Identifier(schema))
    return _Capabilities(
        # Only a refusal says it cannot: a full slot table or a low wal_level is another
        # problem, which the slot step reports.
        replicate=_allowed(conn, sql.SQL(_PROBE_REPLICATION), refused_only=True),
        event_triggers=_allowed(conn, sql.SQL(_PROBE_EVENT_TRIGGER)),
        schema_publications=int(facts["server_version_num"]) >= 150000
        and _allowed(conn, schema_publication),
    )


def _allowed(
    conn: Connection, statement: sql.Composed | sql.SQL, refused_only: bool = False
) -> bool:
    """Whether ``statement`` runs, in a transaction rolled back either way; with
    ``refused_only`` only a privilege error counts as no (any other failure is a problem
    another step reports)."""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return False
    except psycopg.Error:
        return refused_only
    return True


@dataclass
class _Context:
    """The connection, the request and the facts every step plans from."""

    conn: Connection
    schemas: tuple[str, ...]
    slot: str
    publication: str
    facts: dict[str, Any]
    tables: list[_Table]
    may: _Capabilities
    service: Service | None = None
    administrator: bool = False  # planning for a role that may do everything
    problems: list[str] = field(default_factory=list)
    found: list[SetupStep] = field(default_factory=list)

    @property
    def role(self) -> str:
        return str(self.facts["rolname"])

    @property
    def superuser(self) -> bool:
        return bool(self.facts["rolsuper"])

    @property
    def version(self) -> int:
        return int(self.facts["server_version_num"])

    def rows(self, query: str, *params: object) -> list[TupleRow]:
        return self.conn.execute(query, params).fetchall()

    def ok(self, name: str, detail: str) -> None:
        self.found.append(SetupStep(name, StepStatus.OK, detail))


def setup_database(
    dsn: str,
    schemas: Iterable[str] = ("public",),
    slot: str = "txcache",
    publication: str = "txcache",
    *,
    check: bool = False,
    administrator: bool = False,
    key_identity: Iterable[str] = (),
) -> SetupReport:
    """Make the database at ``dsn`` ready for txcache; with ``check``, only report.
    With ``administrator``, plan for a role that may do everything, not the connecting one
    (whose missing privileges are then steps, not errors): with ``check``, the report's
    :meth:`~SetupReport.script` is the SQL a DBA must run.

    Tracks every table of ``schemas``: a publication ``publication`` of them (with
    ``publish_via_partition_root``), ``REPLICA IDENTITY FULL`` on each, a DDL event trigger
    (superuser only) and the logical replication slot ``slot`` (pgoutput). Idempotent: a
    second run changes nothing. Raises :class:`SetupError` before changing anything if a
    prerequisite is unmet (``wal_level``, free slots, the role's privileges, …).

    The tables ``key_identity`` names (``schema.table``, or a table's name in one tracked
    schema) keep their key as replica identity instead of FULL: their writes log less and
    cost the logical decoding less, and their updates invalidate more (docs/setup.md,
    "Replica identity"). Each must have a primary key or an identity index.
    """
    listed = [schemas] if isinstance(schemas, str) else schemas
    wanted = _validate(tuple(dict.fromkeys(listed)), slot, publication)
    try:
        conn = psycopg.connect(dsn, autocommit=True, application_name="txcache setup")
    except psycopg.Error as error:
        raise SetupError([f"cannot connect to PostgreSQL: {error}".strip()]) from error
    with conn:
        try:
            # What setup reads of schema txcache may belong to another role: a row security
            # policy there would run that role's code as this one, so any is an error instead.
            conn.execute("SET row_security = off")
            ctx = _context(conn, wanted, slot, publication, administrator)
            _choose_key_identity(
                ctx, [key_identity] if isinstance(key_identity, str) else key_identity
            )
            _check_prerequisites(ctx)
            plans = _plan_all(ctx)
        except psycopg.Error as error:
            raise SetupError([f"reading the catalogs failed: {error}".strip()]) from error
        if ctx.problems:
            raise SetupError(ctx.problems)
        report = SetupReport(_describe(ctx), check, list(ctx.found), administrator=administrator)
        for plan in plans:
            if not check:
                _apply(conn, plan)
            report.steps.append(plan.step(check=check))
            report.statements += [(plan.name, s.as_string(conn)) for s in plan.statements]
    return report


def _plan_all(ctx: _Context) -> list[_Plan]:
    """Every step that may change the database, in the order they are applied: first what
    the DDL triggers run taken over from a role they may not trust, before any DDL of the
    plan fires them."""
    owner = _plan_trigger_owner(ctx)
    publish, published = _plan_publication(ctx)
    trigger = _plan_ddl_trigger(ctx)
    identity = not trigger.warning  # the trigger is (or will be) there
    plans = [*owner, *_plan_replication(ctx), publish, _plan_replica_identity(ctx)]
    plans += [*_plan_coarse_tables(ctx), trigger, *_plan_new_tables(published, identity)]
    return [*plans, _plan_slot(ctx)]


def _validate(schemas: tuple[str, ...], slot: str, publication: str) -> tuple[str, ...]:
    problems = []
    if not schemas:
        problems.append("no schema given: name at least one schema to track")
    if "txcache" in schemas:
        problems.append("schema txcache holds txcache's own objects and cannot be tracked")
    if not _SLOT_NAME.fullmatch(slot):
        problems.append(
            f"invalid slot name {slot!r}: use 1 to 63 lower-case letters, digits and underscores"
        )
    if not publication:
        problems.append("the publication name is empty")
    if problems:
        raise SetupError(problems)
    return schemas


def _context(
    conn: Connection, schemas: tuple[str, ...], slot: str, publication: str, administrator: bool
) -> _Context:
    # The server's settings and the role (sql/setup_facts.sql), then the tracked tables.
    cursor = conn.execute(read_sql("setup_facts"))
    names = [column.name for column in cursor.description or ()]
    facts = dict(zip(names, cursor.fetchone() or (), strict=True))
    rows = conn.execute(read_sql("setup_tables"), {"schemas": list(schemas)}).fetchall()
    # The publication is about to publish stored generated columns, where that exists (18+).
    stored = publication if int(facts["server_version_num"]) >= 180000 else None
    problems = _identity_problems(conn, [row[0] for row in rows], stored)
    tables = []
    for oid, display, schema, relname, is_partition, owned, owner, identity in rows:
        problem, keyed = problems.get(oid, (None, False))
        fields = (oid, display, schema, relname, is_partition, owned, owner, identity)
        tables.append(_Table(*fields, problem, keyed))
    if administrator:  # who runs the plan may do everything
        tables = [dataclasses.replace(table, owned=True) for table in tables]
        may = _Capabilities.of_superuser()
    else:
        may = _capabilities(conn, facts, schemas[0])
    service = find_service(conn)
    ctx = _Context(conn, schemas, slot, publication, facts, tables, may, service, administrator)
    if service is not None:
        ctx.ok("service", f"{service.name} (it has role {service.marker})")
        for caveat in service.caveats:
            ctx.found.append(SetupStep("service", StepStatus.WARNING, caveat))
    return ctx


def _identity_problems(
    conn: Connection, oids: list[int], stored: str | None
) -> dict[int, tuple[str | None, bool]]:
    """Per table: why REPLICA IDENTITY FULL would make PostgreSQL refuse its UPDATE and DELETE
    (``None``: it would not) and whether it has a primary key. The query is the body of the
    trigger's ``txcache.identity_problems`` (one home for the rule), run with ``$n``
    placeholders: setup may run before, or without, the functions being installed."""
    cursor = psycopg.RawCursor(conn)
    cursor.execute(read_sql("identity_problems"), (oids, stored))
    return {oid: (problem, keyed) for oid, problem, keyed in cursor.fetchall()}


def _choose_key_identity(ctx: _Context, names: Iterable[str]) -> None:
    """Marks the tables ``key_identity`` names; a name that is no single tracked table, or a
    table without a key to be its identity, is a problem."""
    for name in dict.fromkeys(names):
        matches = [t for t in ctx.tables if name in (t.display, f"{t.schema}.{t.relname}")]
        if not matches and "." not in name:
            matches = [t for t in ctx.tables if t.relname == name]
        if len(matches) != 1:
            where = ", ".join(ctx.schemas)
            ctx.problems.append(
                f"--key-identity {name} names no table of the tracked schemas ({where}); "
                "name an ordinary table or a partition, as schema.table"
                if not matches
                else f"--key-identity {name} names a table in several tracked schemas "
                f"({_names([t.display for t in matches])}): name it as schema.table"
            )
            continue
        table = matches[0]
        if not table.keyed and table.identity != "i":
            ctx.problems.append(
                f"--key-identity {name}: table {table.display} has neither a primary key "
                "nor an identity index to be its replica identity: add a primary key, or "
                "leave it FULL"
            )
            continue
        ctx.tables[ctx.tables.index(table)] = dataclasses.replace(table, key_chosen=True)


def _describe(ctx: _Context) -> str:

    info = ctx.conn.info
    where = f"{info.user}@{info.host}:{info.port}/{info.dbname}"
    return f"{where} (PostgreSQL {ctx.facts['server_version']})"


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown if len(items) <= _SHOWN else f"{shown} and {len(items) - _SHOWN} more"


# -- prerequisites ---------------------------------------------------------------------------


def _check_prerequisites(ctx: _Context) -> None:
    """Server settings, the role's privileges and the schemas: found steps and problems."""
    facts = ctx.facts
    if ctx.version < 140000:
        ctx.problems.append(f"PostgreSQL {facts['server_version']} is too old: txcache needs 14+")
    if facts["wal_level"] != "logical":
        fix = "run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL"
        if ctx.service is not None:
            fix = f"on {ctx.service.name}, {ctx.service.logical_decoding}"
        ctx.problems.append(f"wal_level is {facts['wal_level']}, txcache needs logical: {fix}")
    else:
        ctx.ok("wal_level", "logical")
    _check_capacity(ctx)
    _check_wal_keep(ctx)
    _check_role(ctx)
    existing = {row[0] for row in ctx.rows("SELECT nspname::text FROM pg_namespace")}
    for schema in ctx.schemas:
        if schema not in existing:
            ctx.problems.append(f"schema {schema} does not exist: create it or leave it out")
    for table in ctx.tables:
        if table.wanted and not table.owned:
            ctx.problems.append(
                f"role {ctx.role} does not own table {table.display} (owner: {table.owner}), "
                f"so it cannot set its replica identity: run ALTER TABLE {table.display} "
                f"REPLICA IDENTITY {table.wanted} as its owner, or run txcache setup as a "
                "superuser"
            )
        if table.unwritable:
            ctx.problems.append(
                f"table {table.display} has no replica identity under which PostgreSQL "
                "publishes its UPDATE and DELETE (it refuses them instead): REPLICA IDENTITY "
                f"FULL is refused ({table.problem}) and it has no primary key: add a primary "
                "key, or a unique index on NOT NULL columns and ALTER TABLE "
                f"{table.display} REPLICA IDENTITY USING INDEX <index>"
            )


def _check_capacity(ctx: _Context) -> None:
    for setting in ("max_replication_slots", "max_wal_senders"):
        value = int(ctx.facts[setting])
        if value <= 0:
            ctx.problems.append(
                f"{setting} is 0, txcache needs at least 1: run ALTER SYSTEM SET {setting} = 10 "
                "and restart PostgreSQL"
            )
        elif setting == "max_replication_slots":
            ctx.ok(setting, f"{value} ({ctx.facts['slots_used']} in use)")
        else:
            ctx.ok(setting, str(value))


def _check_wal_keep(ctx: _Context) -> None:
    value = str(ctx.facts["max_slot_wal_keep_size"])
    if value != "-1":
        ctx.ok("max_slot_wal_keep_size", value)
        return
    detail = (
        "-1 (unlimited): a stopped agent makes PostgreSQL keep WAL until the disk fills; "
        "bound it, e.g. ALTER SYSTEM SET max_slot_wal_keep_size = '10GB' and SELECT "
        "pg_reload_conf() (past the bound the slot is invalidated and the caches are flushed)"
    )
    ctx.found.append(SetupStep("max_slot_wal_keep_size", StepStatus.WARNING, detail))


def _check_role(ctx: _Context) -> None:
    if ctx.superuser:
        ctx.ok("role", f"{ctx.role} is a superuser")
    elif ctx.facts["rolreplication"]:
        ctx.ok("role", f"{ctx.role} has REPLICATION (not a superuser)")
    elif ctx.administrator:
        ctx.ok("role", f"{ctx.role} (the plan is for an administrator to run)")
    elif ctx.may.replicate:
        ctx.ok("role", f"{ctx.role} may replicate (granted by a role, as managed services do)")
    else:
        ctx.problems.append(
            f"role {ctx.role} lacks the REPLICATION attribute the replication slot needs: "
            f"{_replication_fix(ctx)}, or run txcache setup as a superuser"
        )


def _replication_fix(ctx: _Context) -> str:
    if ctx.service is not None:
        return f"on {ctx.service.name}, {ctx.service.replication.format(role=ctx.role)}"
    return f"run ALTER ROLE {ctx.role} REPLICATION as a superuser"


def _plan_replication(ctx: _Context) -> list[_Plan]:
    """For an administrator: the right to replicate for the connecting role (the agent's),
    if it has none. A managed service grants it its own way, which is advice, not SQL."""
    if not ctx.administrator or ctx.superuser or ctx.facts["rolreplication"]:
        return []
    if _capabilities(ctx.conn, ctx.facts, ctx.schemas[0]).replicate:
        return []
    if ctx.service is not None:
        fix = ctx.service.replication.format(role=ctx.role)
        lacks = f"role {ctx.role} may not replicate"
        return [_Plan("replication", lacks, warning=f"on {ctx.service.name}, {fix}")]
    plan = _Plan("replication", "", todo=f"set REPLICATION on role {ctx.role}")
    plan.statements.append(sql.SQL("ALTER ROLE {} REPLICATION").format(sql.Identifier(ctx.role)))
    return [plan]


# -- publication -----------------------------------------------------------------------------


@dataclass
class _Publication:
    all_tables: bool
    via_root: bool
    all_actions: bool
    owned: bool
    owner: str
    schemas: set[str]
    tables: set[int]
    filtered: list[str]
    gencols: bool  # publishes stored generated columns (or the server has no such option)


def _find_publication(ctx: _Context) -> _Publication | None:
    rows = ctx.rows(
        "SELECT oid, puballtables, pubviaroot, pubinsert AND pubupdate AND pubdelete AND "
        "pubtruncate, pg_has_role(pubowner, 'USAGE'), pg_get_userbyid(pubowner)::text "
        "FROM pg_publication WHERE pubname = %s",
        ctx.publication,
    )
    if not rows:
        return None
    oid, all_tables, via_root, all_actions, owned, owner = rows[0]
    owned = owned or ctx.administrator
    query = "SELECT prrelid FROM pg_publication_rel WHERE prpubid = %s"
    tables = {row[0] for row in ctx.rows(query, oid)}
    schemas: set[str] = set()
    filtered: list[str] = []
    if ctx.version >= 150000:
        schemas = {
            row[0]
            for row in ctx.rows(
                "SELECT n.nspname::text FROM pg_publication_namespace p "
                "JOIN pg_namespace n ON n.oid = p.pnnspid WHERE p.pnpubid = %s",
                oid,
            )
        }
        filtered = [
            row[0]
            for row in ctx.rows(
                "SELECT prrelid::regclass::text FROM pg_publication_rel WHERE prpubid = %s "
                "AND (prqual IS NOT NULL OR prattrs IS NOT NULL) ORDER BY 1",
                oid,
            )
        ]
    gencols = True
    if ctx.version >= 180000:
        query = "SELECT pubgencols = 's' FROM pg_publication WHERE oid = %s"
        gencols = bool(ctx.rows(query, oid)[0][0])
    return _Publication(
        all_tables, via_root, all_actions, owned, owner, schemas, tables, filtered, gencols
    )


def _plan_publication(ctx: _Context) -> tuple[_Plan, bool]:
    """Whole schemas (15+, where the role may: a superuser, or a managed service's
    administrator) or, failing that, the tables one by one.

    Also says whether tables created later will be published without another run.
    """
    by_schema = ctx.may.schema_publications
    existing = _find_publication(ctx)
    if existing is None:
        return _plan_new_publication(ctx, by_schema), by_schema
    plan = _Plan("publication", "")
    _plan_existing_publication(ctx, plan, existing, by_schema)
    automatic = existing.all_tables or set(ctx.schemas) <= existing.schemas
    return plan, by_schema or automatic


def _plan_new_tables(published: bool, identity: bool) -> list[_Plan]:
    """A warning when tables created later are not published or not given FULL identity."""
    missing = [what for what, ok in (("published", published), ("made FULL", identity)) if not ok]
    if not missing:
        return []
    return [
        _Plan(
            "new tables",
            f"tables created later will not be {' nor '.join(missing)} automatically",
            warning="run txcache setup again after creating tables (or run it once as a "
            "superuser, on PostgreSQL 15 or later)",
        )
    ]


def _publication_options(ctx: _Context) -> sql.SQL:
    """Partitions' changes under their root's name; stored generated columns published (18+),
    so that REPLICA IDENTITY FULL is allowed on their tables and their values are known."""
    if ctx.version >= 180000:
        return sql.SQL(
            "WITH (publish_via_partition_root = true, publish_generated_columns = stored)"
        )
    return sql.SQL("WITH (publish_via_partition_root = true)")


def _plan_new_publication(ctx: _Context, by_schema: bool) -> _Plan:
    name = sql.Identifier(ctx.publication)
    options = _publication_options(ctx)
    plan = _Plan("publication", "")
    if by_schema:
        schemas = sql.SQL(", ").join(map(sql.Identifier, ctx.schemas))
        shown = ", ".join(ctx.schemas)
        plan.todo = f"create publication {ctx.publication} FOR TABLES IN SCHEMA {shown}"
        create = sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {} {}")
        plan.statements.append(create.format(name, schemas, options))
        return plan
    roots = [table for table in ctx.tables if not table.is_partition]
    _require_owned(ctx, roots, "add it to the publication")
    listed = sql.SQL(", ").join(sql.Identifier(t.schema, t.relname) for t in roots)
    target = sql.SQL("FOR TABLE {} ").format(listed) if roots else sql.SQL("")
    plan.todo = f"create publication {ctx.publication} of {len(roots)} table(s)"
    plan.statements.append(sql.SQL("CREATE PUBLICATION {} {}{}").format(name, target, options))
    if not (ctx.superuser or ctx.administrator or ctx.facts["can_create"]):
        ctx.problems.append(
            f"role {ctx.role} may not create the publication: run GRANT CREATE ON DATABASE "
            f"{ctx.facts['database']} TO {ctx.role}, or run txcache setup as a superuser"
        )
    return plan


def _plan_existing_publication(
    ctx: _Context, plan: _Plan, pub: _Publication, by_schema: bool
) -> None:
    name = sql.Identifier(ctx.publication)
    todo: list[str] = []
    if pub.filtered:
        ctx.problems.append(
            f"publication {ctx.publication} filters rows or columns of {_names(pub.filtered)}; "
            "txcache must see every change: remove the WHERE clauses and column lists"
        )
    if not pub.all_tables:
        _plan_coverage(ctx, plan, pub, by_schema, todo)
    if not pub.via_root:
        todo.append("set publish_via_partition_root")
        plan.statements.append(
            sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(name)
        )
    if not pub.all_actions:
        todo.append("publish insert, update, delete and truncate")
        plan.statements.append(
            sql.SQL(
                "ALTER PUBLICATION {} SET (publish = 'insert, update, delete, truncate')"
            ).format(name)
        )
    if not pub.gencols:
        todo.append("publish stored generated columns")
        plan.statements.append(
            sql.SQL("ALTER PUBLICATION {} SET (publish_generated_columns = stored)").format(name)
        )
    if plan.statements and not pub.owned:
        ctx.problems.append(
            f"publication {ctx.publication} needs changes ({'; '.join(todo)}) but role "
            f"{ctx.role} does not own it (owner: {pub.owner}): run txcache setup as its owner"
        )
    scope = "all tables" if pub.all_tables else _scope(pub)
    generated = " with stored generated columns" if ctx.version >= 180000 else ""
    plan.found = f"{ctx.publication} publishes {scope}{generated}, via the partition root"
    plan.todo = f"{'; '.join(todo)} (publication {ctx.publication})"


def _plan_coverage(
    ctx: _Context, plan: _Plan, pub: _Publication, by_schema: bool, todo: list[str]
) -> None:
    name = sql.Identifier(ctx.publication)
    if by_schema:
        schemas = [schema for schema in ctx.schemas if schema not in pub.schemas]
        if schemas:
            todo.append(f"add TABLES IN SCHEMA {', '.join(schemas)}")
            plan.statements.append(
                sql.SQL("ALTER PUBLICATION {} ADD TABLES IN SCHEMA {}").format(
                    name, sql.SQL(", ").join(map(sql.Identifier, schemas))
                )
            )
        return
    tables = [
        t
        for t in ctx.tables
        if not t.is_partition and t.schema not in pub.schemas and t.oid not in pub.tables
    ]
    _require_owned(ctx, tables, "add it to the publication")
    if tables:
        todo.append(f"add table(s) {_names([t.display for t in tables])}")
        listed = sql.SQL(", ").join(sql.Identifier(t.schema, t.relname) for t in tables)
        plan.statements.append(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(name, listed))


def _require_owned(ctx: _Context, tables: Iterable[_Table], action: str) -> None:
    for table in tables:
        if not table.owned and not table.wanted:  # else named by the prerequisites
            ctx.problems.append(
                f"role {ctx.role} does not own table {table.display} (owner: {table.owner}) "
                f"and cannot {action}: run txcache setup as its owner or as a superuser"
            )


def _scope(pub: _Publication) -> str:
    parts = []
    if pub.schemas:
        parts.append(f"TABLES IN SCHEMA {', '.join(sorted(pub.schemas))}")
    if pub.tables:
        parts.append(f"{len(pub.tables)} listed table(s)")
    return " and ".join(parts) or "no table"


# -- replica identity, DDL trigger, slot -----------------------------------------------------


def _plan_replica_identity(ctx: _Context) -> _Plan:
    pending = [table for table in ctx.tables if table.wanted]
    full = sum(table.full for table in ctx.tables)
    scope = "all" if full == len(ctx.tables) else f"{full} of"
    chosen = [table.display for table in ctx.tables if table.key_chosen]
    keys = f"; the key on {_names(chosen)} (--key-identity)" if chosen else ""
    plan = _Plan("replica identity", f"FULL on {scope} {len(ctx.tables)} tracked table(s){keys}")
    if pending:
        changes = []
        for wanted in ("FULL", "DEFAULT"):
            names = [t.display for t in pending if t.wanted == wanted]
            if names:
                changes.append(f"{wanted} on {_names(names)}")
        plan.todo = f"set REPLICA IDENTITY {'; '.join(changes)}{keys}"
        plan.statements.append(sql.SQL("SET lock_timeout = '10s'"))
        for table in pending:
            identifier = sql.Identifier(table.schema, table.relname)
            plan.statements.append(
                sql.SQL("ALTER TABLE {} REPLICA IDENTITY {}").format(
                    identifier, sql.SQL(table.wanted or "")
                )
            )
        plan.statements.append(sql.SQL("RESET lock_timeout"))
    return plan


def _plan_coarse_tables(ctx: _Context) -> list[_Plan]:
    """A warning naming the tables left without REPLICA IDENTITY FULL because PostgreSQL
    would refuse their UPDATE and DELETE under it: their changes invalidate more coarsely."""
    coarse = [t for t in ctx.tables if t.problem is not None and not t.unwritable]
    coarse = [t for t in coarse if not t.key_chosen]

    if not coarse:
        return []
    named = _names([f"{t.display} ({t.problem})" for t in coarse])
    return [
        _Plan(
            "coarse tables",
            f"no REPLICA IDENTITY FULL on {named}: PostgreSQL would refuse their UPDATE and "
            "DELETE under it",
            warning="their updates and deletes invalidate every cached read of the table "
            "wherever the old values of its indexed columns are not sent (docs/setup.md, "
            '"Replica identity")',
        )
    ]


def _plan_ddl_trigger(ctx: _Context) -> _Plan:
    """The event trigger; a warning instead if it is missing and the role may not create
    one (tried, not read from ``rolsuper``)."""
    plan = _plan_trigger(ctx)
    if ctx.may.event_triggers or not plan.statements:
        return plan
    missing = "" if plan.todo.startswith("install txcache") else f": {plan.todo}"
    who = ctx.service.event_triggers if ctx.service is not None else "a superuser"
    not_installed = (
        f"not installed{missing} (role {ctx.role} may not create event triggers: {who} may)"
    )
    # What an agent without the triggers needs (the fingerprint functions, the table of the
    # last one checked) goes in all the same where the role may: no event trigger is needed.
    objects = _Plan("ddl trigger", "")
    parts: list[str] = []
    if _may_create_objects(ctx):
        _plan_trigger_objects(ctx, objects, parts)
    return _Plan(
        "ddl trigger",
        not_installed,
        todo=f"install {', '.join(parts)}; the event triggers are {not_installed}",
        statements=objects.statements,
        warning="schema changes would not reach the caches, so txcache-agent refuses to "
        "start (the library then reads the database, uncached) unless it runs with "
        "--ddl-tracking fingerprint, which checks the catalog at every pin instead and "
        'invalidates everything at a schema change (docs/agent.md, "Without event '
        'triggers"); or run setup again as a role that may create event triggers',
    )


def _plan_trigger_owner(ctx: _Context) -> list[_Plan]:
    """The DDL triggers run schema ``txcache``'s functions as whoever runs DDL — a superuser
    too — so a role that owns them, or the schema, could act with that user's rights.
    Where such a role owns any (:func:`_untrusted_objects`), a step that takes them over in
    one transaction, the triggers disabled meanwhile so that none of that code runs (a role
    that may not create event triggers gets a warning instead); no step otherwise."""
    untrusted = _untrusted_objects(ctx)
    if not untrusted:
        return []
    owners = _names(sorted({owner for _, owner in untrusted}))
    functions_ = [name for name, _ in untrusted if name.startswith("function ")]
    others = [name for name, _ in untrusted if not name.startswith("function ")]
    listed = [*others, f"{len(functions_)} function(s)"] if functions_ else others
    what = f"{', '.join(listed)} belong to role(s) {owners}"
    existing = _triggers(ctx)
    if not ctx.may.event_triggers:
        warning = (
            "the DDL triggers run them as whoever runs DDL, a superuser too: have a superuser "
            "run the script of `txcache setup --print-sql`, which takes them over"
        )
        return [_Plan("ddl trigger owner", what, warning=warning)] if existing else []
    triggers = [sql.Identifier(name) for name in existing]
    ours = sql.SQL(", ").join(
        sql.SQL("to_regprocedure({})").format(sql.Literal(signature))
        for signature in function_signatures()
    )
    statements: list[sql.SQL | sql.Composed] = [sql.SQL("BEGIN")]
    statements += [sql.SQL("ALTER EVENT TRIGGER {} DISABLE").format(t) for t in triggers]
    statements += [
        sql.SQL("ALTER SCHEMA txcache OWNER TO CURRENT_USER"),
        sql.SQL(_TAKE_OVER).format(ours=ours, counter=sql.Literal(DDL_COUNTER)),
        *(create for _, _, create in functions()),
    ]
    statements += [sql.SQL("ALTER EVENT TRIGGER {} ENABLE ALWAYS").format(t) for t in triggers]
    return [
        _Plan(
            "ddl trigger owner",
            what,
            todo=f"take over schema txcache from role(s) {owners}: {what}",
            statements=[*statements, sql.SQL("COMMIT")],
        )
    ]


def _triggers(ctx: _Context) -> list[str]:
    """The DDL event triggers of txcache's names that exist."""
    rows = ctx.rows(
        "SELECT evtname::text FROM pg_event_trigger WHERE evtname = ANY(%s) ORDER BY 1",
        [name for name, _ in _EVENT_TRIGGERS],
    )
    return [row[0] for row in rows]


def _untrusted_objects(ctx: _Context) -> list[tuple[str, str]]:
    """What of schema ``txcache`` the DDL triggers run or read — the schema, its functions,
    the table of tracked schemas, the DDL counter — that belongs to a role they may not
    trust, each ``(object, owner)``. Trusted are superusers, the triggers' owner, the
    managed service's administrators, and the role running setup where it is the one that
    creates the triggers."""
    if not ctx.rows("SELECT 1 FROM pg_namespace WHERE nspname = 'txcache'"):
        return []
    trusted = [
        "r.rolsuper",
        "r.oid IN (SELECT evtowner FROM pg_event_trigger WHERE evtname = ANY(%(triggers)s))",
    ]
    if ctx.service is not None:
        trusted.append("pg_has_role(r.oid, %(marker)s, 'MEMBER')")
    if ctx.may.event_triggers and not ctx.administrator:
        trusted.append("r.rolname = current_user")
    query = f"""
        SELECT what, pg_get_userbyid(owner)::text FROM (
            SELECT 'schema txcache' AS what, nspowner AS owner, 0 AS rank
            FROM pg_namespace WHERE nspname = 'txcache'
            UNION ALL
            SELECT 'function ' || p.oid::regprocedure::text, p.proowner, 1 FROM pg_proc p
            WHERE p.pronamespace = 'txcache'::regnamespace
            UNION ALL
            SELECT 'relation ' || c.oid::regclass::text, c.relowner, 2 FROM pg_class c
            WHERE c.oid IN (to_regclass('txcache.tracked_schemas'), to_regclass(%(counter)s))
        ) o
        WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = o.owner
                          AND ({" OR ".join(trusted)}))
        ORDER BY rank, what"""
    parameters = {
        "triggers": [name for name, _ in _EVENT_TRIGGERS],
        "marker": ctx.service.marker if ctx.service is not None else None,
        "counter": DDL_COUNTER,
    }
    return [(str(what), str(owner)) for what, owner in ctx.conn.execute(query, parameters)]


# Run by the role taking schema txcache over, the triggers disabled: the functions are
# re-owned (and written anew after) or, if not txcache's, dropped; the DDL counter is
# re-owned (its value must never go back); the table of tracked schemas is re-owned and
# loses what could run its old owner's code (row security policies, triggers, rules);
# every right to create in the schema is taken back.
_TAKE_OVER = """DO $take_over$
DECLARE
    f record;
    grantee oid;
    tracked regclass := to_regclass('txcache.tracked_schemas');
BEGIN
    FOR f IN SELECT p.oid::regprocedure AS signature, p.oid = ANY(ARRAY[{ours}]) AS ours
             FROM pg_proc p WHERE p.pronamespace = 'txcache'::regnamespace LOOP
        IF f.ours THEN
            EXECUTE format('ALTER FUNCTION %s OWNER TO CURRENT_USER', f.signature);
        ELSE
            EXECUTE format('DROP FUNCTION %s', f.signature);
        END IF;
    END LOOP;
    FOR grantee IN SELECT DISTINCT a.grantee FROM pg_namespace n, aclexplode(n.nspacl) a
                   WHERE n.nspname = 'txcache' AND a.privilege_type = 'CREATE'
                     AND a.grantee <> n.nspowner LOOP
        EXECUTE format('REVOKE CREATE ON SCHEMA txcache FROM %s',
                       CASE WHEN grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(grantee)) END);
    END LOOP;
    IF to_regclass({counter}) IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE %s OWNER TO CURRENT_USER', to_regclass({counter}));
    END IF;
    IF tracked IS NOT NULL THEN
        IF (SELECT relkind FROM pg_class WHERE oid = tracked) <> 'r' THEN
            RAISE EXCEPTION 'txcache.tracked_schemas is no longer a table: drop it, then '
                            'run txcache setup again';
        END IF;
        ALTER TABLE txcache.tracked_schemas OWNER TO CURRENT_USER;
        ALTER TABLE txcache.tracked_schemas NO FORCE ROW LEVEL SECURITY;
        ALTER TABLE txcache.tracked_schemas DISABLE ROW LEVEL SECURITY;
        FOR f IN SELECT polname FROM pg_policy WHERE polrelid = tracked LOOP
            EXECUTE format('DROP POLICY %I ON txcache.tracked_schemas', f.polname);
        END LOOP;
        FOR f IN SELECT tgname FROM pg_trigger WHERE tgrelid = tracked AND NOT tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON txcache.tracked_schemas', f.tgname);
        END LOOP;
        FOR f IN SELECT rulename FROM pg_rewrite WHERE ev_class = tracked LOOP
            EXECUTE format('DROP RULE %I ON txcache.tracked_schemas', f.rulename);
        END LOOP;
    END IF;
END
$take_over$"""


def _may_create_objects(ctx: _Context) -> bool:
    """Whether the role may create schema ``txcache`` and what goes in it."""
    query = (
        "SELECT CASE WHEN to_regnamespace('txcache') IS NULL "
        "THEN has_database_privilege(current_database(), 'CREATE') "
        "ELSE has_schema_privilege('txcache', 'CREATE') END"
    )
    return bool(ctx.rows(query)[0][0])


def _plan_trigger(ctx: _Context) -> _Plan:
    parts: list[str] = []
    plan = _Plan("ddl trigger", "")
    tracked = _plan_trigger_objects(ctx, plan, parts)
    rows = ctx.rows(
        "SELECT e.evtname::text, e.evtevent::text, e.evtenabled::text, "
        "e.evtfoid = to_regprocedure('txcache.ddl_notice()') "
        "FROM pg_event_trigger e WHERE e.evtname = ANY(%s)",
        [name for name, _ in _EVENT_TRIGGERS],
    )
    existing = {row[0]: row[1:] for row in rows}
    for name, event in _EVENT_TRIGGERS:
        _plan_event_trigger(plan, parts, name, event, existing.get(name))
    _plan_truncate_triggers(ctx, plan, parts)
    events = ", ".join(event for _, event in _EVENT_TRIGGERS)
    plan.found = f"txcache.ddl_notice() on {events}, tracking {', '.join(tracked)}"
    fresh = parts[:1] == ["schema txcache"]
    plan.todo = f"install {plan.found}" if fresh else f"install the DDL trigger: {', '.join(parts)}"
    return plan


def _plan_trigger_objects(ctx: _Context, plan: _Plan, parts: list[str]) -> list[str]:
    """Schema ``txcache``, its table of tracked schemas, the DDL counter, the agent's record
    of the shared catalogs and the functions."""
    if not ctx.rows("SELECT 1 FROM pg_namespace WHERE nspname = 'txcache'"):
        parts.append("schema txcache")
        plan.statements += [
            sql.SQL("CREATE SCHEMA txcache"),
            sql.SQL("GRANT USAGE ON SCHEMA txcache TO PUBLIC"),
        ]
    tracked: list[str] = []
    kind = ctx.rows("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%s)", _TRACKED)
    if kind and kind[0][0] != "r":  # reading it could run its owner's code: not read
        ctx.problems.append(f"{_TRACKED} is no longer a table: drop it, then run setup again")
    elif kind:
        tracked = [r[0] for r in ctx.rows(f"SELECT schema_name::text FROM {_TRACKED}")]
    else:
        parts.append("table txcache.tracked_schemas")
        plan.statements += [
            sql.SQL("CREATE TABLE txcache.tracked_schemas (schema_name name PRIMARY KEY)"),
            sql.SQL("GRANT SELECT ON txcache.tracked_schemas TO PUBLIC"),
        ]
    if not ctx.rows("SELECT to_regclass(%s) IS NOT NULL", DDL_COUNTER)[0][0]:
        parts.append(f"sequence {DDL_COUNTER}")
        counter = sql.SQL(DDL_COUNTER)
        plan.statements += [
            sql.SQL("CREATE SEQUENCE {}").format(counter),
            # Every role's DDL advances it (the trigger runs as the DDL's user); advancing it
            # only ever makes libraries cache less.
            sql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO PUBLIC").format(counter),
        ]
    # Where the agent records what it last read of roles and database/role settings
    # (docs/agent.md, "Changes no trigger sees"), and the digest of the schema it last
    # checked ("Schema changes the triggers miss").
    _plan_digest_table(ctx, plan, parts, "shared_catalog")
    _plan_digest_table(ctx, plan, parts, "schema_check")
    _plan_agent_lease(ctx, plan, parts)
    _plan_cache_nodes(ctx, plan, parts)
    new = [schema for schema in ctx.schemas if schema not in tracked]
    if new:
        parts.append(f"tracking of schema(s) {', '.join(new)}")
        plan.statements.append(
            sql.SQL("INSERT INTO txcache.tracked_schemas VALUES {}").format(
                sql.SQL(", ").join(sql.SQL("({})").format(sql.Literal(s)) for s in new)
            )
        )
    sources: dict[str, str] = dict(
        ctx.rows(
            "SELECT p.proname::text, p.prosrc FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = 'txcache'"
        )
    )
    for function, body, create in functions():
        if sources.get(function) != body:
            parts.append(f"function txcache.{function}()")
            plan.statements.append(create)
    return sorted({*tracked, *new})


def _plan_digest_table(ctx: _Context, plan: _Plan, parts: list[str], name: str) -> None:
    """``txcache.<name> (digest text)``, where the agent records a digest it read; written
    by the agent's role (the administrator creates it)."""
    exists = ctx.rows(f"SELECT to_regclass('txcache.{name}') IS NOT NULL")[0][0]
    if not exists:
        parts.append(f"table txcache.{name}")
        plan.statements.append(sql.SQL(f"CREATE TABLE txcache.{name} (digest text)"))
    if ctx.administrator and not ctx.superuser and not _writes_table(ctx, name, exists):
        parts.append(f"{ctx.role}'s rights on txcache.{name}")
        grant = f"GRANT SELECT, INSERT, UPDATE ON txcache.{name} TO {{}}"
        plan.statements.append(sql.SQL(grant).format(sql.Identifier(ctx.role)))


def _plan_agent_lease(ctx: _Context, plan: _Plan, parts: list[str]) -> None:
    """``txcache.agent_lease``: the lease by which agents of one slot take turns (one is
    active, the others stand by; docs/agent.md, "High availability"), written by the
    agent's role."""
    _plan_agent_table(ctx, plan, parts, "agent_lease", _AGENT_LEASE_TABLE)


def _plan_cache_nodes(ctx: _Context, plan: _Plan, parts: list[str]) -> None:
    """``txcache.cache_nodes``: the cache nodes an agent started without ``--node`` feeds,
    per slot (``txcache nodes``; docs/agent.md, "Cache nodes that join and leave")."""
    _plan_agent_table(ctx, plan, parts, "cache_nodes", CACHE_NODES_TABLE)


def _plan_agent_table(ctx: _Context, plan: _Plan, parts: list[str], name: str, create: str) -> None:
    """``txcache.<name>`` made with ``create`` if missing, and read and written by the
    agent's role."""
    exists = ctx.rows(f"SELECT to_regclass('txcache.{name}') IS NOT NULL")[0][0]
    if not exists:
        parts.append(f"table txcache.{name}")
        plan.statements.append(sql.SQL(create))
    if ctx.administrator and not ctx.superuser and not _writes_table(ctx, name, exists):
        parts.append(f"{ctx.role}'s rights on txcache.{name}")
        grant = f"GRANT SELECT, INSERT, UPDATE, DELETE ON txcache.{name} TO {{}}"
        plan.statements.append(sql.SQL(grant).format(sql.Identifier(ctx.role)))


_TRACKED = "txcache.tracked_schemas"

_AGENT_LEASE_TABLE = """CREATE TABLE txcache.agent_lease (
    slot text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    pid integer,
    backend_start timestamptz,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL)"""

CACHE_NODES_TABLE = """CREATE TABLE txcache.cache_nodes (
    slot text NOT NULL,
    address text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, address))"""
"""The cache nodes an agent without ``--node`` feeds, per slot."""


def _writes_table(ctx: _Context, table: str, exists: bool) -> bool:
    """Whether the connecting role may read and write ``txcache.<table>``."""
    if not exists:
        return False
    name = f"txcache.{table}"
    query = (
        "SELECT has_table_privilege(%s, 'SELECT') "
        "AND has_table_privilege(%s, 'INSERT') "
        "AND has_table_privilege(%s, 'UPDATE')"
    )
    return bool(ctx.rows(query, name, name, name)[0][0])


def _plan_truncate_triggers(ctx: _Context, plan: _Plan, parts: list[str]) -> None:
    """The TRUNCATE trigger on every partition of the tracked partitioned tables: a partition
    truncated directly is not replicated through its root's publication."""
    partitions = [table for table in ctx.tables if table.is_partition]
    if not partitions:
        return
    having = {
        row[0]
        for row in ctx.rows(
            "SELECT tgrelid::int FROM pg_trigger WHERE tgname = %s AND tgrelid = ANY(%s)",
            TRUNCATE_TRIGGER,
            [table.oid for table in partitions],
        )
    }
    lacking = [table for table in partitions if table.oid not in having]
    if lacking:
        parts.append(f"TRUNCATE trigger on {_names([t.display for t in lacking])}")
    # The event trigger's own function does it (one home for the trigger's definition);
    # it checks again when it runs, since an earlier step's ALTER TABLE may have done it.
    for table in lacking:
        plan.statements.append(
            sql.SQL("SELECT txcache.prepare_partitions({})").format(sql.Literal(table.oid))
        )


def _plan_event_trigger(
    plan: _Plan, parts: list[str], name: str, event: str, found: tuple[Any, ...] | None
) -> None:
    identifier = sql.Identifier(name)
    if found is not None and (found[0] != event or not found[2]):
        plan.statements.append(sql.SQL("DROP EVENT TRIGGER {}").format(identifier))
        found = None
    if found is None:
        plan.statements.append(
            sql.SQL("CREATE EVENT TRIGGER {} ON {} EXECUTE FUNCTION txcache.ddl_notice()").format(
                identifier, sql.Identifier(event)
            )
        )
    if found is None or found[1] != "A":
        parts.append(f"event trigger {name} ({event}, enabled always)")
        plan.statements.append(sql.SQL("ALTER EVENT TRIGGER {} ENABLE ALWAYS").format(identifier))


def _plan_slot(ctx: _Context) -> _Plan:
    failover_column = "failover" if ctx.version >= 170000 else "NULL::bool"
    rows = ctx.rows(
        "SELECT plugin::text, slot_type, database::text, wal_status, "
        f"confirmed_flush_lsn::text, active, {failover_column} "
        "FROM pg_replication_slots WHERE slot_name = %s",
        ctx.slot,
    )
    plan = _Plan("slot", "")
    if not rows:
        if int(ctx.facts["slots_used"]) >= int(ctx.facts["max_replication_slots"]):
            ctx.problems.append(
                f"all {ctx.facts['max_replication_slots']} replication slots are in use: drop an "
                "unused one (pg_drop_replication_slot) or raise max_replication_slots"
            )
        # From 17 a slot marked failover can be synchronized to standbys, so that it
        # survives a promotion (docs/managed-postgres.md, "Failover").
        failover = ctx.version >= 170000
        plan.todo = f"create logical replication slot {ctx.slot} (pgoutput{_FAILOVER[failover]})"
        create = "SELECT pg_create_logical_replication_slot({}, 'pgoutput'{})"
        option = sql.SQL(", failover => true" if failover else "")
        plan.statements.append(sql.SQL(create).format(sql.Literal(ctx.slot), option))
        return plan
    plugin, kind, database, wal_status, confirmed, active, failover_slot = rows[0]
    drop = f"drop it (SELECT pg_drop_replication_slot('{ctx.slot}')) or choose another --slot"
    if kind != "logical" or plugin != "pgoutput":
        ctx.problems.append(
            f"slot {ctx.slot} exists as a {kind} slot with plugin {plugin}, txcache needs a "
            f"logical slot with pgoutput: {drop}"
        )
    elif database != ctx.facts["database"]:
        ctx.problems.append(f"slot {ctx.slot} belongs to database {database}: {drop}")
    elif wal_status == "lost":
        ctx.problems.append(
            f"slot {ctx.slot} was invalidated (its WAL was removed): {drop}, then run txcache "
            "setup again; the cache nodes must drop their entries"
        )
    state = "in use" if active else "not in use"
    plan.found = f"{ctx.slot} (pgoutput{_FAILOVER[bool(failover_slot)]}), confirmed up to "
    plan.found += f"{confirmed}, {state}"
    if failover_slot is False:
        plan.warning = (
            "not marked failover, so a promoted standby will not have it: with the agent "
            f"stopped, run ALTER_REPLICATION_SLOT {ctx.slot} (FAILOVER true) in a replication "
            'connection (psql "dbname=... replication=database")'
        )
    return plan


_FAILOVER = {True: ", failover", False: ""}


def _apply(conn: Connection, plan: _Plan) -> None:
    for statement in plan.statements:
        try:
            conn.execute(statement)
        except psycopg.errors.LockNotAvailable as error:
            raise SetupError(
                [
                    f"{plan.name}: could not lock a table within 10 s ({error}): a long "
                    "transaction holds it; run txcache setup again when it has ended"
                ]
            ) from error
        except psycopg.Error as error:
            raise SetupError([f"{plan.name}: {error}".strip()]) from error
