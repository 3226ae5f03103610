"""The queries of the differential test (tests/test_sqlalchemy_differential.py; no tests
of their own), over the corpus's table (tests/test_sqlalchemy_corpus.py): :data:`CORPUS`,
reads in ORM and Core — arithmetic on floats and numerics, dates and zoned datetimes, JSON
and JSONB, arrays, ranges, hstore, ``func.*`` calls, window functions, aggregates,
subqueries, CTEs, string functions, ``text()``, bind parameters of every common type,
``literal_binds``. Each is a function of a session returning its results, materialized."""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import uuid
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    Integer,
    Interval,
    LargeBinary,
    Numeric,
    String,
    Text,
    bindparam,
    case,
    cast,
    exists,
    extract,
    func,
    literal,
    select,
    text,
    union_all,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import (
    ARRAY,
    HSTORE,
    INET,
    INT4MULTIRANGE,
    INT4RANGE,
    JSON,
    JSONB,
    Range,
)
from sqlalchemy.dialects.postgresql.ranges import MultiRange  # not in postgresql's __all__
from sqlalchemy.orm import Session, selectinload

from test_sqlalchemy_corpus import NY, Event, Mood, Query, Sample
from txcache import sqlalchemy as txsa

S = Sample
BY_ID = S.id


def rows(statement: Any) -> Query:
    """A Core statement's rows, as tuples."""
    return lambda session: txsa.rows(session.execute(statement))


def instances(statement: Any) -> Query:
    """An ORM statement's instances, as dicts of their columns (and their events)."""

    def run(session: Session) -> list[Any]:
        found = session.scalars(statement).unique()
        return [(txsa.to_dict(each), [txsa.to_dict(e) for e in each.events]) for each in found]

    return run


def literal_bound(statement: Any) -> Query:
    """``statement`` compiled by the psycopg dialect with its values inline, run as text."""
    dialect = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]  # unannotated in SA
    compiled = statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
    return lambda session: txsa.rows(session.execute(text(str(compiled))))


def bound(value: Any, kind: Any = None) -> Query:
    """A bind parameter of ``value`` (typed ``kind``), sent and read back."""
    return rows(select(bindparam("value", value, type_=kind)))


