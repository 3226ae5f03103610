"""SQL → invalidation tags: the read side (rules in docs/sql-tags.md).

:func:`analyze` parses a query with PostgreSQL's own parser (pglast) and returns the tags a
cached result depends on: for every table the query reads, one fine tag
``schema.table:column=value`` per value of an equality on a tag column in the top-level
conjunction of that table's scope, else the table's wildcard ``schema.table``. A query that
cannot be analysed or must not be cached raises :class:`UncacheableQuery`.

Two phases: the *plan* of a statement (tables read, equalities usable for fine tags,
refusals) depends only on its text and the catalog, and is memoized in the
:class:`~txcache._schema.Schema`; the *evaluation* turns literal and parameter values into
tag text with the tag columns in force at the snapshot. Unsound is never acceptable: where
anything is uncertain the table's wildcard stands in.

Exceptions::

    TxcacheError
     └── UncacheableQuery   the message names the construct that prevents caching
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pglast
from pglast import ast, enums
from psycopg.types.numeric import Int2, Int4, Int8

from txcache._schema import FAMILY_OF_TYPE, Catalog, Family, Relation, Schema, escape_name
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
_TIME_WORD = re.compile(r"(?i)(?<![a-z])(now|today|tomorrow|yesterday)(?![a-z])")
_DATETIME_LIKE = re.compile(r"[\w\s:.+\-/,]{0,64}")
_JOIN = enums.JoinType
_ALLOWED_VALUE_FUNCTIONS = {enums.SQLValueFunctionOp.SVFOP_CURRENT_CATALOG}
_PHYSICAL_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax"})
_KIND = enums.A_Expr_Kind
_BETWEEN = {_KIND.AEXPR_BETWEEN, _KIND.AEXPR_NOT_BETWEEN}
_BETWEEN |= {_KIND.AEXPR_BETWEEN_SYM, _KIND.AEXPR_NOT_BETWEEN_SYM}


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
        if (name is not None) != named:
            raise UncacheableQuery("placeholders do not match the parameters (named/positional)")
        if name is None:
            count += 1
            chunks.append(f"${count}")
        else:
            chunks.append(f"${names.setdefault(name, len(names) + 1)}")
    chunks.append(sql[end:])
    if isinstance(params, Mapping):
        missing = [name for name in names if name not in params]
        if missing:
            raise UncacheableQuery(f"no value for placeholder %({missing[0]})s")
        return "".join(chunks), [params[name] for name in names]
    values = list(params)
    if len(values) != count:
        raise UncacheableQuery(f"the query has {count} placeholders but {len(values)} parameters")
    return "".join(chunks), values


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
    """A published table whose changes reach the result, with the equalities that hold."""

    relation: Relation
    restrictions: tuple[_Restriction, ...]


@dataclass(frozen=True)
class _Plan:
    targets: tuple[_Target, ...]
    wildcards: frozenset[str]  # views' own names
    checked_params: frozenset[int]  # parameters whose text must not name the current time


def _plan_or_refusal(text: str, schema: Schema, safe: frozenset[str], depth: int) -> _Plan | str:
    try:
        return _Planner(schema, safe, depth).statement(text)
    except UncacheableQuery as refusal:
        return str(refusal)


@dataclass(eq=False)
class _Item:
    """One FROM item of a query level; ``relation`` is ``None`` for anything but a table
    or view. ``names`` maps visible column names (after alias renaming) to real ones."""

    relation: Relation | None
    names: dict[str, str] = field(default_factory=dict)
    inherit: bool = True
    restrictions: list[_Restriction] = field(default_factory=list)


@dataclass
class _Level:
    """The FROM scope of one SELECT: refname → item, and what blocks unqualified names."""

    refs: dict[str, _Item] = field(default_factory=dict)
    items: list[_Item] = field(default_factory=list)
    merged: set[str] = field(default_factory=set)  # USING columns
    natural: bool = False


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
        self.exempt: set[int] = set()  # ids of value nodes compared with a text column

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
        return _Plan(tuple(self.targets), frozenset(self.wildcards), frozenset(self.checked))

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
            self.walk((node.sortClause, node.limitCount, node.limitOffset), scope)
            return
        level = _Level()
        for item in node.fromClause or ():
            self.from_item(item, level, scope)
        self.conjuncts(node.whereClause, level, level.items)
        for part in (node.targetList, node.whereClause, node.groupClause, node.havingClause):
            self.walk(part, scope)
        for part in (node.windowClause, node.sortClause, node.distinctClause, node.valuesLists):
            self.walk(part, scope)
        self.walk((node.limitCount, node.limitOffset), scope)
        for item in level.items:
            if item.relation is not None:
                self.read(item.relation, item.inherit, item.restrictions)

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
                f"unknown relation {name} (created after the schema was loaded? "
                "call Schema.refresh())"
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
        level.merged.update(name.sval for name in node.usingClause or ())
        level.natural = level.natural or bool(node.isNatural)
        restricted = {
            _JOIN.JOIN_INNER: left + right,
            _JOIN.JOIN_LEFT: right,
            _JOIN.JOIN_RIGHT: left,
        }.get(node.jointype, [])
        self.conjuncts(node.quals, level, restricted)
        self.walk(node.quals, scope)
        if node.alias is not None:  # the join's own refname: not a table
            level.refs[node.alias.aliasname] = _Item(None)
        return left + right

    def read(self, relation: Relation, inherit: bool, restrictions: list[_Restriction]) -> None:
        """Target every published table whose changes reach a scan of ``relation``."""
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
        for table in [root] if partitioned else scanned:
            problem = self.catalog.publication_problem(table)
            if problem:
                raise UncacheableQuery(problem)
            self.targets.append(_Target(table, tuple(restrictions)))

    def refuse_table(self, relation: Relation) -> None:
        problem = self.catalog.table_problem(relation)
        if problem:
            raise UncacheableQuery(problem)

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
        if found.family == "text":
            self.exempt.update(id(n) for n in _value_nodes(node))
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
        self.check(node)
        for name in type(node).__slots__:
            self.walk(getattr(node, name), scope)

    def check(self, node: Any) -> None:
        """Refuse ``node`` if it may call something unsafe or depends on time or the session."""
        if _is(node, ast.ParamRef) and id(node) not in self.exempt:
            self.checked.add(node.number)
        problem = self.problem(node)
        if problem:
            raise UncacheableQuery(problem)

    def problem(self, node: Any) -> str | None:
        if _is(node, ast.FuncCall):
            names = [n.sval for n in node.funcname]
            nargs = None if node.func_variadic else len(node.args or ())
            return self.catalog.function_problem(names, nargs, self.safe)
        if _is(node, ast.A_Expr):
            return self.operator_problem(node)
        if _is(node, ast.TypeCast):
            return self.catalog.type_problem([n.sval for n in node.typeName.names])
        if _is(node, ast.SQLValueFunction) and node.op not in _ALLOWED_VALUE_FUNCTIONS:
            return f"{node.op.name.removeprefix('SVFOP_')} depends on time or the session"
        text = node.val.sval if _is(node, ast.A_Const) and _is(node.val, ast.String) else None
        if text is not None and id(node) not in self.exempt and _names_time(text):
            return f"the literal {text!r} names the current time"
        last: Any = node.fields[-1] if _is(node, ast.ColumnRef) else None
        if _is(last, ast.String) and last.sval in _PHYSICAL_COLUMNS:
            return f"system column {last.sval} changes without a logical write"
        return None

    def operator_problem(self, node: Any) -> str | None:
        between = node.kind in _BETWEEN
        names = [["<="], [">="]] if between else [[n.sval for n in node.name]]
        for name in names:
            problem = self.catalog.operator_problem(name, self.safe)
            if problem:
                return problem
        return None


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


def _names_time(text: str) -> bool:
    """Whether ``text`` could be date/time input naming the current time (``'now'``,
    ``'today'``, ``'tomorrow 10:00'``, …)."""
    return _TIME_WORD.search(text) is not None and _DATETIME_LIKE.fullmatch(text) is not None


# -- evaluation ------------------------------------------------------------------------


def _evaluate(plan: _Plan, params: list[Any], schema: Schema) -> frozenset[str]:
    for index in plan.checked_params:
        if 0 < index <= len(params) and _param_names_time(params[index - 1]):
            raise UncacheableQuery(
                f"parameter ${index} {params[index - 1]!r} names the current time"
            )
    tags: set[str] = set(plan.wildcards)
    for target in plan.targets:
        tags.update(_target_tags(target, params, schema))
    wildcards = {tag for tag in tags if ":" not in tag}
    return frozenset(tag for tag in tags if tag.split(":", 1)[0] not in wildcards or ":" not in tag)


def _param_names_time(value: object) -> bool:
    if isinstance(value, str):
        return _names_time(value)
    if isinstance(value, list | tuple):
        return any(_param_names_time(element) for element in value)
    return False


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
        tags = [prefix + text for text in texts]
        if all(len(tag.encode()) <= MAX_TAG_BYTES for tag in tags):
            # Fewest tags first; a boolean splits a table in two halves only: last.
            choices.append((len(tags), restriction.family == "bool", tags))
    return min(choices, key=lambda choice: choice[:2])[2] if choices else [relation.tag]


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
