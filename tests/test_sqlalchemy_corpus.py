"""The corpus of the differential test (tests/test_sqlalchemy_differential.py; no tests
of its own): a table of every common PostgreSQL type with edge values, its models, and how
results are compared (:func:`exact`) and cached (:func:`plain`); :data:`WRITES`, which
write and read back in a session's own read/write transaction (rolled back). The reads are
in tests/test_sqlalchemy_corpus_queries.py.

The database's ``TimeZone`` is ``America/New_York``, so that a ``timestamptz`` comes back
in a zone with daylight saving time, not in UTC."""

from __future__ import annotations

import datetime
import decimal
import enum
import ipaddress
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    Interval,
    LargeBinary,
    Numeric,
    Text,
    Time,
    Uuid,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.dialects.postgresql import (
    ARRAY,
    HSTORE,
    INET,
    INT4RANGE,
    JSON,
    JSONB,
    REAL,
    TSTZRANGE,
    Range,
)
from sqlalchemy.dialects.postgresql.ranges import MultiRange  # not in postgresql's __all__
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from txcache import sqlalchemy as txsa

SCHEMA = r"""
CREATE EXTENSION hstore;
DO $$ BEGIN
  EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'America/New_York');
END $$;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE samples (
  id integer PRIMARY KEY, grp integer NOT NULL, label text NOT NULL,
  amount numeric(12, 4), exact numeric, ratio double precision, small real, big bigint,
  flag boolean, born date, seen timestamptz, local timestamp, at time, span interval,
  doc json, docb jsonb, tags text[], scores integer[], grid integer[][],
  during tstzrange, ints int4range, uid uuid, raw bytea, attrs hstore, feeling mood,
  addr inet);
CREATE INDEX ON samples (grp);
CREATE TABLE events (
  id integer PRIMARY KEY, sample_id integer NOT NULL REFERENCES samples,
  kind text NOT NULL, weight numeric(8, 3) NOT NULL);
CREATE INDEX ON events (sample_id);
INSERT INTO samples VALUES
  (1, 1, 'alpha', 1.5, 0.1000, 0.1, 1.25, 9007199254740993, true, '2024-03-10',
   '2024-03-10 06:59:59.999999+00', '2024-03-10 02:30:00', '23:59:59.5', '1 mon 2 days 03:04:05.5',
   '{"b": 1, "a": [1, 2.50, "x"], "b": 2}', '{"z": 1, "a": {"n": null, "f": 1.10}}',
   '{"x", NULL, "it''s", "50%"}', '{3, 1, 2}', '{{1, 2}, {3, 4}}',
   '[2024-01-01 00:00+00, 2024-06-01 00:00+00)', '[1, 10)',
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x00ff10', 'a=>1, "b c"=>NULL, "q\"\\"=>"v\\w"',
   'happy', '192.168.0.1/24'),
  (2, 1, 'Beta %', -0.0001, -0, -0.0, 'NaN', -9223372036854775808, false, '1999-12-31',
   '2024-11-03 05:30:00+00', '2024-11-03 01:30:00', '00:00:00', '-1 days +00:00:01',
   '[]', '[1, "two", {"3": true}]', '{}', '{NULL}', '{}', 'empty', '(,5]',
   NULL, '', '', 'sad', '::1'),
  (3, 2, 'gamma_ü', 12345678.1234, 1e-20, 1e300, 'Infinity', 0, NULL, '0001-01-01',
   '1970-01-01 00:00:00+00', '2000-02-29 12:00:00', '12:00:00.000001', '0',
   '"text"', '"ünï"', NULL, NULL, NULL, '(,)', '[5,)', NULL, NULL, NULL, 'ok', NULL),
  (4, 2, 'delta', NULL, 'NaN', 'Infinity', '-Infinity', 42, true, '2024-02-29',
   '2023-03-26 01:00:00+00', '2024-02-29 23:59:59.999999', NULL, '100 years',
   'null', 'null', '{"a,b", "{c}", "q\"x"}', '{-1, 0, 2147483647}', NULL,
   '[2024-03-31 01:00+00, 2024-03-31 02:00+00]', NULL, NULL, '\x5c', '"k"=>""', NULL,
   '2001:db8::1/128');
INSERT INTO events SELECT i, 1 + i % 4, 'kind ' || (i % 3), i * 1.125
  FROM generate_series(1, 12) i;
"""


