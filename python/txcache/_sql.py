"""SQL → invalidation tags: the read side (rules in docs/sql-tags.md).

:func:`analyze` parses a query with PostgreSQL's own parser (pglast) and returns the tags a
cached result depends on: for every table the query reads, one fine tag
``schema.table:column=value`` per value of an equality on a tag column in the top-level
conjunction of that table's scope, else the table's wildcard ``schema.table``. A query that
cannot be analysed or must not be cached raises :class:`UncacheableQuery`.

Two phases: the *plan* of a statement (tables read, equalities usable for fine tags,
relations named through types and object identifiers, refusals) depends only on its text
and the catalog, and is memoized in the :class:`~txcache._schema.Schema`; the *evaluation*
turns literal and parameter values into tag text with the tag columns in force at the
snapshot, and checks what parameters name (the current time, a relation). Unsound is never
acceptable: where anything is uncertain the table's wildcard stands in, or the query is
refused.

Exceptions::

    TxcacheError
     └── UncacheableQuery   the message names the construct that prevents caching
"""

from __future__ import annotations

import datetime
import decimal
import enum
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pglast
from pglast import ast, enums
from psycopg.types.json import Json, Jsonb
from psycopg.types.numeric import Int2, Int4, Int8

from txcache._columns import ALL, ROWS, column_bit, merge_tags, with_columns
from txcache._schema import (
    FAMILY_OF_TYPE,
    NAMING_TYPES,
    REGCLASS,
    REGROLE,
    Catalog,
    Family,
    Function,
    Relation,
    Schema,
    TypeInfo,
    escape_name,
)
from txcache.errors import TxcacheError

__all__ = ["QueryTags", "UncacheableQuery", "analyze"]

MAX_TAG_BYTES = 4096  # InvalidationTag::MAX_LEN
_MAX_VIEW_DEPTH = 32
_PLACEHOLDER = re.compile(r"%(?:\(([^)]+)\).|.)")
# psycopg's typed integers (what Django passes for an IntegerField): ints sent as int2/4/8.
_TYPED_INTS = (int, Int2, Int4, Int8)
_INT_TEXT = re.compile(r"[ \t\n\r\v\f]*[+-]?[0-9]+[ \t\n\r\v\f]*")
_BOOL_TEXT = {"t": "t", "true": "t", "y": "t", "yes": "t", "on": "t", "1": "t"}
_BOOL_TEXT |= {"f": "f", "false": "f", "n": "f", "no": "f", "off": "f", "0": "f"}
# The special date/time inputs that read the clock ("epoch", "infinity", "-infinity" and
# "allballs" are constants). Date/time input reads letters as whole words, any case: a word
# is a time word wherever no ASCII letter adjoins it, in any literal (a range bound, an
# array element, a composite field, a JSON string).
_TIME_WORD = re.compile(r"(?<![a-z])(?:now|today|tomorrow|yesterday)(?![a-z])", re.I | re.A)
# Python values whose text (as psycopg sends them) has no letters that could spell one.
_TIMELESS = (
    *(bool, int, float, decimal.Decimal, uuid.UUID),
    *(datetime.date, datetime.time, datetime.timedelta),
)
_MAX_PARAM_DEPTH = 32
_VALUE_NODES = (ast.A_Const, ast.ParamRef)
# The pattern wrappers the parser writes for LIKE … ESCAPE and SIMILAR TO: text in, text out.
_PATTERN_ESCAPES = (["pg_catalog", "like_escape"], ["pg_catalog", "similar_to_escape"])
_IDENTIFIER_KINDS = {REGCLASS: "regclass", 2206: "regtype"}
_SPACES = " \t\n\r\f\v"  # scanner_isspace
_NAME_BYTES = 63  # NAMEDATALEN - 1: longer identifiers are truncated
_EMPTY_SELECT = (
    *("fromClause", "whereClause", "groupClause", "havingClause", "windowClause"),
    *("valuesLists", "sortClause", "limitCount", "limitOffset", "lockingClause"),
    *("withClause", "distinctClause", "intoClause"),
)
_JOIN = enums.JoinType
_ALLOWED_VALUE_FUNCTIONS = {enums.SQLValueFunctionOp.SVFOP_CURRENT_CATALOG}
_PHYSICAL_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax"})
# Functions whose result depends on how a value is stored, which any update of its row may
# change (TOAST compresses or moves values it did not change).
_STORAGE_FUNCTIONS = frozenset(
    {"pg_column_size", "pg_column_compression", "pg_column_toast_chunk_id"}
)
_KIND = enums.A_Expr_Kind
_BETWEEN = {_KIND.AEXPR_BETWEEN, _KIND.AEXPR_NOT_BETWEEN}
_BETWEEN |= {_KIND.AEXPR_BETWEEN_SYM, _KIND.AEXPR_NOT_BETWEEN_SYM}
# Expressions whose value is a boolean, whatever their operands: no text comes out of them.
_BOOLEAN_KINDS = {_KIND.AEXPR_OP_ANY, _KIND.AEXPR_OP_ALL, _KIND.AEXPR_DISTINCT, _KIND.AEXPR_IN}
_BOOLEAN_KINDS |= {_KIND.AEXPR_NOT_DISTINCT, _KIND.AEXPR_LIKE, _KIND.AEXPR_ILIKE}
_BOOLEAN_KINDS |= {_KIND.AEXPR_SIMILAR} | _BETWEEN
_BOOLEAN_LINKS = {enums.SubLinkType.EXISTS_SUBLINK, enums.SubLinkType.ALL_SUBLINK}
_BOOLEAN_LINKS |= {enums.SubLinkType.ANY_SUBLINK}
# Functions that read JSON text into a record of the first argument's type.
_POPULATE = frozenset(
    {"json_populate_record", "json_populate_recordset", "jsonb_populate_record"}
    | {"jsonb_populate_recordset", "jsonb_populate_record_valid"}
)
# Binary operator expressions whose operands are read as the operator's argument types.
_SINK_KINDS = {_KIND.AEXPR_OP, _KIND.AEXPR_OP_ANY, _KIND.AEXPR_OP_ALL, _KIND.AEXPR_LIKE}
_SINK_KINDS |= {_KIND.AEXPR_ILIKE, _KIND.AEXPR_SIMILAR}


def _is(node: Any, kind: Any) -> bool:
    """``isinstance`` without narrowing: pglast's stubs declare every node field optional, so
    nodes are handled as ``Any`` once their kind is known."""
    return isinstance(node, kind)


class UncacheableQuery(TxcacheError):
    """The query cannot be analysed or must not be cached; the message names the construct."""


@dataclass(frozen=True)
class QueryTags:
    """The invalidation tags of one query, exactly as the agent writes them."""

    tags: frozenset[str]


def analyze(
    sql: str | bytes,
    params: Sequence[Any] | Mapping[str, Any] | None,
    schema: Schema,
    *,
    safe_functions: Iterable[str] = (),
) -> QueryTags:
    """The tags of ``sql`` run with psycopg-style ``params`` (``%s``, ``%(name)s``).

    ``safe_functions`` names (``name`` or ``schema.name``) functions the caller vouches for:
    deterministic and reading no table. Raises :class:`UncacheableQuery`.
    """
    text, values = _convert(sql.decode() if isinstance(sql, bytes) else sql, params)
    safe = frozenset(safe_functions)
    plan = schema.memo(("plan", text, safe), lambda: _plan_or_refusal(text, schema, safe, 0))
    if isinstance(plan, str):
        raise UncacheableQuery(plan)
    return QueryTags(_evaluate(plan, values, schema))