ARITHMETIC: dict[str, Query] = {
    "numeric arithmetic": rows(
        select(S.id, S.amount * 2, S.amount / 3, S.amount + S.exact, -S.amount).order_by(BY_ID)
    ),
    "float arithmetic": rows(
        select(S.id, S.ratio * 3, S.ratio / 7, S.small + 0.1, S.ratio - S.small).order_by(BY_ID)
    ),
    "integer division": rows(select(S.id, S.big / 7, S.big // 7, S.big % 5).order_by(BY_ID)),
    "casts": rows(
        select(S.id, cast(S.amount, Float), cast(S.ratio, Numeric(20, 6)), cast(S.small, Text))
        .where(S.ratio < 1e10)
        .order_by(BY_ID)
    ),
    "rounding": rows(
        select(S.id, func.round(S.amount, 1), func.trunc(S.exact, 3), func.abs(S.amount)).order_by(
            BY_ID
        )
    ),
    "numeric literals": rows(
        select(
            literal(decimal.Decimal("1.10")) * 3,
            literal(0.1) + literal(0.2),
            func.power(literal(2), 64),
        )
    ),
}

TIME: dict[str, Query] = {
    "dates": rows(
        select(S.id, S.born + datetime.timedelta(days=3), S.born - datetime.date(2000, 1, 1))
        .where(S.born > datetime.date(1000, 1, 1))
        .order_by(BY_ID)
    ),
    "zoned datetimes": rows(
        select(
            S.id,
            S.seen,
            func.date_trunc("day", S.seen),
            S.seen.op("AT TIME ZONE")("UTC"),
            func.timezone("Asia/Kolkata", S.seen),
            S.seen + S.span,
        ).order_by(BY_ID)
    ),
    "naive datetimes and times": rows(
        select(S.id, S.local, S.at, S.span, extract("epoch", S.local), S.local - S.seen).order_by(
            BY_ID
        )
    ),
    "date parts": rows(
        select(S.id, extract("year", S.seen), func.date_part("dow", S.born)).order_by(BY_ID)
    ),
    "zoned comparison": rows(
        select(S.id)
        .where(S.seen >= datetime.datetime(2024, 3, 10, 1, 59, 59, tzinfo=NY))
        .order_by(BY_ID)
    ),
}

DOCUMENTS: dict[str, Query] = {
    "json columns": rows(select(S.id, S.doc, S.docb).order_by(BY_ID)),
    "json paths": rows(
        select(S.id, S.docb["a"], S.docb["a"]["f"].astext, S.doc[("a", 1)], S.docb[1]).order_by(
            BY_ID
        )
    ),
    "jsonb containment": rows(select(S.id).where(S.docb.contains({"z": 1})).order_by(BY_ID)),
    "json built": rows(
        select(
            func.jsonb_build_object("id", S.id, "amount", S.amount), func.to_json(S.tags)
        ).order_by(BY_ID)
    ),
    "json aggregate": rows(select(func.json_agg(S.label), func.jsonb_object_agg(S.label, S.big))),
    "arrays": rows(
        select(S.id, S.tags, S.scores, S.grid, S.tags[1], S.scores[2:3]).order_by(BY_ID)
    ),
    "array operators": rows(
        select(S.id, func.array_length(S.scores, 1), func.cardinality(S.tags))
        .where(S.scores.overlap([1, -1]))
        .order_by(BY_ID)
    ),
    "array aggregate": rows(select(S.grp, func.array_agg(S.ratio)).group_by(S.grp).order_by(S.grp)),
    "ranges": rows(select(S.id, S.during, S.ints).order_by(BY_ID)),
    "range operators": rows(
        select(S.id, S.ints.contains(5), func.lower(S.ints), func.upper_inf(S.during))
        .where(S.ints.overlaps(Range(4, 6)))
        .order_by(BY_ID)
    ),
    "multiranges": rows(
        select(S.grp, func.range_agg(S.ints, type_=INT4MULTIRANGE)).group_by(S.grp).order_by(S.grp)
    ),
    "hstore arrays": rows(select(S.grp, func.array_agg(S.attrs)).group_by(S.grp).order_by(S.grp)),
    "enum arrays": rows(select(S.grp, func.array_agg(S.feeling)).group_by(S.grp).order_by(S.grp)),
    "hstore, uuid, bytes, enum, inet": rows(
        select(S.id, S.attrs, S.uid, S.raw, S.feeling, S.addr).order_by(BY_ID)
    ),
}

SERIES = func.generate_series(1, 5).table_valued("value").render_derived()

FUNCTIONS: dict[str, Query] = {
    "aggregates": rows(
        select(
            S.grp,
            func.count(),
            func.sum(S.amount),
            func.avg(S.exact),
            func.max(S.seen),
            func.min(S.born),
            func.bool_and(S.flag),
            func.string_agg(S.label, literal(", ")),
        )
        .group_by(S.grp)
        .order_by(S.grp)
    ),
    "window functions": rows(
        select(
            S.id,
            func.row_number().over(partition_by=S.grp, order_by=S.id),
            func.sum(S.amount).over(order_by=S.id),
            func.lag(S.label).over(order_by=S.id),
            func.rank().over(order_by=S.ratio.desc()),
        ).order_by(BY_ID)
    ),
    "string functions": rows(
        select(
            S.id,
            func.upper(S.label),
            func.length(S.label),
            func.concat(S.label, "/", S.id),
            func.substr(S.label, 2, 3),
            func.replace(S.label, "%", "%%"),
            func.lpad(S.label, 8, "*"),
            func.md5(S.label),
            func.format("%s-%s", S.label, S.grp),
            func.to_char(S.amount, "FM999999990.0000"),
        ).order_by(BY_ID)
    ),
    "like and percent": rows(
        select(S.id, S.label.contains("%", autoescape=True), literal("100%"))
        .where(S.label.like("%a%"))
        .order_by(BY_ID)
    ),
    "case and coalesce": rows(
        select(
            S.id,
            case((S.ratio > 1, "big"), (S.ratio.is_(None), "none"), else_="small"),
            func.coalesce(S.amount, S.exact, 0),
            func.greatest(S.ratio, S.small),
            func.nullif(S.grp, 2),
        ).order_by(BY_ID)
    ),
    "text of hstore": lambda session: txsa.rows(
        session.execute(text("SELECT id, attrs, ARRAY[attrs] FROM samples ORDER BY id"))
    ),
    "text with an hstore parameter": lambda session: txsa.rows(
        session.execute(
            text("SELECT '50%' AS p, :h AS h, :hs AS hs, :h -> 'k' AS k"),
            {"h": {"k": "v%", "n": None}, "hs": [{"a": "b"}, None]},
        )
    ),
    "text with percent": lambda session: txsa.rows(
        session.execute(text("SELECT '100%' AS p, CAST(:v AS numeric) AS v"), {"v": "1.50"})
    ),
    "table-valued function": rows(select(SERIES.c.value).order_by(SERIES.c.value)),
}

SUBQUERIES = select(func.max(S.amount)).scalar_subquery()
RECURSIVE = select(literal(1).label("n")).cte("numbers", recursive=True)
NUMBERS = RECURSIVE.union_all(select(RECURSIVE.c.n + 1).where(RECURSIVE.c.n < 5))
GROUPS = select(S.grp, func.sum(S.ratio).label("total")).group_by(S.grp).cte("groups")

QUERIES: dict[str, Query] = {
    "scalar subquery": rows(select(S.id, S.amount == SUBQUERIES).order_by(BY_ID)),
    "exists": rows(
        select(S.id)
        .where(exists().where(Event.sample_id == S.id, Event.weight > 5))
        .order_by(BY_ID)
    ),
    "in subquery": rows(
        select(Event.id)
        # SQLAlchemy's where() types no nullable boolean column, which SQL takes as a condition.
        .where(Event.sample_id.in_(select(S.id).where(S.flag)))  # type: ignore[arg-type]
        .order_by(Event.id)
    ),
    "derived table": rows(select(func.count(), func.sum(GROUPS.c.total)).select_from(GROUPS)),
    "recursive cte": rows(select(NUMBERS.c.n).order_by(NUMBERS.c.n)),
    "union": rows(union_all(select(S.id, S.label), select(Event.id, Event.kind)).order_by("id")),
    "join and group": rows(
        select(S.label, func.count(Event.id), func.sum(Event.weight))
        .join(Event, Event.sample_id == S.id)
        .group_by(S.label)
        .order_by(S.label)
    ),
    "distinct, limit, offset": rows(
        select(Event.kind).distinct().order_by(Event.kind).limit(2).offset(1)
    ),
    "orm entities": instances(select(S).options(selectinload(S.events)).order_by(BY_ID)),
    "orm filtered": instances(select(S).where(S.grp == 2, S.label != "x").order_by(BY_ID)),
    "orm columns": lambda session: list(
        session.scalars(select(Event.weight).where(Event.sample_id == 1).order_by(Event.id))
    ),
}

BIND_PARAMETERS: dict[str, Query] = {
    "bind int": bound(2**62, BigInteger),
    "bind float": bound(1 / 3, Float),
    "bind negative zero": bound(-0.0, Float),
    "bind nan": bound(float("nan"), Float),
    "bind decimal": bound(decimal.Decimal("1.2300"), Numeric),
    "bind decimal exponent": bound(decimal.Decimal("-1E-30"), Numeric),
    "bind str": bound('it\'s 50% ü \\ "q"', String),
    "bind bytes": bound(b"\x00\xff\\", LargeBinary),
    "bind bool": bound(True),
    "bind none": bound(None, Integer),
    "bind date": bound(datetime.date(2024, 2, 29)),
    "bind naive datetime": bound(datetime.datetime(2024, 3, 10, 2, 30, 0, 5)),
    "bind zoned datetime": bound(
        datetime.datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=NY), DateTime(timezone=True)
    ),
    "bind offset datetime": bound(
        datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=5.5))),
        DateTime(timezone=True),
    ),
    "bind time": bound(datetime.time(23, 59, 59, 999999)),
    "bind interval": bound(datetime.timedelta(days=-1, seconds=5, microseconds=7), Interval),
    "bind uuid": bound(uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    "bind int array": bound([1, None, 3], ARRAY(Integer)),
    "bind text array": bound(["a", "b,c", "{d}", None], ARRAY(Text)),
    "bind json": bound({"b": [1, 2.5, None], "a": "ü"}, JSON),
    "bind jsonb": bound({"b": [1, 2.5, None], "a": "ü"}, JSONB),
    "bind range": bound(Range(1, 5, bounds="[]"), INT4RANGE),
    "bind empty range": bound(Range(empty=True), INT4RANGE),
    "bind multirange": rows(
        select(bindparam("value", MultiRange([Range(1, 3), Range(5, 7)]), type_=INT4MULTIRANGE))
    ),
    "bind hstore": bound({"a": "1", "b": None}, HSTORE),
    "bind hstore array": bound([{"a": "1"}, {"b": None, "c\\": '"'}], ARRAY(HSTORE)),
    "bind enum": bound(Mood.ok, SAEnum(Mood, name="mood")),
    "bind inet": bound(ipaddress.ip_interface("10.0.0.1/8"), INET),
    "bind in list": rows(select(S.id).where(S.id.in_([1, 3, 99])).order_by(BY_ID)),
    "bind zoned filter": rows(
        select(S.id)
        .where(S.seen < datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC))
        .order_by(BY_ID)
    ),
}

LITERAL_BINDS: dict[str, Query] = {
    "literal binds": literal_bound(
        select(S.id, S.label)
        .where(S.label.in_(["alpha", "it's 50%"]), S.amount > decimal.Decimal("1.25"))
        .order_by(BY_ID)
    ),
    "literal binds of dates": literal_bound(
        select(S.id).where(S.born > datetime.date(2000, 1, 1)).order_by(BY_ID)
    ),
}

CORPUS: dict[str, Query] = {
    **ARITHMETIC,
    **TIME,
    **DOCUMENTS,
    **FUNCTIONS,
    **QUERIES,
    **BIND_PARAMETERS,
    **LITERAL_BINDS,
}
"""Every query, by name."""