class Mood(enum.Enum):
    sad = "sad"
    ok = "ok"
    happy = "happy"


class Base(DeclarativeBase):
    pass


class Sample(Base):
    __tablename__ = "samples"
    id: Mapped[int] = mapped_column(primary_key=True)
    grp: Mapped[int]
    label: Mapped[str]
    amount: Mapped[decimal.Decimal | None] = mapped_column(Numeric(12, 4))
    exact: Mapped[decimal.Decimal | None] = mapped_column(Numeric)
    ratio: Mapped[float | None] = mapped_column(Float)
    small: Mapped[float | None] = mapped_column(REAL)
    big: Mapped[int | None] = mapped_column(BigInteger)
    flag: Mapped[bool | None]
    born: Mapped[datetime.date | None] = mapped_column(Date)
    seen: Mapped[datetime.datetime | None] = mapped_column(DateTime(timezone=True))
    local: Mapped[datetime.datetime | None] = mapped_column(DateTime)
    at: Mapped[datetime.time | None] = mapped_column(Time)
    span: Mapped[datetime.timedelta | None] = mapped_column(Interval)
    doc: Mapped[Any] = mapped_column(JSON)
    docb: Mapped[Any] = mapped_column(JSONB)
    tags: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    scores: Mapped[list[int] | None] = mapped_column(ARRAY(Integer))
    grid: Mapped[list[list[int]] | None] = mapped_column(ARRAY(Integer, dimensions=2))
    during: Mapped[Range[datetime.datetime] | None] = mapped_column(TSTZRANGE)
    ints: Mapped[Range[int] | None] = mapped_column(INT4RANGE)
    uid: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    raw: Mapped[bytes | None] = mapped_column(LargeBinary)
    attrs: Mapped[dict[str, str | None] | None] = mapped_column(HSTORE)
    feeling: Mapped[Mood | None] = mapped_column(SAEnum(Mood, name="mood"))
    addr: Mapped[Any] = mapped_column(INET)
    events: Mapped[list[Event]] = relationship(order_by="Event.id")


class Event(Base):
    __tablename__ = "events"
    id: Mapped[int] = mapped_column(primary_key=True)
    sample_id: Mapped[int] = mapped_column(ForeignKey("samples.id"))
    kind: Mapped[str]
    weight: Mapped[decimal.Decimal] = mapped_column(Numeric(8, 3))


Query = Callable[[Session], list[Any]]
"""A query of the corpus: its results in a session, materialized."""

NY = zoneinfo.ZoneInfo("America/New_York")


def _inserted(session: Session) -> list[Any]:
    new: list[dict[str, Any]] = [
        {"id": 100 + i, "sample_id": 1 + i % 2, "kind": f"new {i}"} for i in range(5)
    ]
    weights = [{**each, "weight": decimal.Decimal(each["id"]) / 8} for each in new]
    core = session.connection()  # Core, for the rowcount
    result = core.execute(insert(Event).returning(Event.id, Event.weight), weights)
    return [txsa.rows(result), result.rowcount]


def _updated(session: Session) -> list[Any]:
    statement = (
        update(Sample)
        .where(Sample.grp == 1)
        .values(
            amount=Sample.amount * 2, attrs={"x": "1", "y": None}, seen=Sample.seen + Sample.span
        )
        .returning(Sample.id, Sample.amount, Sample.attrs, Sample.seen)
    )
    core = session.connection()
    result = core.execute(statement)
    changed = txsa.rows(result)
    counted = core.execute(update(Event).where(Event.sample_id == 2).values(kind="x"))
    return [changed, result.rowcount, counted.rowcount]