# -- placeholders ------------------------------------------------------------------------


def _convert(sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    """Replace psycopg placeholders by ``$n`` as psycopg does; the values in ``$n`` order."""
    if params is None:
        return sql, []
    named = isinstance(params, Mapping)
    if not named and isinstance(params, str | bytes):
        raise UncacheableQuery("query parameters must be a sequence or a mapping, not a string")
    text, names, count = _dollars(sql, named)
    if isinstance(params, Mapping):
        missing = [name for name in names if name not in params]
        if missing:
            raise UncacheableQuery(f"no value for placeholder %({missing[0]})s")
        return text, [params[name] for name in names]
    values = list(params)
    if len(values) != count:
        raise UncacheableQuery(f"the query has {count} placeholders but {len(values)} parameters")
    return text, values


def dollar_placeholders(sql: str, params: object) -> str:
    """``sql`` with psycopg's placeholders replaced by ``$n``, whatever values it runs with
    (unchanged when ``params`` is ``None``): the text to parse for what a statement does.
    The values are not looked at — an ``executemany``'s list of sets, or a set that does
    not fit the placeholders (psycopg refuses it itself) — so that a verdict on the text
    holds for every call of it. Raises :class:`UncacheableQuery` for a placeholder psycopg
    refuses, or named and positional ones mixed."""
    if params is None:
        return sql
    return _dollars(sql, None)[0]


def _dollars(sql: str, named: bool | None) -> tuple[str, dict[str, int], int]:
    """``sql`` with ``$n`` for its placeholders, the names of named ones in ``$n`` order and
    the count of positional ones; ``named``: which kind the parameters are (``None``: as
    the first placeholder is)."""
    chunks: list[str] = []
    names: dict[str, int] = {}
    count = 0
    end = 0
    for match in _PLACEHOLDER.finditer(sql):
        chunks.append(sql[end : match.start()])
        end = match.end()
        placeholder = match.group(0)
        if placeholder == "%%":
            chunks.append("%")
            continue
        if placeholder[-1] not in "sbt" or placeholder == "%(":
            raise UncacheableQuery(f"invalid placeholder {placeholder!r} (psycopg refuses it)")
        name = match.group(1)
        if named is None:
            named = name is not None
        if (name is not None) != named:
            raise UncacheableQuery("placeholders do not match the parameters (named/positional)")
        if name is None:
            count += 1
            chunks.append(f"${count}")
        else:
            chunks.append(f"${names.setdefault(name, len(names) + 1)}")
    chunks.append(sql[end:])
    return "".join(chunks), names, count


# -- plans -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    """A literal (``param == 0``) or the value of ``$param``; ``each``: every element of a
    list parameter; ``cast``: the family of an explicit cast (no type modifier)."""

    literal: object = None
    param: int = 0
    each: bool = False
    cast: Family | None = None


@dataclass(frozen=True)
class _Restriction:
    """``column`` (of a fine-tag family) equals one of ``values`` on every row read."""

    column: str
    family: Family
    values: tuple[_Value, ...]


@dataclass(frozen=True)
class _Target:
    """A published table whose changes reach the result, with the equalities that hold and
    the columns read (a column set of :mod:`txcache._columns`)."""

    relation: Relation
    restrictions: tuple[_Restriction, ...]
    columns: int


@dataclass(frozen=True)
class _Plan:
    targets: tuple[_Target, ...]
    wildcards: frozenset[str]  # views' own names, relations named through types and names
    checked_params: frozenset[int]  # parameters whose text must not name the current time
    identifiers: frozenset[tuple[int, int]]  # (parameter, regclass/regtype) cast directly
    naming: frozenset[int]  # regclass/regtype cast somewhere: any text may be read as one


def _plan_or_refusal(text: str, schema: Schema, safe: frozenset[str], depth: int) -> _Plan | str:
    try:
        return _Planner(schema, safe, depth).statement(text)
    except UncacheableQuery as refusal:
        return str(refusal)


@dataclass(eq=False)
class _Item:
    """One FROM item of a query level; ``relation`` is ``None`` for anything but a table
    or view. ``names`` maps visible column names (after alias renaming) to real ones;
    ``read`` holds the real names of the columns the statement may read from it, ``whole``
    says it may read whole rows."""

    relation: Relation | None
    names: dict[str, str] = field(default_factory=dict)
    inherit: bool = True
    restrictions: list[_Restriction] = field(default_factory=list)
    refname: str = ""
    read: set[str] = field(default_factory=set)
    whole: bool = False


@dataclass
class _Level:
    """The FROM scope of one SELECT: refname → item, and what blocks unqualified names."""

    refs: dict[str, _Item] = field(default_factory=dict)
    items: list[_Item] = field(default_factory=list)
    merged: set[str] = field(default_factory=set)  # USING columns
    natural: bool = False
    joins: list[tuple[str, list[_Item]]] = field(default_factory=list)  # alias, its tables


@dataclass(frozen=True)
class _Scope:
    """CTE names visible here (they shadow tables), innermost first."""

    ctes: frozenset[str] = frozenset()
    parent: _Scope | None = None

    def has_cte(self, name: str) -> bool:
        return name in self.ctes or (self.parent is not None and self.parent.has_cte(name))


class _Planner:
    """Walks one statement: collects targets and refuses what may not be cached."""

    def __init__(self, schema: Schema, safe: frozenset[str], depth: int) -> None:
        self.schema = schema
        self.catalog: Catalog = schema.catalog
        self.safe = safe
        self.depth = depth
        self.targets: list[_Target] = []
        self.wildcards: set[str] = set()
        self.checked: set[int] = set()
        self.exempt: set[int] = set()  # ids of value nodes whose text provably stays text
        self.handled: set[int] = set()  # ids of type names of regclass/regtype literals
        self.identifiers: set[tuple[int, int]] = set()
        self.naming: set[int] = set()
        self.strings: list[str] = []  # every string literal's text
        self.levels: list[_Level] = [_Level()]  # the FROM scope being walked, innermost last
        self.reads_storage = False  # pg_column_size: a value's storage changes with its row
        self.unread_stars: set[int] = set()  # ids of EXISTS (SELECT * …)'s stars

    def statement(self, text: str) -> _Plan:
        try:
            statements = pglast.parse_sql(text)
        except pglast.parser.ParseError as error:
            raise UncacheableQuery(f"cannot parse the query: {error}") from error
        if len(statements) != 1:
            raise UncacheableQuery(f"{len(statements)} statements: only one SELECT is cacheable")
        statement = statements[0].stmt
        if not _is(statement, ast.SelectStmt):
            name = type(statement).__name__.removesuffix("Stmt").upper()
            raise UncacheableQuery(f"{name} statement: only a read-only SELECT is cacheable")
        self.select(statement, _Scope())
        for kind in sorted(self.naming):  # a literal may be coerced to it (CASE, COALESCE…)
            for text in self.strings:
                self.wildcards.update(_identifier_tags(self.catalog, kind, text, strict=False))
        return _Plan(
            tuple(self.targets),
            frozenset(self.wildcards),
            frozenset(self.checked),
            frozenset(self.identifiers),
            frozenset(self.naming),
        )

    # -- statements and FROM ---------------------------------------------------------------

    def select(self, node: Any, scope: _Scope) -> None:
        if node.intoClause is not None:
            raise UncacheableQuery("SELECT INTO creates a table")
        if node.lockingClause:
            raise UncacheableQuery("SELECT … FOR UPDATE/SHARE locks rows")
        scope = self.with_clause(node.withClause, scope)
        if node.op != enums.SetOperation.SETOP_NONE:
            self.select(node.larg, scope)
            self.select(node.rarg, scope)
            self.levels.append(_Level())  # ORDER BY names output columns: no table's
            self.walk((node.sortClause, node.limitCount, node.limitOffset), scope)
            self.levels.pop()
            return
        level = _Level()
        self.levels.append(level)
        for item in node.fromClause or ():
            self.from_item(item, level, scope)
        self.conjuncts(node.whereClause, level, level.items)
        for part in (node.targetList, node.whereClause, node.groupClause, node.havingClause):
            self.walk(part, scope)
        for part in (node.windowClause, node.sortClause, node.distinctClause, node.valuesLists):
            self.walk(part, scope)
        self.walk((node.limitCount, node.limitOffset), scope)
        self.levels.pop()
        for item in level.items:
            if item.relation is not None:
                self.read(item, item.relation)

    def with_clause(self, clause: Any, scope: _Scope) -> _Scope:
        if clause is None:
            return scope
        names = [cte.ctename for cte in clause.ctes]
        inner = _Scope(frozenset(names), scope) if clause.recursive else scope
        for index, cte in enumerate(clause.ctes):
            if not _is(cte.ctequery, ast.SelectStmt):
                raise UncacheableQuery(f"WITH {cte.ctename} AS (…) writes data")
            before = inner if clause.recursive else _Scope(frozenset(names[:index]), scope)
            self.select(cte.ctequery, before)
            self.walk((cte.search_clause, cte.cycle_clause), before)
        return _Scope(frozenset(names), scope)

    def from_item(self, node: Any, level: _Level, scope: _Scope) -> list[_Item]:
        if _is(node, ast.RangeVar):
            return [self.range_var(node, level, scope)]
        if _is(node, ast.JoinExpr):
            return self.join(node, level, scope)
        if _is(node, ast.RangeTableSample):
            raise UncacheableQuery("TABLESAMPLE reads a random sample")
        if _is(node, ast.RangeSubselect):
            self.select(node.subquery, scope)
        elif _is(node, ast.RangeFunction | ast.RangeTableFunc | ast.JsonTable):
            self.walk(node, scope)
        else:
            raise UncacheableQuery(f"unsupported FROM item {type(node).__name__}")
        return [self.register(_Item(None), getattr(node, "alias", None), level)]

    def register(self, item: _Item, alias: Any, level: _Level, name: str = "") -> _Item:
        level.items.append(item)
        refname = alias.aliasname if alias is not None else name
        item.refname = refname
        if refname:
            level.refs[refname] = item if refname not in level.refs else _Item(None)
        return item

    def range_var(self, node: Any, level: _Level, scope: _Scope) -> _Item:
        if node.schemaname is None and scope.has_cte(node.relname):
            return self.register(_Item(None), node.alias, level, node.relname)
        relation = self.catalog.relation(node.schemaname, node.relname)
        if relation is None:
            name = f"{node.schemaname}.{node.relname}" if node.schemaname else node.relname
            raise UncacheableQuery(
                f"unknown relation {name}: no table or view of that name in the schemas of "
                "the session's search path that its role may use (a schema without USAGE is "
                "left out), as the catalog was last read"
            )
        names = [column.name for column in relation.columns]
        visible = list(names)
        if node.alias is not None:
            for index, alias in enumerate(node.alias.colnames or ()):
                if index < len(visible):
                    visible[index] = alias.sval
        item = _Item(relation, dict(zip(visible, names, strict=True)), bool(node.inh))
        return self.register(item, node.alias, level, node.relname)

    def join(self, node: Any, level: _Level, scope: _Scope) -> list[_Item]:
        left = self.from_item(node.larg, level, scope)
        right = self.from_item(node.rarg, level, scope)
        merged = [name.sval for name in node.usingClause or ()]
        level.merged.update(merged)
        level.natural = level.natural or bool(node.isNatural)
        for item in left + right:  # USING and NATURAL compare columns no reference names
            item.read.update(item.names[name] for name in merged if name in item.names)
            if node.isNatural:
                item.whole = True
        restricted = {
            _JOIN.JOIN_INNER: left + right,
            _JOIN.JOIN_LEFT: right,
            _JOIN.JOIN_RIGHT: left,
        }.get(node.jointype, [])
        self.conjuncts(node.quals, level, restricted)
        self.walk(node.quals, scope)
        if node.alias is not None:  # the join's own refname: not a table
            level.refs[node.alias.aliasname] = _Item(None)
            tables = [item for item in left + right if item.relation is not None]
            level.joins.append((node.alias.aliasname, tables))
            for item in tables if node.alias.colnames else ():
                item.whole = True  # renamed columns no reference can be traced through
        return left + right

    def read(self, item: _Item, relation: Relation) -> None:
        """Target every published table whose changes reach a scan of ``relation``."""
        inherit, restrictions = item.inherit, item.restrictions
        if relation.kind == "v":
            self.view(relation)
            return
        self.refuse_table(relation)
        root = relation
        if relation.root is not None:
            root = self.catalog.by_oid[relation.root]
        partitioned = relation.kind == "p" or relation.root is not None
        scanned = [relation]
        if inherit or partitioned:
            scanned += self.descendants(relation)
        for table in scanned:
            self.refuse_table(table)
            self.row_type(table)
        for table in [root] if partitioned else scanned:
            problem = self.catalog.publication_problem(table)
            if problem:
                raise UncacheableQuery(problem)
            columns = self.columns_read(item, table)
            self.targets.append(_Target(table, tuple(restrictions), columns))

    def columns_read(self, item: _Item, table: Relation) -> int:
        """The column set of what the statement reads of ``table`` through ``item``: row
        existence and each column read; every column for a whole row, a generated column
        (its changes are its inputs'), a table some of whose columns are not published, or a
        statement that measures storage (an update may compress or move a value it left
        unchanged)."""
        if item.whole or self.reads_storage or table.oid in self.catalog.publication.partial:
            return ALL
        columns = ROWS
        for name in item.read:
            column = table.column(name)
            if column is None or column.generated:
                return ALL
            columns |= column_bit(name)
        return columns

    def refuse_table(self, relation: Relation) -> None:
        problem = self.catalog.table_problem(relation)
        if problem:
            raise UncacheableQuery(problem)

    def row_type(self, table: Relation) -> None:
        """Tag the relations whose row types the columns of ``table`` hold: their DDL
        changes the text of its values (``ALTER TABLE t ADD COLUMN`` with ``table`` holding
        a ``t``) and names only them."""
        if table.row_type in self.catalog.facts.naming:
            raise UncacheableQuery(
                f"table {table.display} has a column of type regclass, regtype or regrole "
                "(its text is looked up by name in a catalog no DDL notice of it follows)"
            )
        for relation in self.catalog.row_relations(table.row_type):
            if relation.oid != table.oid:
                self.reference(relation, f"table {table.display}")

    def reference(self, relation: Relation, what: str) -> None:
        """Tag ``relation``, named by ``what`` through its row type or its name."""
        problem = self.catalog.ddl_problem(relation)
        if problem:
            raise UncacheableQuery(f"{what} names {problem}")
        self.wildcards.add(relation.tag)

    def descendants(self, relation: Relation) -> list[Relation]:
        found: list[Relation] = []
        pending = list(relation.children)
        while pending:
            child = self.catalog.by_oid[pending.pop()]
            found.append(child)
            pending.extend(child.children)
        return found

    def view(self, relation: Relation) -> None:
        self.refuse_table(relation)
        self.wildcards.add(relation.tag)
        if relation.view_sql is None:
            raise UncacheableQuery(f"view {relation.display} has no readable definition")
        if self.depth >= _MAX_VIEW_DEPTH:
            raise UncacheableQuery(f"views nested deeper than {_MAX_VIEW_DEPTH} levels")
        sql, depth = relation.view_sql, self.depth + 1
        plan = self.schema.memo(
            ("view", relation.oid, self.safe),
            lambda: _plan_or_refusal(sql, self.schema, self.safe, depth),
        )
        if isinstance(plan, str):
            raise UncacheableQuery(f"view {relation.display}: {plan}")
        self.targets.extend(plan.targets)
        self.wildcards.update(plan.wildcards)

    # -- equalities ------------------------------------------------------------------------

    def conjuncts(self, node: Any, level: _Level, restricted: list[_Item]) -> None:
        """Record every top-level ``col = value`` of ``node`` on the items it restricts."""
        if _is(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.AND_EXPR:
            for arg in node.args:
                self.conjuncts(arg, level, restricted)
            return
        found = self.restriction(node, level) if node is not None else None
        if found is not None and any(found[0] is item for item in restricted):
            found[0].restrictions.append(found[1])

    def restriction(self, node: Any, level: _Level) -> tuple[_Item, _Restriction] | None:
        column, values = _equality(node, self.value)
        if column is None or values is None:
            return None
        resolved = self.resolve(column, level)
        if resolved is None:
            return None
        item, name = resolved
        assert item.relation is not None
        found = item.relation.column(name)
        if found is None or found.family is None:
            return None
        if found.family == "text" and all(v.cast in (None, "text") for v in values):
            self.exempt.update(id(n) for n in _value_nodes(node))  # read as text: no time
        return item, _Restriction(name, found.family, tuple(values))

    def resolve(self, node: Any, level: _Level) -> tuple[_Item, str] | None:
        """The base-table column a reference names at this level, if it provably does."""
        fields = [f.sval if _is(f, ast.String) else None for f in node.fields]
        if len(fields) == 2 and fields[0] is not None and fields[1] is not None:
            item = level.refs.get(fields[0])
            if item is not None and item.relation is not None and fields[1] in item.names:
                return item, item.names[fields[1]]
            return None
        if len(fields) != 1 or fields[0] is None or level.natural or fields[0] in level.merged:
            return None
        name = fields[0]
        owners = [item for item in level.items if item.relation is not None and name in item.names]
        return (owners[0], owners[0].names[name]) if len(owners) == 1 else None

    def value(self, node: Any) -> _Value | None:
        if _is(node, ast.ParamRef):
            return _Value(param=node.number)
        if _is(node, ast.A_Const):
            return self.literal(node)
        if _is(node, ast.TypeCast) and not _is(node.arg, ast.TypeCast):
            family = self.cast_family(node.typeName)
            inner = self.value(node.arg)
            if family is None or inner is None or node.typeName.arrayBounds:
                return None
            return _Value(inner.literal, inner.param, cast=family)
        return None

    def literal(self, node: Any) -> _Value | None:
        if node.isnull:
            return _Value(None)
        value = node.val
        if _is(value, ast.Integer):
            return _Value(value.ival)
        if _is(value, ast.Float) and re.fullmatch(r"-?[0-9]+", value.fval):
            return _Value(int(value.fval))
        if _is(value, ast.Boolean):
            return _Value(bool(value.boolval))
        if _is(value, ast.String):
            if "\\" in value.sval and not self.catalog.standard_strings:
                return None
            return _Value(value.sval)
        return None

    def cast_family(self, type_name: Any) -> Family | None:
        if type_name.typmods or type_name.pct_type or type_name.setof:
            return None
        found = self.catalog.type([n.sval for n in type_name.names])
        return FAMILY_OF_TYPE.get(found.oid) if found is not None else None

    # -- everything else: functions, operators, casts, subqueries ---------------------------

    def walk(self, node: Any, scope: _Scope) -> None:
        if isinstance(node, list | tuple):
            for child in node:
                self.walk(child, scope)
            return
        if not _is(node, ast.Node):
            return
        if _is(node, ast.SelectStmt):
            self.select(node, scope)
            return
        if _is(node, ast.RangeVar):
            raise UncacheableQuery(f"unexpected table reference {node.relname}")
        if _is(node, ast.SubLink) and node.subLinkType == enums.SubLinkType.EXISTS_SUBLINK:
            self.unread_stars.update(_exists_stars(node.subselect))
        if _is(node, ast.ColumnRef):
            self.column_reference(node)
        if _is(node, ast.FuncCall) and node.funcname[-1].sval in _STORAGE_FUNCTIONS:
            self.reads_storage = True
        self.check(node)
        for name in type(node).__slots__:
            self.walk(getattr(node, name), scope)

    def column_reference(self, node: Any) -> None:
        """Record what a column reference may read, on every FROM item in reach it may name
        (an over-approximation never misses one): ``q.c`` reads ``c`` of the tables called
        ``q`` (a whole row where they have no ``c``: ``q.f`` may call ``f(q)``) and of the
        tables of joins called ``q`` (whole rows where none has a ``c``), else — a
        subquery's, a CTE's — ``c`` of every table having it; ``c`` alone reads ``c`` of
        every table having it; a name of a table or join, whole rows of it; ``*``, whole
        rows of the tables of its level, ``q.*`` of those called ``q``."""
        if id(node) in self.unread_stars:
            return
        fields = [f.sval if _is(f, ast.String) else None for f in node.fields]
        *qualifiers, last = fields
        items = [i for level in self.levels for i in level.items if i.relation is not None]
        local = [item for item in self.levels[-1].items if item.relation is not None]
        qualifier = qualifiers[-1] if qualifiers else None
        named = [item for item in items if qualifier is not None and item.refname == qualifier]
        joined = self.joined(qualifier) if qualifier is not None else []
        if last is None:  # a star
            for item in named + joined or local:
                item.whole = True
            return
        for item in [i for i in items if i.refname == last] + self.joined(last):
            item.whole = True  # a whole-row reference, of a table or a join
        for item in named:
            if last in item.names:
                item.read.add(item.names[last])
                continue
            item.whole = True
            problem = self.attribute_call_problem(last)
            if problem:
                raise UncacheableQuery(problem)
        if joined and not any(last in item.names for item in joined):
            for item in joined:
                item.whole = True
        for item in joined if named or joined else items:  # else: a subquery's, a CTE's
            if last in item.names:
                item.read.add(item.names[last])

    def joined(self, alias: str) -> list[_Item]:
        """The tables of every join in reach called ``alias``."""
        return [
            item
            for level in self.levels
            for name, tables in level.joins
            if name == alias
            for item in tables
        ]

    def check(self, node: Any) -> None:
        """Refuse ``node`` if it may call something unsafe or depends on time or the session;
        tag the relations it names through a type or an object identifier."""
        if _is(node, ast.A_Expr):  # before its operands are visited
            self.exempt.update(id(value) for value in self.sink_operands(node))
        if _is(node, ast.ParamRef) and id(node) not in self.exempt:
            self.checked.add(node.number)
        problem = self.problem(node)
        if problem:
            raise UncacheableQuery(problem)

    def problem(self, node: Any) -> str | None:
        if _is(node, ast.FuncCall):
            return self.call_problem(node)
        if _is(node, ast.A_Expr):
            return self.operator_problem(node)
        if _is(node, ast.TypeCast):
            return self.cast_problem(node)
        if _is(node, ast.TypeName):
            return self.type_name_problem(node)
        if _is(node, ast.SQLValueFunction) and node.op not in _ALLOWED_VALUE_FUNCTIONS:
            return f"{node.op.name.removeprefix('SVFOP_')} depends on time or the session"
        if _is(node, ast.A_Const) and _is(node.val, ast.String):
            return self.literal_problem(node)
        if _is(node, ast.RangeFunction | ast.RangeTableFunc | ast.JsonTable | ast.JsonFuncExpr):
            return self.table_function_problem(node)
        if _is(node, ast.ColumnRef | ast.A_Indirection):
            return self.field_problem(node)
        return None

    def field_problem(self, node: Any) -> str | None:
        """A system column changes without a logical write, whether named as a column or
        selected from a whole row (``(t).xmax``); ``(t).f`` is a composite's field or the
        call ``f(t)``, which must then pass as a call (``t.f`` is checked where references
        are resolved: :meth:`column_reference`)."""
        parts = node.fields[-1:] if _is(node, ast.ColumnRef) else node.indirection
        names = [part.sval for part in parts if _is(part, ast.String)]
        for name in names:
            if name in _PHYSICAL_COLUMNS:
                return f"system column {name} changes without a logical write"
        if _is(node, ast.A_Indirection):  # a field of a composite, or f(t): check as a call
            return self.attribute_call_problem(names[-1]) if names else None
        return None

    def attribute_call_problem(self, name: str) -> str | None:
        """Why ``t.name`` or ``(t).name`` — ``name(t)`` when ``name`` is no column of ``t``
        — may not be cached, if a one-argument function ``name`` exists."""
        if not self.catalog.candidates([name], 1):
            return None
        return self.catalog.function_problem([name], 1, self.safe)

    def literal_problem(self, node: Any) -> str | None:
        """A string literal may be read as a date or time (unless it provably stays text):
        it must name no time word. Backslashes with ``standard_conforming_strings`` off are
        escapes pglast does not read: the text cannot be told."""
        text = node.val.sval
        self.strings.append(text)
        if id(node) in self.exempt:
            return None
        if _names_time(text):
            return f"the literal {text!r} names the current time"
        if "\\" in text and not self.catalog.standard_strings:
            return f"the literal {text!r} may name the current time (backslash escapes)"
        return None

    def sink_operands(self, node: Any) -> list[Any]:
        """The literals and parameters read as the argument type of a binary operator whose
        every overload returns ``boolean`` from a type with immutable input on that side
        (``LIKE``, ``SIMILAR TO``, ``~``, ``@@``, …): their text goes nowhere else."""
        if node.kind not in _SINK_KINDS or node.lexpr is None:
            return []
        name = node.name[-1].sval
        operands = (node.lexpr, node.rexpr)
        sinks = [o for side, o in enumerate(operands) if (name, side) in self.catalog.sinks]
        return [value for operand in sinks for value in _sink_values(operand)]

    def call_problem(self, node: Any) -> str | None:
        names = [n.sval for n in node.funcname]
        nargs = None if node.func_variadic else len(node.args or ())
        problem = self.catalog.function_problem(names, nargs, self.safe)
        for type_oid in sorted(self.catalog.function_types(names, nargs)):
            problem = problem or self.type_problem(type_oid, f"function {'.'.join(names)}()")
        return problem or self.call_conversion_problem(node, names)

    def call_conversion_problem(self, node: Any, names: list[str]) -> str | None:
        """``date(x)`` is a cast when no function takes ``x``'s type (text); the
        ``json*_populate_record*`` functions read JSON text into the first argument's type."""
        args: Any = node.args or ()
        target = self.catalog.type(names) if len(args) == 1 and not node.agg_star else None
        if target is not None and target.oid in self.catalog.facts.clock:
            return self.conversion_problem(args[0], target.name)
        if names[-1] not in _POPULATE or len(args) < 2:
            return None
        record = self.cast_type(args[0])
        if record is not None and record not in self.catalog.facts.clock:
            return None
        return None if _constant(args[1]) else _conversion(names[-1] + "()")

    def table_function_problem(self, node: Any) -> str | None:
        """Functions in ``FROM`` with column definitions (``jsonb_to_record(x) AS r(d
        date)``), ``XMLTABLE``, ``JSON_TABLE`` and ``JSON_VALUE … RETURNING`` read text into
        typed columns: not from what the query computes, if a column's type reads the clock."""
        inputs: list[tuple[Any, Any]]
        if _is(node, ast.RangeFunction):
            calls = [(call, defs or node.coldeflist) for call, defs in node.functions]
            inputs = [(c.args or (), d) for c, d in calls if _is(c, ast.FuncCall)]
        elif _is(node, ast.RangeTableFunc):
            defaults = [c.coldefexpr for c in node.columns or () if c.coldefexpr is not None]
            inputs = [((node.docexpr, *defaults), node.columns)]
        elif _is(node, ast.JsonTable):
            columns = _json_columns(node.columns)
            inputs = [(_json_inputs(node, *columns), columns)]
        else:
            inputs = [(_json_inputs(node), [node.output] if node.output else [])]
        for args, columns in inputs:
            clock = any(self.holds_clock(c.typeName) for c in columns or () if c.typeName)
            if clock and not all(_constant(arg) for arg in args):
                return _conversion(type(node).__name__)
        return None

    def holds_clock(self, type_name: Any) -> bool:
        found = self.catalog.type([n.sval for n in type_name.names])
        return found is None or found.oid in self.catalog.facts.clock

    def cast_type(self, node: Any) -> int | None:
        """The type ``node`` is cast to, if it is a cast to a known type."""
        if not _is(node, ast.TypeCast):
            return None
        found = self.catalog.type([n.sval for n in node.typeName.names])
        return found.oid if found is not None else None

    def conversion_problem(self, arg: Any, target: str) -> str | None:
        """A value converted to a clock type is parsed if it is text: text the query
        computes (from a table, from pieces: ``('n' || 'ow')::date``) may name the current
        time. Literals and parameters are checked themselves."""
        return _conversion(f"a value cast to {target}") if self.may_be_text(arg) else None

    def may_be_text(self, node: Any) -> bool:
        """Whether ``node``'s value may be of a type converted through text (a string type,
        :attr:`TypeFacts.textual`), as far as the catalog tells without PostgreSQL's type
        resolution: unknown counts as text."""
        facts = self.catalog.facts
        if _constant(node) or node is None:
            return False  # a literal's or a parameter's text is checked itself
        if _is(node, ast.ColumnRef | ast.TypeCast):
            found = self.column_type(node) if _is(node, ast.ColumnRef) else self.cast_type(node)
            return found is None or found in facts.textual
        if _is(node, ast.FuncCall):
            return self.call_may_be_text(node)
        if _is(node, ast.A_Expr) and node.kind == _KIND.AEXPR_OP:
            name = node.name[-1].sval
            operands = (node.lexpr, node.rexpr)
            polymorphic = name in self.catalog.polymorphic_operators
            text = polymorphic and any(map(self.may_be_text, operands))
            return text or name in self.catalog.text_operators
        if _is(node, ast.A_Expr):
            return node.kind not in _BOOLEAN_KINDS and self.may_be_text(node.lexpr)
        if _is(node, ast.SubLink):
            return node.subLinkType not in _BOOLEAN_LINKS
        if _is(node, ast.BoolExpr | ast.NullTest | ast.BooleanTest | ast.RowExpr):
            return False  # a row is converted field by field, text to time never implicitly
        parts = _value_parts(node)
        return parts is None or any(self.may_be_text(part) for part in parts)

    def call_may_be_text(self, node: Any) -> bool:
        """A call gives text if a function it may resolve to returns text, or an argument's
        type (polymorphic); a function taking text where an argument is no text and no
        literal is not one it resolves to (no type but text's kin casts to text
        implicitly)."""
        facts = self.catalog.facts
        names = [n.sval for n in node.funcname]
        args: Any = node.args or ()
        nargs = None if node.func_variadic else len(args)
        candidates = self.catalog.candidates(names, nargs)
        positional = not node.func_variadic and not any(_is(a, ast.NamedArgExpr) for a in args)
        if positional:
            taken = [self.may_be_text(a) or _constant(a) for a in args]
            candidates = [f for f in candidates if self.may_take(f, taken)]
        results = {f.types[0] for f in candidates}
        if not candidates or not results.isdisjoint(facts.textual):
            return True
        return not results.isdisjoint(facts.polymorphic) and any(map(self.may_be_text, args))

    def may_take(self, function: Function, texts: list[bool]) -> bool:
        """Whether ``function`` accepts arguments of which only ``texts`` may be text."""
        textual = self.catalog.facts.textual
        inputs = function.inputs
        return all(
            texts[i] or inputs[i] not in textual for i in range(min(len(inputs), len(texts)))
        )

    def column_type(self, node: Any) -> int | None:
        """The type of the base-table column ``node`` names in the scope being walked."""
        resolved = self.resolve(node, self.levels[-1])
        if resolved is None:
            return None
        item, name = resolved
        column = item.relation.column(name) if item.relation is not None else None
        return column.type_oid if column is not None else None

    def cast_problem(self, node: Any) -> str | None:
        names = [n.sval for n in node.typeName.names]
        problem = self.catalog.type_problem(names)
        found = self.catalog.type(names)
        if not problem and found is not None and found.oid in self.catalog.facts.clock:
            problem = self.conversion_problem(node.arg, found.name)
        if problem or found is None or found.oid not in NAMING_TYPES:
            return problem
        if node.typeName.arrayBounds:
            return None  # the type name is refused: it holds a regclass, regtype or regrole
        self.handled.add(id(node.typeName))
        return self.identifier_cast(node.arg, found)

    def identifier_cast(self, arg: Any, found: TypeInfo) -> str | None:
        """A cast to ``regclass``/``regtype`` (``found``) looks a name up: a literal's
        relations are tagged now, a parameter's at evaluation; the name in anything else is
        only known when the query runs. Roles change without any DDL notice."""
        if found.oid == REGROLE:
            return "regrole: role names change with no DDL notice (roles are global objects)"
        self.naming.add(found.oid)
        if _is(arg, ast.ParamRef):
            self.identifiers.add((arg.number, found.oid))
        elif _is(arg, ast.A_Const) and _is(arg.val, ast.String):
            self.wildcards.update(_identifier_tags(self.catalog, found.oid, arg.val.sval))
        elif not (_is(arg, ast.A_Const) and arg.isnull):
            return (
                f"a value cast to {found.name} is looked up by name when the query runs: only "
                "a literal or a parameter naming a known relation is cacheable"
            )
        return None

    def type_name_problem(self, node: Any) -> str | None:
        names = [n.sval for n in node.names]
        found = self.catalog.type(names)
        if found is None:
            return f"unknown relation or type {'.'.join(names)}"
        self.wildcards.update(self.catalog.type_shadows(names, found))
        if id(node) in self.handled:  # regclass or regtype of a literal: resolved
            return None
        return self.type_problem(found.oid, f"type {found.schema}.{found.name}")

    def type_problem(self, type_oid: int, what: str) -> str | None:
        """Tag the relations whose row types ``what`` (of type ``type_oid``) holds; refuse
        one holding object identifiers looked up by name."""
        if type_oid in self.catalog.facts.naming:
            return f"{what} holds a regclass, regtype or regrole (its text is looked up by name)"
        for relation in self.catalog.row_relations(type_oid):
            self.reference(relation, what)
        return None

    def operator_problem(self, node: Any) -> str | None:
        between = node.kind in _BETWEEN
        names = [["<="], [">="]] if between else [[n.sval for n in node.name]]
        for name in names:
            problem = self.catalog.operator_problem(name, self.safe)
            if problem:
                return problem
        return None


def _exists_stars(select: Any) -> list[int]:
    """The ids of the ``*`` and ``q.*`` an ``EXISTS (SELECT …)`` lists: it asks only whether
    a row comes back, so they read no column."""
    if not _is(select, ast.SelectStmt) or select.op != enums.SetOperation.SETOP_NONE:
        return []
    targets = [target.val for target in select.targetList or ()]
    return [id(t) for t in targets if _is(t, ast.ColumnRef) and _is(t.fields[-1], ast.A_Star)]


def _equality(node: Any, value: Any) -> tuple[Any, list[_Value] | None]:
    """The column and values of ``col = v``, ``col IN (…)``, ``col = ANY(…)``, a bare
    boolean column, ``NOT col``, ``col IS TRUE/FALSE``; ``(None, None)`` otherwise."""
    if _is(node, ast.ColumnRef):
        return node, [_Value(True, cast="bool")]
    negation = _is(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.NOT_EXPR
    if negation and _is(node.args[0], ast.ColumnRef):
        return node.args[0], [_Value(False, cast="bool")]
    if _is(node, ast.BooleanTest) and _is(node.arg, ast.ColumnRef):
        truth = {enums.BoolTestType.IS_TRUE: True, enums.BoolTestType.IS_FALSE: False}
        if node.booltesttype in truth:
            return node.arg, [_Value(truth[node.booltesttype], cast="bool")]
    if not _is(node, ast.A_Expr) or [n.sval for n in node.name] != ["="]:
        return None, None
    kind = node.kind
    if kind == _KIND.AEXPR_OP:
        for column, other in ((node.lexpr, node.rexpr), (node.rexpr, node.lexpr)):
            if _is(column, ast.ColumnRef) and (found := value(other)) is not None:
                return column, [found]
        return None, None
    if not _is(node.lexpr, ast.ColumnRef):
        return None, None
    if kind == _KIND.AEXPR_IN:
        values = [value(element) for element in node.rexpr]
        return node.lexpr, None if None in values else values
    if kind == _KIND.AEXPR_OP_ANY:
        return node.lexpr, _any_values(node.rexpr, value)
    return None, None


def _any_values(node: Any, value: Any) -> list[_Value] | None:
    """The values of ``= ANY(ARRAY[…])``, ``= ANY($n)`` and ``= ANY($n::type[])``."""
    if _is(node, ast.A_ArrayExpr):
        values = [value(element) for element in node.elements or ()]
        return None if None in values else values
    if _is(node, ast.ParamRef):
        return [_Value(param=node.number, each=True)]
    if _is(node, ast.TypeCast) and _is(node.arg, ast.ParamRef):
        bounds = node.typeName.arrayBounds or ()
        element = ast.TypeCast(arg=node.arg, typeName=ast.TypeName(names=node.typeName.names))
        found = value(element) if len(bounds) == 1 and not node.typeName.typmods else None
        if found is not None:
            return [_Value(param=found.param, each=True, cast=found.cast)]
    return None


def _value_nodes(node: Any) -> list[Any]:
    """The literal and parameter nodes inside an equality (for the time-word exemption)."""
    found: list[Any] = []
    pending: list[Any] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, list | tuple):
            pending.extend(current)
        elif _is(current, ast.A_Const | ast.ParamRef):
            found.append(current)
        elif _is(current, ast.Node) and not _is(current, ast.ColumnRef):
            pending.extend(getattr(current, name) for name in type(current).__slots__)
    return found


def _constant(node: Any) -> bool:
    """A literal or a parameter, cast or not: its text is checked for time words."""
    while _is(node, ast.TypeCast):
        node = node.arg
    return _is(node, _VALUE_NODES)


def _conversion(what: str) -> str:
    return (
        f"{what} reads text the query computes as a date or time: it may name the current "
        "time (now, today, …)"
    )


def _value_parts(node: Any) -> list[Any] | None:
    """The operands whose value an expression may take: ``coalesce``, ``greatest``,
    ``CASE``, ``COLLATE``, ``ARRAY[…]``; ``None`` for an expression of no known shape."""
    if _is(node, ast.CoalesceExpr | ast.MinMaxExpr):
        return list(node.args or ())
    if _is(node, ast.CaseExpr):
        return [when.result for when in node.args or ()] + [node.defresult]
    if _is(node, ast.CollateClause):
        return [node.arg]
    if _is(node, ast.A_ArrayExpr):
        return list(node.elements or ())
    return None


def _json_inputs(*nodes: Any) -> list[Any]:
    """The values SQL/JSON reads into typed columns or results: the context item, the
    ``PASSING`` arguments, the ``DEFAULT`` expressions of ``ON EMPTY``/``ON ERROR``."""
    found: list[Any] = []
    for node in nodes:
        context = getattr(node, "context_item", None)
        found += [context.raw_expr] if context is not None else []
        found += [argument.val.raw_expr for argument in getattr(node, "passing", None) or ()]
        for behavior in (getattr(node, "on_empty", None), getattr(node, "on_error", None)):
            found += [behavior.expr] if behavior is not None and behavior.expr else []
    return found


def _json_columns(columns: Any) -> list[Any]:
    """The columns of ``JSON_TABLE``, nested ones included."""
    found: list[Any] = []
    for column in columns or ():
        found.append(column)
        found.extend(_json_columns(column.columns))
    return found


def _sink_values(operand: Any) -> list[Any]:
    """The literals and parameters an operand reads as its own type: itself, the elements
    of ``ARRAY[…]`` (for ``ANY``/``ALL``), the arguments of a pattern's escape wrapper."""
    if _is(operand, _VALUE_NODES):
        return [operand]
    values: Any = ()
    if _is(operand, ast.A_ArrayExpr):
        values = operand.elements or ()
    elif _is(operand, ast.FuncCall) and [n.sval for n in operand.funcname] in _PATTERN_ESCAPES:
        values = operand.args or ()
    return [value for value in values if _is(value, _VALUE_NODES)]


def _names_time(text: str) -> bool:
    """Whether ``text`` holds a word that date/time input reads as the current time
    (``'now'``, ``'[today,tomorrow)'``, ``'{"at": "now"}'``, …), wherever it stands."""
    return _TIME_WORD.search(text) is not None


# -- object identifiers ------------------------------------------------------------------


def _identifier_tags(catalog: Catalog, kind: int, text: str, *, strict: bool = True) -> list[str]:
    """The wildcards of the relations ``text`` names as a ``kind`` (regclass or regtype)
    literal. ``strict``: the literal is cast: a text that names none is refused (a relation
    created since the catalog was read is found by reading it again). Otherwise any
    literal of the query may be coerced to ``kind``: a text that names none would fail the
    query, and is no concern. A numeric OID names whatever relation has it, then or later."""
    name = _IDENTIFIER_KINDS[kind]
    stripped = text.strip(_SPACES)
    if stripped.isdecimal() and stripped.isascii():
        what = f"{name} literal" if strict else f"literal beside a {name} cast"
        raise UncacheableQuery(f"the {what} {text!r} may be an OID (any relation may get it)")
    found = _regclass(catalog, text) if kind == REGCLASS else _regtype(catalog, text)
    if found is None and strict:
        unknown = "relation" if kind == REGCLASS else "relation or type"
        raise UncacheableQuery(
            f"unknown {unknown} {stripped} named by a {name} literal (created after the "
            "schema was loaded? call Schema.refresh())"
        )
    relations, tags = found or ([], [])
    for relation in relations:
        problem = catalog.ddl_problem(relation)
        if problem:
            raise UncacheableQuery(f"{name} literal {text!r} names {problem}")
        tags.append(relation.tag)
    return tags


def _regclass(catalog: Catalog, text: str) -> tuple[list[Relation], list[str]] | None:
    """The relation ``regclassin`` finds for ``text`` (``[schema.]name``), if any (one of
    the same name created in another schema invalidates everything: nothing hides it)."""
    names = _qualified_name(text)
    if names is None or not 1 <= len(names) <= 2:
        return None
    found = catalog.relation(names[0] if len(names) == 2 else None, names[-1])
    return ([found], []) if found is not None else None


def _regtype(catalog: Catalog, text: str) -> tuple[list[Relation], list[str]] | None:
    """The relations whose row types the type ``regtypein`` finds for ``text`` holds, and
    the tags of relations that would hide it (:meth:`Catalog.type_shadows`)."""
    try:
        statements = pglast.parse_sql(f"SELECT NULL::{text}")
    except (pglast.parser.ParseError, ValueError):  # ValueError: a NUL character
        return None
    statement: Any = statements[0].stmt if len(statements) == 1 else None
    if not _is(statement, ast.SelectStmt) or any(getattr(statement, f) for f in _EMPTY_SELECT):
        return None
    targets: Any = statement.targetList or ()
    cast: Any = targets[0].val if len(targets) == 1 and targets[0].name is None else None
    if not (_is(cast, ast.TypeCast) and _is(cast.arg, ast.A_Const) and cast.arg.isnull):
        return None
    names = [n.sval for n in cast.typeName.names]
    found = catalog.type(names)
    if found is None:
        return None
    return catalog.row_relations(found.oid), catalog.type_shadows(names, found)


def _qualified_name(text: str) -> list[str] | None:
    """``text`` split as PostgreSQL's ``SplitIdentifierString`` splits a qualified name:
    dot-separated identifiers, blanks around them, double quotes keeping case (``""`` is a
    quote), others lowercased (ASCII), each truncated to 63 bytes; ``None`` if malformed."""
    names: list[str] = []
    rest = text.lstrip(_SPACES)
    while True:
        if rest.startswith('"'):
            match = re.match(r'"((?:[^"]|"")*)"', rest)
            if match is None:
                return None
            name, rest = match.group(1).replace('""', '"'), rest[match.end() :]
        else:
            match = re.match(rf"[^.{_SPACES}]+", rest)
            if match is None:
                return None
            name = re.sub("[A-Z]+", lambda m: m.group(0).lower(), match.group(0))
            rest = rest[match.end() :]
        names.append(name.encode()[:_NAME_BYTES].decode(errors="ignore"))
        rest = rest.lstrip(_SPACES)
        if not rest:
            return names
        if rest[0] != ".":
            return None
        rest = rest[1:].lstrip(_SPACES)


# -- evaluation ------------------------------------------------------------------------


def _evaluate(plan: _Plan, params: list[Any], schema: Schema) -> frozenset[str]:
    for index in plan.checked_params:
        if 0 < index <= len(params) and _param_names_time(params[index - 1]):
            raise UncacheableQuery(
                f"parameter ${index} {params[index - 1]!r} names the current time"
            )
    tags: set[str] = set(plan.wildcards)
    tags.update(_identifier_param_tags(plan, params, schema.catalog))
    for target in plan.targets:
        tags.update(_target_tags(target, params, schema))
    return merge_tags(tags)


def _param_names_time(value: object, depth: int = 0) -> bool:
    """Whether a text psycopg may send for ``value`` or a part of it names the current
    time: a ``str`` (sent untyped), a list (an array), a tuple (a record), an ``Enum``
    (its name), JSON, bytes (``convert_from`` reads them as text), or anything else by its
    ``str()``; a value nested too deep to tell counts as naming it."""
    if depth > _MAX_PARAM_DEPTH:
        return True
    if value is None or isinstance(value, _TIMELESS):
        return False
    if isinstance(value, str):
        named = isinstance(value, enum.Enum) and _names_time(value.name)
        return named or _names_time(str.__str__(value))
    if isinstance(value, bytes | bytearray | memoryview):
        return _names_time(bytes(value).decode("latin-1"))
    if isinstance(value, enum.Enum):
        return _names_time(value.name) or _param_names_time(value.value, depth + 1)
    parts: Iterable[object] = ()
    if isinstance(value, Json | Jsonb):
        parts = [value.obj]
    elif isinstance(value, Mapping):
        parts = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        parts = value
    else:
        return _names_time(str(value))
    return any(_param_names_time(part, depth + 1) for part in parts)


def _identifier_param_tags(plan: _Plan, params: list[Any], catalog: Catalog) -> list[str]:
    """The relations parameters name as ``regclass``/``regtype``: those cast to one, and,
    when the query casts to one anywhere, any ``str`` it may coerce to it."""
    tags: list[str] = []
    for index, kind in sorted(plan.identifiers):
        value = params[index - 1] if 0 < index <= len(params) else None
        if value is None:
            continue  # NULL names nothing
        if not isinstance(value, str):
            raise UncacheableQuery(
                f"parameter ${index} cast to {_IDENTIFIER_KINDS[kind]} is a "
                f"{type(value).__name__}: only a str naming a known relation is cacheable"
            )
        tags += _identifier_tags(catalog, kind, str.__str__(value))
    for kind in sorted(plan.naming):
        for value in params:
            if isinstance(value, str):
                tags += _identifier_tags(catalog, kind, str.__str__(value), strict=False)
    return tags


def _target_tags(target: _Target, params: list[Any], schema: Schema) -> list[str]:
    """Fine tags of the most selective usable restriction, else the wildcard."""
    relation = target.relation
    columns = schema.columns_of(relation)
    choices: list[tuple[int, bool, list[str]]] = []
    for restriction in target.restrictions:
        texts = _texts(restriction, params) if restriction.column in columns else None
        if not texts:
            continue
        prefix = f"{relation.tag}:{escape_name(restriction.column)}="
        tags = [with_columns(prefix + text, target.columns) for text in texts]
        if all(len(tag.encode()) <= MAX_TAG_BYTES for tag in tags):
            # Fewest tags first; a boolean splits a table in two halves only: last.
            choices.append((len(tags), restriction.family == "bool", tags))
    if not choices:
        return [with_columns(relation.tag, target.columns)]
    return min(choices, key=lambda choice: choice[:2])[2]


def _texts(restriction: _Restriction, params: list[Any]) -> list[str] | None:
    """PostgreSQL's text output of every non-NULL value, or ``None`` if one is unprovable."""
    texts: set[str] = set()
    for value in restriction.values:
        if value.cast is not None and value.cast != restriction.family:
            return None
        if value.param == 0:
            candidates: list[object] = [value.literal]
        elif value.param > len(params):
            return None
        elif value.each:
            listed = params[value.param - 1]
            if type(listed) is not list:
                return None
            candidates = listed
        else:
            candidates = [params[value.param - 1]]
        for candidate in candidates:
            if candidate is None:
                continue  # NULL equals nothing
            text = _text_output(candidate, restriction.family)
            if text is None:
                return None
            texts.add(text)
    return sorted(texts)


def _text_output(value: object, family: Family) -> str | None:
    """PostgreSQL's text output of ``value`` read as ``family``, where provably known."""
    kind = type(value)
    if family == "int":
        if kind in _TYPED_INTS and isinstance(value, int):  # exact types: never a bool
            return str(int(value))
        if kind is str and _INT_TEXT.fullmatch(str(value)):
            return str(int(str(value)))
    elif family == "text":
        if kind is str and "\x00" not in str(value):
            return str(value)
    elif family == "uuid":
        if kind is uuid.UUID:
            return str(value)
        if kind is str:
            try:
                return str(uuid.UUID(str(value)))
            except ValueError:
                return None
    elif family == "bool":
        if kind is bool:
            return "t" if value else "f"
        if kind is str:
            return _BOOL_TEXT.get(str(value).strip(" \t\n\r\v\f").lower())
    return None
