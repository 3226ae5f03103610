"""The catalog facts that SQL → tag analysis needs, read from ``pg_catalog`` with psycopg.

:class:`Schema` holds one snapshot of them (a :class:`Catalog`: relations with their kind,
persistence, partition root, inheritance children, publication, columns with the type
family that allows fine tags, view definitions; functions, operators and types for the
safety checks, with :class:`TypeFacts` derived from every type's components; the search
path) together with the tag columns in force at a transaction's snapshot. ``_sql.analyze``
reads nothing else. Names in tags are escaped by :func:`escape_name`, the twin of the Rust
``escape_name`` (``crates/model/src/tag.rs``).

A relation whose changes the agent never sees (not in the publication, temporary,
unlogged, foreign, a system catalog, …) is described by :meth:`Catalog.table_problem`, so
that the analysis can refuse queries that read it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.rows import TupleRow

from txcache._catalog_stamp import CatalogStamp, read_stamp
from txcache._ddl_notice import DDL_COUNTER
from txcache._session import READ_CONTEXT, SessionContext, context_from_row

__all__ = [
    "Catalog",
    "Column",
    "Family",
    "Relation",
    "Schema",
    "TagColumns",
    "escape_name",
    "table_name",
    "tag_columns_at",
]

Family = Literal["int", "text", "uuid", "bool"]
"""A type whose text output the library can write from a Python value (docs/sql-tags.md)."""

log = logging.getLogger("txcache")

TagColumns = Mapping[str, frozenset[str]]
"""Tag columns by table, as TAGCOLUMNS names them: escaped ``schema.table`` → column names."""

Connection = psycopg.Connection[TupleRow]
T = TypeVar("T")

FIRST_NORMAL_OID = 16384  # objects below were created by initdb: built in
SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema", "pg_toast"})
FAMILY_OF_TYPE: dict[int, Family] = {20: "int", 21: "int", 23: "int", 25: "text", 1043: "text"}
FAMILY_OF_TYPE |= {2950: "uuid", 16: "bool"}
BOOL = 16
REGCLASS, REGTYPE, REGROLE = 2205, 2206, 4096
# date, time, timetz, timestamp, timestamptz: their input reads now, today, tomorrow, …
CLOCK_TYPES = frozenset({1082, 1083, 1266, 1114, 1184})
# Object identifiers whose text is looked up by name in a catalog that some DDL changes
# without invalidating everything: relations (their DDL names them only), types (a table's
# row type is renamed by ALTER TABLE), roles (global: no event trigger sees them). The other
# reg* types name functions, operators, schemas, collations and text search objects, whose
# every DDL invalidates everything.
NAMING_TYPES = frozenset({REGCLASS, REGTYPE, REGROLE})
# Relation kinds whose every DDL emits a notice naming the relation (docs/setup.md).
_NOTICED_KINDS = frozenset("rpvmf")
_CACHED_PLANS = 2048  # analysed statements kept per schema before the memo is cleared

# Stable built-in functions whose result depends on the clock, the session, the current
# transaction, or data that no tag names (statistics, other tables): never cached.
_TIME_OR_SESSION = frozenset(
    (
        *("now", "transaction_timestamp", "statement_timestamp", "clock_timestamp"),
        *("timeofday", "mxid_age", "current_user", "session_user", "system_user"),
        *("getpgusername", "current_role", "current_schema", "current_schemas"),
        *("current_setting", "current_query", "inet_client_addr", "inet_client_port"),
        *("inet_server_addr", "inet_server_port", "row_security_active"),
        *("get_current_ts_config", "currval", "lastval", "nextval", "setval"),
        *("database_to_xml", "database_to_xml_and_xmlschema", "database_to_xmlschema"),
        *("schema_to_xml", "schema_to_xml_and_xmlschema", "schema_to_xmlschema"),
        *("table_to_xml", "table_to_xml_and_xmlschema", "table_to_xmlschema"),
        *("query_to_xml", "query_to_xml_and_xmlschema", "query_to_xmlschema"),
        *("cursor_to_xml", "cursor_to_xmlschema"),
        # catalog readers: a DDL that changes their answer names no table the query reads
        *("obj_description", "col_description", "shobj_description", "format_type"),
    )
)
_DENIED_PREFIXES = ("txid_", "pg_", "has_", "lo_", "to_reg", "enum_")
_ALLOWED_PG = frozenset({"pg_typeof", "pg_column_size", "pg_input_is_valid", "pg_collation_for"})


def escape_name(name: str) -> str:
    """Escape an identifier for a tag: ``%``, ``#``, ``.``, ``:`` and ``=`` become ``%25``,
    ``%23``, ``%2E``, ``%3A`` and ``%3D`` — exactly as the agent does
    (``crates/model/src/tag.rs``)."""
    if not any(c in name for c in "%#.:="):
        return name
    escapes = {"%": "%25", "#": "%23", ".": "%2E", ":": "%3A", "=": "%3D"}
    return "".join(escapes.get(c, c) for c in name)


def table_name(schema: str, table: str) -> str:
    """The ``schema.table`` of a table in tags, each name escaped by :func:`escape_name`."""
    return f"{escape_name(schema)}.{escape_name(table)}"


def tag_columns_at(
    versions: Iterable[tuple[int, Iterable[tuple[str | bytes, Iterable[str | bytes]]]]],
    ts: int,
) -> dict[str, frozenset[str]] | None:
    """The tag-column version in force at snapshot ``ts``: the latest of the agent's
    ``TAGCOLUMNS`` versions with ``since <= ts``; ``None`` (wildcards only) below the oldest.

    Accepts the reply as redis-py returns it (bytes) or decoded.
    """
    chosen: Iterable[tuple[str | bytes, Iterable[str | bytes]]] | None = None
    best = -1
    for since, tables in versions:
        if best < int(since) <= ts:
            best, chosen = int(since), tables
    if chosen is None:
        return None
    return {_text(table): frozenset(map(_text, columns)) for table, columns in chosen}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Column:
    """A column: its name and the family of its type, ``None`` where no fine tag is sound."""

    name: str
    family: Family | None
    type_oid: int = 0
    generated: bool = False  # computed from other columns: its changes are theirs


@dataclass(frozen=True)
class Relation:
    """A table, view, sequence, … as the analysis needs it."""

    oid: int
    schema: str
    name: str
    kind: str  # pg_class.relkind
    persistence: str  # pg_class.relpersistence
    root: int | None  # the partition root of a partition
    row_security: bool
    view_sql: str | None  # pg_get_viewdef of a view
    columns: tuple[Column, ...] = ()
    children: tuple[int, ...] = ()  # direct inheritance children and partitions
    row_type: int = 0  # pg_class.reltype (0: none)

    @property
    def tag(self) -> str:
        """The wildcard tag (and table part of fine tags) of this relation."""
        return table_name(self.schema, self.name)

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> Column | None:
        return next((column for column in self.columns if column.name == name), None)


@dataclass(frozen=True)
class Function:
    oid: int
    schema: str
    name: str
    volatility: str  # i, s, v
    language: str
    nargs: int
    ndefaults: int
    variadic: bool
    extension: bool
    types: tuple[int, ...] = ()  # the result type, then every argument's (OUT ones too)
    inputs: tuple[int, ...] = ()  # the input arguments' types, in order

    @property
    def builtin(self) -> bool:
        return self.oid < FIRST_NORMAL_OID

    def accepts(self, nargs: int | None) -> bool:
        """Whether a call with ``nargs`` arguments (``None``: unknown) may resolve to it."""
        if nargs is None or self.variadic:
            return True
        return self.nargs - self.ndefaults <= nargs <= self.nargs


@dataclass(frozen=True)
class TypeInfo:
    oid: int
    schema: str
    name: str
    kind: str  # pg_type.typtype
    base: int  # the base type of a domain, else 0
    extension: bool
    checked: bool  # a domain with CHECK constraints
    category: str = ""  # pg_type.typcategory: "A" for arrays
    element: int = 0  # pg_type.typelem: an array's element type
    relation: int = 0  # pg_type.typrelid: the relation of a row or composite type
    input_varies: bool = False  # its input function is not immutable


@dataclass(frozen=True)
class TypeFacts:
    """What a value of each type may hold, through its components: a domain's base type,
    an array's elements, a range's subtype, a multirange's range, a composite or row type's
    attributes (docs/sql-tags.md, "Literals, types and object identifiers" and "Type
    references")."""

    varying_input: frozenset[int] = frozenset()
    """Types whose text input may read the clock, the catalog or a setting (a component's
    input function is not immutable, or a component is a pseudo-type such as
    ``anyelement``): a literal read as one may name the current time."""
    naming: frozenset[int] = frozenset()
    """Types holding a ``regclass``, ``regtype`` or ``regrole`` (:data:`NAMING_TYPES`)."""
    clock: frozenset[int] = frozenset()
    """Types whose text input may read the clock: holding a date or time type
    (:data:`CLOCK_TYPES`), a pseudo-type, or a non-built-in type whose input function is
    not immutable."""
    textual: frozenset[int] = frozenset()
    """Types PostgreSQL converts to another type through text (the string category:
    ``text``, ``varchar``, ``char(n)``, ``name``, ``citext``, …; types cast to one implicitly,
    such as ``"char"``; arrays and domains of them): a cast of such a value to a clock type
    parses it, and a parameter of such a type takes no other value. Pseudo-types are not:
    no value of one (``record``, …) converts to another type through text."""
    polymorphic: frozenset[int] = frozenset()
    """``anyelement``, ``anyarray``, ``anycompatible``, …: a result of one of these has the
    type of (or one made of) an argument's."""
    relations: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """Type → the ``pg_class`` entries whose row or composite type it holds (types holding
    none are absent); :meth:`Catalog.row_relations` keeps the relations among them."""


@dataclass(frozen=True)
class Publication:
    name: str
    exists: bool
    via_root: bool
    all_actions: bool
    tables: frozenset[int]
    filtered: frozenset[int]  # tables published with a row filter
    partial: frozenset[int] = frozenset()  # tables some of whose columns are not published


@dataclass
class Catalog:
    """One reading of the catalogs; immutable once loaded."""

    search_path: tuple[str, ...]
    relations: dict[tuple[str, str], Relation]
    by_oid: dict[int, Relation]
    functions: dict[str, list[Function]]
    functions_by_oid: dict[int, Function]
    operators: dict[str, list[tuple[str, int]]]  # name → (schema, implementing function)
    types: dict[tuple[str, str], TypeInfo]
    publication: Publication
    standard_strings: bool
    facts: TypeFacts = field(default_factory=TypeFacts)
    io_functions: frozenset[int] = frozenset()  # types' input, output, receive, send
    text_operators: frozenset[str] = frozenset()  # operators with an overload giving text
    polymorphic_operators: frozenset[str] = frozenset()  # … giving an argument's type
    sinks: frozenset[tuple[str, int]] = frozenset()
    """``(operator, side)``: every binary operator of that name returns ``boolean`` and
    takes, on that side (0 left, 1 right), a type whose input is immutable — an operand
    there is read as such a type and its text goes no further."""
    stamp: CatalogStamp | None = None
    """When it was read, in schema changes (:mod:`txcache._catalog_stamp`); ``None``: not
    known to be the catalog any query runs with, so nothing analysed with it is stored."""
    session: SessionContext | None = None
    """The context of the session it was read in (:mod:`txcache._session`): names resolve
    with its ``search_path``."""
    built_ins: _BuiltIns | None = field(default=None, repr=False, compare=False)
    """The built-in part of the reading, reused by the next one while unchanged."""

    @functools.cached_property
    def by_tag(self) -> dict[str, Relation]:
        """Every relation by the table part of its tags (``schema.name``, escaped)."""
        return {relation.tag: relation for relation in self.relations.values()}

    def relation(self, schema: str | None, name: str) -> Relation | None:
        """Resolve a relation name as PostgreSQL would with this search path."""
        for space in (schema,) if schema else self.search_path:
            found = self.relations.get((space, name))
            if found is not None:
                return found
        return None

    def type(self, names: Sequence[str]) -> TypeInfo | None:
        """Resolve a type name (``[schema.]name``)."""
        *qualifier, name = names
        spaces = qualifier[-1:] or [s for s in self.search_path if not s.startswith("pg_temp")]
        return next((t for s in spaces if (t := self.types.get((s, name))) is not None), None)

    def type_shadows(self, names: Sequence[str], found: TypeInfo) -> list[str]:
        """The tags of the relations that, created later, would take the unqualified type
        name ``names`` from ``found``: one of that name in a schema before ``found``'s on
        the search path (its row type comes first). A type or a relation of the same name
        created anywhere invalidates everything; a relation hiding a type does not."""
        if len(names) != 1 or found.schema not in self.search_path:
            return []
        before = self.search_path[: self.search_path.index(found.schema)]
        return [table_name(s, names[0]) for s in before if not s.startswith("pg_")]

    def _candidates(self, qualifier: Sequence[str], name: str, nargs: int | None) -> list[Function]:
        spaces = set(qualifier[-1:] or [s for s in self.search_path if not s.startswith("pg_temp")])
        return [f for f in self.functions.get(name, []) if f.schema in spaces and f.accepts(nargs)]

    def function_problem(
        self, names: Sequence[str], nargs: int | None, safe: frozenset[str]
    ) -> str | None:
        """Why a call of function ``names`` with ``nargs`` arguments may not be cached, or
        ``None``. Every overload it may resolve to must pass (see docs/sql-tags.md)."""
        *qualifier, name = names
        if name in safe or ".".join(names) in safe:
            return None
        candidates = self._candidates(qualifier, name, nargs)
        if not candidates:
            return f"unknown function {'.'.join(names)}()"
        if name == "age" and nargs == 1:
            return "function age() with one argument depends on the current date"
        for function in candidates:
            problem = self._function_problem(function, safe)
            if problem:
                return problem
        return None

    def _function_problem(self, function: Function, safe: frozenset[str]) -> str | None:
        name = function.name
        if name in safe or f"{function.schema}.{name}" in safe:
            return None
        if not function.builtin:
            trusted = function.extension and function.volatility == "i"
            if trusted or (function.language == "internal" and function.volatility != "v"):
                return None
            return (
                f"user-defined function {function.schema}.{name}() may read tables or be "
                "nondeterministic: pass it in safe_functions if it reads no table and is "
                "deterministic"
            )
        if function.volatility == "v":
            return f"volatile function {name}()"
        if function.oid in self.io_functions:
            return f"function {name}() is a type's input or output function"
        naming = function.types[:1] and function.types[0] in self.facts.naming
        if naming and name != "pg_typeof":  # pg_typeof: the type of an expression analysed
            return f"function {name}() returns an object identifier looked up by name"
        prefixed = name.startswith(_DENIED_PREFIXES) and name not in _ALLOWED_PG
        if name in _TIME_OR_SESSION or (prefixed and function.volatility == "s"):
            return f"function {name}() depends on time, the session or data no tag names"
        return None

    def operator_problem(self, names: Sequence[str], safe: frozenset[str]) -> str | None:
        """Why operator ``names`` may not be cached (any same-named operator on the path)."""
        *qualifier, name = names
        spaces = set(qualifier[-1:] or self.search_path)
        for space, code in self.operators.get(name, []):
            function = self.functions_by_oid.get(code)
            if space in spaces and function is not None:
                problem = self._function_problem(function, safe)
                if problem:
                    return f"operator {name}: {problem}"
        return None

    def type_problem(self, names: Sequence[str]) -> str | None:
        """Why a cast to type ``names`` may not be cached (a domain whose CHECK may call
        anything), or ``None``."""
        found = self.type(names)
        if found is None:
            return f"unknown relation or type {'.'.join(names)}"
        user_domain = found.oid >= FIRST_NORMAL_OID and not found.extension
        if found.kind == "d" and found.checked and user_domain:
            return f"cast to domain {found.schema}.{found.name} with CHECK constraints"
        return None

    def table_problem(self, relation: Relation) -> str | None:
        """Why the agent does not see every change of table ``relation``, or ``None``."""
        what = relation.display
        system = relation.schema in SYSTEM_SCHEMAS or relation.schema.startswith("pg_temp")
        if system and relation.persistence != "t":
            return f"system catalog {what} (its changes are not decoded)"
        kinds = {"m": "materialized view", "f": "foreign table", "S": "sequence"}
        if relation.kind in kinds:
            return f"{kinds[relation.kind]} {what} (its changes are not decoded)"
        if relation.persistence == "t":
            return f"temporary table {what} (its changes are not decoded)"
        if relation.persistence == "u":
            return f"unlogged table {what} (its changes are not decoded)"
        if relation.row_security:
            return (
                f"table {what} has row-level security (its policies may read session state "
                "no key names): read it outside cacheable functions, uncached"
            )
        return None

    def ddl_problem(self, relation: Relation) -> str | None:
        """Why no DDL notice names ``relation`` under its own name (its structure or its
        name can change without invalidating what names it), or ``None``."""
        what = relation.display
        system = relation.schema in SYSTEM_SCHEMAS or relation.schema.startswith("pg_")
        if relation.persistence == "t":
            return f"temporary table {what} (no DDL notice names it)"
        if system:
            return f"system catalog {what} (no DDL notice names it)"
        if relation.schema == "txcache":
            return f"txcache's own relation {what} (no DDL notice names it)"
        if relation.kind not in _NOTICED_KINDS:
            return f"sequence {what} (its DDL invalidates nothing)"
        return None

    def row_relations(self, type_oid: int) -> list[Relation]:
        """The relations whose row type a value of type ``type_oid`` may hold (composite
        types are no relations: their every DDL invalidates everything)."""
        oids = self.facts.relations.get(type_oid, frozenset())
        return [self.by_oid[oid] for oid in sorted(oids) if oid in self.by_oid]

    def candidates(self, names: Sequence[str], nargs: int | None) -> list[Function]:
        """Every function a call of ``names`` with ``nargs`` arguments may resolve to."""
        *qualifier, name = names
        return self._candidates(qualifier, name, nargs)

    def function_types(self, names: Sequence[str], nargs: int | None) -> frozenset[int]:
        """The result and argument types of every non-built-in function a call may resolve
        to (built-in ones name no relation's row type)."""
        candidates = self.candidates(names, nargs)
        return frozenset(t for f in candidates if not f.builtin for t in f.types)

    def publication_problem(self, relation: Relation) -> str | None:
        """Why changes of ``relation`` (a table or a partition root) are not published."""
        pub = self.publication
        if not pub.exists:
            return f"publication {pub.name} does not exist: run txcache setup"
        if not pub.all_actions:
            return f"publication {pub.name} does not publish every insert, update and delete"
        if relation.oid not in pub.tables:
            return f"table {relation.display} is not in publication {pub.name}"
        if relation.oid in pub.filtered:
            return f"table {relation.display} is published with a row filter"
        if (relation.kind == "p" or relation.root is not None) and not pub.via_root:
            return f"publication {pub.name} does not publish via the partition root"
        return None


@dataclass
class _Shared:
    """What every :meth:`Schema.with_tag_columns` copy shares: the catalog and a memo."""

    catalog: Catalog
    publication: str
    dsn: str | None
    memo: dict[Any, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Schema:
    """Catalog facts plus the tag columns in force at one snapshot.

    Load once per process with :meth:`load` (cached: analysis of each distinct statement is
    memoized here too); derive the per-snapshot view with :meth:`with_tag_columns`;
    :meth:`refresh` re-reads the catalogs after DDL (every copy sees the new reading).
    """

    def __init__(self, shared: _Shared, tag_columns: TagColumns | None = None) -> None:
        self._shared = shared
        self.tag_columns: TagColumns | None = tag_columns

    @classmethod
    def load(
        cls,
        source: Connection | str,
        *,
        publication: str = "txcache",
        tag_columns: TagColumns | None = None,
        fingerprint: bool = False,
    ) -> Schema:
        """Read the catalogs through ``source`` (a connection, or a DSN to connect to and
        remember for :meth:`refresh`). ``publication`` is the one ``txcache setup`` made.
        ``fingerprint``: stamp the reading with the catalog's fingerprint (for an agent
        without DDL triggers; :mod:`txcache._catalog_stamp`)."""
        dsn = source if isinstance(source, str) else None
        shared = _Shared(_read(source, publication, fingerprint=fingerprint), publication, dsn)
        return cls(shared, tag_columns)

    @property
    def catalog(self) -> Catalog:
        return self._shared.catalog

    def with_tag_columns(self, tag_columns: TagColumns | None) -> Schema:
        """This schema with ``tag_columns`` (e.g. :func:`tag_columns_at` of the snapshot)."""
        return Schema(self._shared, tag_columns)

    def columns_of(self, relation: Relation) -> frozenset[str]:
        """The tag columns of ``relation`` in force (none without a tag-column version)."""
        if self.tag_columns is None:
            return frozenset()
        return self.tag_columns.get(relation.tag, frozenset())

    def refresh(self, conn: Connection | None = None, *, fingerprint: bool = False) -> None:
        """Re-read the catalogs (through ``conn``, else the DSN given to :meth:`load`),
        stamped with their fingerprint if ``fingerprint``."""
        source: Connection | str | None = conn or self._shared.dsn
        if source is None:
            raise ValueError("Schema.refresh() needs a connection: load() was given one")
        built_ins = self._shared.catalog.built_ins
        catalog = _read(source, self._shared.publication, built_ins, fingerprint=fingerprint)
        with self._shared.lock:
            self._shared.catalog = catalog
            self._shared.memo = {}

    def memo(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, remembered under ``key`` until the next :meth:`refresh`."""
        memo = self._shared.memo
        try:
            return memo[key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        value = compute()
        if len(memo) >= _CACHED_PLANS:
            memo.clear()
        memo[key] = value
        return value


def _read(
    source: Connection | str,
    publication: str,
    built_ins: _BuiltIns | None = None,
    *,
    fingerprint: bool = False,
) -> Catalog:
    """The catalog as one snapshot shows it: its several statements must agree (a DDL
    between the one reading relations and the one reading the publication would make a
    table attached meanwhile look unpublished). Through a DSN it is also stamped (with the
    catalog's fingerprint too if ``fingerprint``). ``built_ins``: the previous reading's,
    reused if the built-in objects are unchanged."""
    if isinstance(source, str):
        with psycopg.connect(source, autocommit=True, application_name="txcache schema") as conn:
            # Some catalog functions lock the tables they describe (pg_get_publication_tables
            # every published one): behind a migration's lock, fail rather than wait.
            conn.execute(
                "SELECT pg_catalog.set_config('lock_timeout', %s, false)",
                (f"{round(CATALOG_LOCK_WAIT * 1000)}ms",),
            )
            return _read_stamped(conn, publication, built_ins, fingerprint)
    return _read_in_one_snapshot(source, publication, built_ins)


CATALOG_LOCK_WAIT = 1.0
"""Seconds a catalog reading through a DSN waits for a table's lock before it fails with
``LockNotAvailable`` (the cache then runs uncached for a while)."""

# Readings tried while schema changes keep committing, before one is kept unstamped.
_STAMP_TRIES = 5


def _read_stamped(
    conn: Connection, publication: str, built_ins: _BuiltIns | None, fingerprint: bool
) -> Catalog:
    """A reading during which no schema change committed, stamped. Some catalog functions
    (``pg_get_publication_tables``) read the current catalog, not the snapshot: only such a
    reading is consistent with itself. After :data:`_STAMP_TRIES` readings that each saw a
    schema change commit, the last is kept without a stamp. A fingerprint read before and
    after the reading tells a change without the DDL counter: every change alters it."""
    for _ in range(_STAMP_TRIES):
        before = read_stamp(conn, fingerprint=fingerprint)
        catalog = _read_in_one_snapshot(conn, publication, built_ins)
        built_ins = catalog.built_ins
        if not before.tracked and before.fingerprint is None:
            log.warning(
                "the database has no DDL counter (%s; txcache setup installs it with the DDL "
                "trigger, as a superuser): a schema change committed while a query runs is "
                "not seen",
                DDL_COUNTER,
            )
            return dataclasses.replace(catalog, stamp=before)
        if read_stamp(conn, fingerprint=fingerprint) == before:
            return dataclasses.replace(catalog, stamp=before)
    return catalog


def _read_in_one_snapshot(
    conn: Connection, publication: str, built_ins: _BuiltIns | None = None
) -> Catalog:
    if not conn.autocommit:  # already in the caller's transaction: read in its snapshot
        with conn.transaction():
            return _read_catalog(conn, publication, built_ins)
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _read_catalog(conn, publication, built_ins)


_RELATIONS = """
SELECT c.oid::int, n.nspname::text, c.relname::text, c.relkind::text, c.relpersistence::text,
       CASE WHEN c.relispartition THEN pg_partition_root(c.oid)::int END, c.relrowsecurity,
       CASE WHEN c.relkind = 'v' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
            THEN pg_get_viewdef(c.oid) END,
       c.reltype::int
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
"""
_COLUMNS = """
SELECT a.attrelid::int, a.attname::text, a.atttypid::int, coalesce(co.collisdeterministic, true),
       a.attgenerated <> ''
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
ORDER BY a.attrelid, a.attnum
"""
_EXTENSION = """EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = '{}'::regclass
                        AND d.objid = {}.oid AND d.deptype = 'e')"""
_FUNCTIONS = f"""
SELECT p.oid::int, n.nspname::text, p.proname::text, p.provolatile::text, l.lanname::text,
       p.pronargs::int, p.pronargdefaults::int, p.provariadic <> 0,
       {_EXTENSION.format("pg_proc", "p")},
       (ARRAY[p.prorettype] || coalesce(p.proallargtypes, p.proargtypes::oid[]))::int[],
       p.proargtypes::oid[]::int[]
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE p.oid {{part}}
"""
_OPERATORS = """
SELECT n.nspname::text, o.oprname::text, o.oprcode::oid::int, o.oid::int, o.oprleft::int,
       o.oprright::int, o.oprresult::int
FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
WHERE o.oid {part}
"""
_TYPES = f"""
SELECT t.oid::int, n.nspname::text, t.typname::text, t.typtype::text, t.typbasetype::int,
       {_EXTENSION.format("pg_type", "t")},
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.contypid = t.oid AND k.contype = 'c'),
       t.typcategory::text, t.typelem::int, t.typrelid::int, i.provolatile <> 'i'
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_proc i ON i.oid = t.typinput
WHERE t.oid {{part}}
"""
# The components of types beyond domains and arrays: ranges' subtypes, multiranges' ranges,
# and the attributes of every row and composite type.
_TYPE_PARTS = """
SELECT rngtypid::int, rngsubtype::int FROM pg_range WHERE rngtypid {part}
UNION ALL SELECT rngmultitypid::int, rngtypid::int FROM pg_range WHERE rngmultitypid {part}
UNION ALL
SELECT c.reltype::int, a.atttypid::int
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE a.attnum > 0 AND NOT a.attisdropped AND c.reltype <> 0 AND c.reltype {part}
"""
# Types cast to a string type implicitly: a function taking text takes them ("char", …).
_TO_TEXT = """
SELECT c.castsource::int FROM pg_cast c JOIN pg_type t ON t.oid = c.casttarget
WHERE t.typcategory = 'S' AND c.castcontext = 'i' AND c.oid {part}
"""
_IO_FUNCTIONS = """
SELECT DISTINCT f::int FROM pg_type, unnest(ARRAY[typinput, typoutput, typreceive, typsend]) f
WHERE f <> 0 AND pg_type.oid {part}
"""
# The parts of a reading that hold objects initdb made (a built-in type's components are
# built in too), and those that hold the others.
_BUILT_IN, _USER = f"< {FIRST_NORMAL_OID}", f">= {FIRST_NORMAL_OID}"
# A digest of where each built-in row the reading uses lies and which transaction wrote it:
# any change to one (ALTER FUNCTION on a built-in, a replaced information_schema view, …)
# writes a new row version, so changes the digest. Freezing or moving rows changes it too:
# then the built-in part is read again, needlessly but soundly.
_BUILT_IN_VERSION = f"""
SELECT md5(string_agg(v, ',')) FROM (
  SELECT xmin::text || ctid::text AS v FROM pg_proc WHERE oid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_type WHERE oid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_operator WHERE oid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_cast WHERE oid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_range WHERE rngtypid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_attribute WHERE attrelid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_constraint WHERE contypid {_BUILT_IN}
    AND contypid <> 0
  UNION ALL SELECT xmin::text || ctid::text FROM pg_language WHERE oid {_BUILT_IN}
  UNION ALL SELECT xmin::text || ctid::text FROM pg_namespace WHERE oid {_BUILT_IN}
) rows
"""


@dataclass(frozen=True)
class _BuiltIns:
    """The built-in part of a catalog reading: the same in every reading until a built-in
    row changes (:data:`_BUILT_IN_VERSION`), so read once, not after every schema change."""

    version: str
    types: tuple[TypeInfo, ...]
    functions: tuple[Function, ...]
    operators: tuple[TupleRow, ...]
    to_text: frozenset[int]
    io_functions: frozenset[int]
    facts: Mapping[int, _Facts]
    """The built-in types' facts, folded: their components are all built in."""


def _read_built_ins(rows: Callable[[str], list[TupleRow]], version: str) -> _BuiltIns:
    types = {row[0]: TypeInfo(*row) for row in rows(_TYPES.format(part=_BUILT_IN))}
    parts = rows(_TYPE_PARTS.format(part=_BUILT_IN))
    return _BuiltIns(
        version,
        tuple(types.values()),
        tuple(_function(row) for row in rows(_FUNCTIONS.format(part=_BUILT_IN))),
        tuple(rows(_OPERATORS.format(part=_BUILT_IN))),
        frozenset(oid for (oid,) in rows(_TO_TEXT.format(part=_BUILT_IN))),
        frozenset(oid for (oid,) in rows(_IO_FUNCTIONS.format(part=_BUILT_IN))),
        _folded_facts(types, parts, {}),
    )


def _read_catalog(
    conn: Connection, publication: str, built_ins: _BuiltIns | None = None
) -> Catalog:
    def rows(query: str, *params: object) -> list[TupleRow]:
        return conn.execute(query, params).fetchall()

    (version,) = rows(_BUILT_IN_VERSION)[0]
    if built_ins is None or built_ins.version != version:
        built_ins = _read_built_ins(rows, version)

    settings = rows(
        "SELECT current_schemas(true)::text[], current_setting('server_encoding'), "
        "current_setting('standard_conforming_strings'), "
        "current_setting('server_version_num')::int"
    )[0]
    search_path, encoding, standard, version = settings
    types = [*built_ins.types, *(TypeInfo(*row) for row in rows(_TYPES.format(part=_USER)))]
    types_by_oid = {t.oid: t for t in types}
    functions = [*built_ins.functions, *map(_function, rows(_FUNCTIONS.format(part=_USER)))]
    operators = [*built_ins.operators, *rows(_OPERATORS.format(part=_USER))]
    to_text = built_ins.to_text | {oid for (oid,) in rows(_TO_TEXT.format(part=_USER))}
    parts = rows(_TYPE_PARTS.format(part=_USER))
    facts = _type_facts(types_by_oid, _folded_facts(types_by_oid, parts, built_ins.facts), to_text)
    unsafe = _unsafe_families(operators, types_by_oid)
    text_ok = encoding == "UTF8"
    columns: dict[int, list[Column]] = {}
    for oid, name, type_oid, deterministic, generated in rows(_COLUMNS):
        family = _family(type_oid, types_by_oid)
        if family in unsafe or (family == "text" and not (deterministic and text_ok)):
            family = None
        columns.setdefault(oid, []).append(Column(name, family, type_oid, generated))
    children: dict[int, list[int]] = {}
    for child, parent in rows("SELECT inhrelid::int, inhparent::int FROM pg_inherits"):
        children.setdefault(parent, []).append(child)
    relations = [
        Relation(
            oid,
            schema,
            name,
            kind,
            persistence,
            root,
            secured,
            view,
            columns=tuple(columns.get(oid, ())),
            children=tuple(children.get(oid, ())),
            row_type=row_type,
        )
        for oid, schema, name, kind, persistence, root, secured, view, row_type in rows(_RELATIONS)
    ]
    by_function_name: dict[str, list[Function]] = {}
    for function in functions:
        by_function_name.setdefault(function.name, []).append(function)
    by_operator_name: dict[str, list[tuple[str, int]]] = {}
    for space, name, code, *_ in operators:
        by_operator_name.setdefault(name, []).append((space, code))
    return Catalog(
        session=context_from_row(conn.execute(READ_CONTEXT).fetchone()),
        search_path=tuple(search_path),
        relations={(r.schema, r.name): r for r in relations},
        by_oid={r.oid: r for r in relations},
        functions=by_function_name,
        functions_by_oid={f.oid: f for f in functions},
        operators=by_operator_name,
        types={(t.schema, t.name): t for t in types},
        publication=_read_publication(conn, publication, version),
        standard_strings=standard == "on",
        facts=facts,
        io_functions=built_ins.io_functions
        | {oid for (oid,) in rows(_IO_FUNCTIONS.format(part=_USER))},
        text_operators=frozenset(row[1] for row in operators if row[6] in facts.textual),
        polymorphic_operators=frozenset(row[1] for row in operators if row[6] in facts.polymorphic),
        sinks=_sinks(operators, facts.varying_input),
        built_ins=built_ins,
    )


def _function(row: TupleRow) -> Function:
    """A row of ``_FUNCTIONS`` (its types arrays: tuples here, hashable)."""
    *fields, types, inputs = row
    oid, schema, name, volatility, language, nargs, ndefaults, variadic, extension = fields
    return Function(
        *(oid, schema, name, volatility, language, nargs, ndefaults, variadic, extension),
        types=tuple(types),
        inputs=tuple(inputs),
    )


def _family(type_oid: int, types: Mapping[int, TypeInfo]) -> Family | None:
    """The fine-tag family of a type, looking through domains."""
    for _ in range(64):
        found = types.get(type_oid)
        if found is None or found.kind != "d":
            break
        type_oid = found.base
    return FAMILY_OF_TYPE.get(type_oid)


def _folded_facts(
    types: Mapping[int, TypeInfo], parts: Iterable[TupleRow], known: Mapping[int, _Facts]
) -> dict[int, _Facts]:
    """Every type's facts with its components' folded in (``parts``: the components beyond
    a domain's base and an array's element); ``known``: types already folded."""
    components: dict[int, set[int]] = {}
    for found in types.values():
        if found.oid not in known:
            components[found.oid] = {p for p in (found.base, found.element) if p}
    for whole, part in parts:
        components.setdefault(whole, set()).add(part)
    facts: dict[int, _Facts] = dict(known)

    def fold(oid: int) -> _Facts:
        if oid not in facts:
            facts[oid] = _Facts()  # a cycle adds nothing
            own = _own_facts(oid, types.get(oid))
            facts[oid] = own.join([fold(part) for part in components.get(oid, ())])
        return facts[oid]

    for oid in types:
        fold(oid)
    return facts


def _type_facts(
    types: Mapping[int, TypeInfo], facts: Mapping[int, _Facts], to_text: frozenset[int]
) -> TypeFacts:
    """What each type's values may hold (``facts``: folded by :func:`_folded_facts`);
    ``to_text``: the types cast to a string type implicitly."""
    textual = {oid for oid in types if _textual(oid, types, to_text)}
    polymorphic = {oid for oid, t in types.items() if t.kind == "p" and t.name.startswith("any")}
    return TypeFacts(
        varying_input=frozenset(oid for oid, f in facts.items() if f.varies),
        naming=frozenset(oid for oid, f in facts.items() if f.naming),
        relations={oid: f.relations for oid, f in facts.items() if f.relations},
        clock=frozenset(oid for oid, f in facts.items() if f.clock),
        textual=frozenset(textual),
        polymorphic=frozenset(polymorphic),
    )


@dataclass(frozen=True)
class _Facts:
    """One type's :class:`TypeFacts`, while they are folded."""

    varies: bool = False
    naming: bool = False
    clock: bool = False
    relations: frozenset[int] = frozenset()

    def join(self, parts: list[_Facts]) -> _Facts:
        return _Facts(
            self.varies or any(p.varies for p in parts),
            self.naming or any(p.naming for p in parts),
            self.clock or any(p.clock for p in parts),
            self.relations.union(*(p.relations for p in parts)),
        )


def _own_facts(oid: int, found: TypeInfo | None) -> _Facts:
    """A type's facts before its components' (arrays, ranges, multiranges, composites and
    domains delegate their input to their components), with the relation whose row or
    composite type it is."""
    if found is None:
        return _Facts(True, False, True)
    delegates = found.kind in "rmcd" or found.category == "A"
    varies = found.kind == "p" or (found.input_varies and not delegates)
    user_base = found.kind == "b" and oid >= FIRST_NORMAL_OID  # its input could be anything
    clock = oid in CLOCK_TYPES or found.kind == "p" or (user_base and varies)
    relations = frozenset({found.relation} if found.relation else ())
    return _Facts(varies, oid in NAMING_TYPES, clock, relations)


def _textual(oid: int, types: Mapping[int, TypeInfo], to_text: frozenset[int]) -> bool:
    """Whether a type converts through text (:attr:`TypeFacts.textual`), or to text
    implicitly; a domain's category is its base type's."""
    for _ in range(64):
        found = types.get(oid)
        if found is None or found.category != "A":
            break
        oid = found.element
    if found is None or found.category in "SA" or oid in to_text:
        return found is None or found.kind != "p"
    return found.kind == "d" and _textual(found.base, types, to_text)


def _sinks(operators: list[TupleRow], varying: frozenset[int]) -> frozenset[tuple[str, int]]:
    """The ``(operator, side)`` pairs of :attr:`Catalog.sinks`."""
    good: dict[tuple[str, int], bool] = {}
    for _space, name, _code, _oid, left, right, result in operators:
        if not left or not right:
            continue  # a prefix operator: never read as a binary one
        for side, operand in enumerate((left, right)):
            ok = result == BOOL and operand not in varying
            good[name, side] = good.get((name, side), True) and ok
    return frozenset(key for key, ok in good.items() if ok)


def _unsafe_families(operators: list[TupleRow], types: Mapping[int, TypeInfo]) -> set[Family]:
    """Families for which a user-defined ``=`` exists: equality may not be the built-in one."""
    unsafe: set[Family] = set()
    for _space, name, _code, oid, left, right, _result in operators:
        if name != "=" or oid < FIRST_NORMAL_OID:
            continue
        for operand in (left, right):
            found = types.get(operand)
            if found is not None and found.kind == "p":
                return {"int", "text", "uuid", "bool"}
            family = _family(operand, types)
            if family is not None:
                unsafe.add(family)
    return unsafe


def _read_publication(conn: Connection, name: str, version: int) -> Publication:
    found = conn.execute(
        "SELECT pubviaroot, pubinsert AND pubupdate AND pubdelete AND pubtruncate "
        "FROM pg_publication WHERE pubname = %s",
        (name,),
    ).fetchone()
    if found is None:
        return Publication(name, False, False, False, frozenset(), frozenset())
    filtered = "rowfilter IS NOT NULL" if version >= 150000 else "false"
    partial = (
        "cardinality(t.attnames) < (SELECT count(*) FROM pg_attribute a WHERE "
        "a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')"
        if version >= 150000
        else "false"
    )
    tables = conn.execute(
        f"SELECT c.oid::int, {filtered}, {partial} FROM pg_publication_tables t "
        "JOIN pg_namespace n ON n.nspname = t.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename "
        "WHERE t.pubname = %s",
        (name,),
    ).fetchall()
    return Publication(
        name,
        True,
        bool(found[0]),
        bool(found[1]),
        frozenset(oid for oid, _, _ in tables),
        frozenset(oid for oid, has_filter, _ in tables if has_filter),
        frozenset(oid for oid, _, is_partial in tables if is_partial),
    )