def _bulk_updated(session: Session) -> list[Any]:
    # By primary key, as executemany: hstore, arrays and JSON in every parameter set.
    changes: list[dict[str, Any]] = [
        {"id": 1, "attrs": {"a": "b"}, "tags": ["t", None], "docb": {"k": [1]}},
        {"id": 2, "attrs": None, "tags": None, "docb": None},
        {"id": 3, "attrs": {}, "tags": [], "docb": [1, {"x": None}]},
    ]
    session.execute(update(Sample), changes)
    return txsa.rows(
        session.execute(
            select(Sample.id, Sample.attrs, Sample.tags, Sample.docb).order_by(Sample.id)
        )
    )


def _deleted(session: Session) -> list[Any]:
    core = session.connection()
    result = core.execute(delete(Event).where(Event.weight > 10).returning(Event.id))
    return [sorted(txsa.rows(result)), result.rowcount]


def _flushed(session: Session) -> list[Any]:
    # An ORM instance of every type, flushed, then read back from the database.
    session.add(
        Sample(
            id=50,
            grp=9,
            label="new 100%",
            amount=decimal.Decimal("2.50"),
            exact=decimal.Decimal("-0E-7"),
            ratio=-0.0,
            big=-(2**63),
            seen=datetime.datetime(2024, 3, 10, 3, 30, tzinfo=NY),
            at=datetime.time(1, 2, 3, 4),
            span=datetime.timedelta(days=400, microseconds=1),
            doc={"b": 1, "a": 2},
            docb={"b": 1, "a": 2},
            tags=["x", None],
            grid=[[1, 2], [3, 4]],
            during=Range(datetime.datetime(2024, 1, 1, tzinfo=NY), None),
            ints=Range(empty=True),
            uid=uuid.UUID(int=1),
            raw=b"\x00",
            attrs={"k": "v", "n": None},
            feeling=Mood.sad,
            addr=ipaddress.ip_interface("10.1.2.3/16"),
        )
    )
    session.flush()
    session.expire_all()
    found = session.get(Sample, 50)
    return [txsa.to_dict(found) if found is not None else None]


WRITES: dict[str, Query] = {
    "insert returning": _inserted,
    "update returning": _updated,
    "bulk update": _bulk_updated,
    "delete returning": _deleted,
    "orm flush": _flushed,
}
"""Writes, each read back: run in a session's own read/write transaction, rolled back."""


def plain(value: Any) -> Any:
    """``value`` as data the cache stores (what a cacheable function returns): ranges,
    enums and addresses — instances of classes — by their parts."""
    if isinstance(value, Range):
        return ("range", plain(value.lower), plain(value.upper), value.bounds, value.empty)
    if isinstance(value, MultiRange):
        return ("multirange", [plain(each) for each in value])
    if isinstance(value, enum.Enum):
        return ("enum", value.name)
    if isinstance(value, ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return ("inet", str(value))
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return ("address", str(value))
    if isinstance(value, list | tuple):
        return type(value)(plain(each) for each in value)
    if isinstance(value, dict):
        return {key: plain(each) for key, each in value.items()}
    return value


def exact(value: Any) -> Any:
    """``value`` compared exactly: every scalar by its type and its ``repr`` (a Decimal's
    exponent, a float's sign and NaN, a datetime's zone), containers by type and order."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, [exact(each) for each in value])
    if isinstance(value, dict):
        return ("dict", [(exact(key), exact(each)) for key, each in value.items()])
    if isinstance(value, Range):
        return ("Range", exact(value.lower), exact(value.upper), value.bounds, value.empty)
    if isinstance(value, datetime.datetime | datetime.time) and value.tzinfo is not None:
        return (type(value).__name__, repr(value), value.utcoffset())
    return (type(value).__qualname__, repr(value))
