"""What the dashboard (``txcache.json`` beside this file) asks Prometheus: its queries, the
variables they use, and the metric and label names each one reads.

Read by ``tests/test_dashboard.py`` (every name must be one a real txcache stack exports) and
``bench/dashboard_screenshot.py`` (which runs the queries on a real Prometheus and draws the
panels). It covers the PromQL this dashboard is written in — selectors with matchers, range
vectors, functions, aggregations with ``by``/``without``, binary operators with
``on``/``ignoring``/``group_left``/``group_right`` — and refuses what it does not know
(``offset``, ``@``, subqueries, an unknown function) rather than guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DASHBOARD",
    "Names",
    "PromQLError",
    "Query",
    "load",
    "queries",
    "read_names",
    "substitute",
    "variable_queries",
]

DASHBOARD = Path(__file__).with_name("txcache.json")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


AGGREGATIONS = _words(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile"
)
FUNCTIONS = AGGREGATIONS | _words(  # Prometheus 2.x's
    """abs absent absent_over_time avg_over_time ceil changes clamp clamp_max clamp_min
    count_over_time day_of_month day_of_week day_of_year days_in_month delta deriv exp floor
    histogram_count histogram_fraction histogram_quantile histogram_sum holt_winters hour
    idelta increase irate label_join label_replace last_over_time ln log10 log2
    max_over_time min_over_time minute month predict_linear present_over_time
    quantile_over_time rate resets round scalar sgn sort sort_desc sqrt stddev_over_time
    stdvar_over_time sum_over_time time timestamp vector year"""
)
COUNTER_FUNCTIONS = frozenset({"rate", "irate", "increase", "resets"})
"""Functions whose argument must be a counter."""
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "inf", "nan"}) | GROUPING
UNSUPPORTED = frozenset({"offset", "@"})

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<range>\[[^\]]*\])
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?![A-Za-z_]))
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}@])
    """,
    re.VERBOSE,
)
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.*),\s*)?(?P<label>\w+)\s*\)\s*$")
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


class PromQLError(ValueError):
    """An expression this module cannot read: it says which and where."""


@dataclass(frozen=True)
class Query:
    """One target of one panel."""

    panel: str
    """The panel's title."""
    ref: str
    """The target's ``refId`` (A, B, …)."""
    expr: str
    legend: str
    """Its ``legendFormat`` (``{{label}}`` is replaced by the series' label)."""
    instant: bool
    """Evaluated once, at the end of the range (a bar gauge's), rather than over it."""


@dataclass
class Names:
    """The names an expression reads."""

    metrics: set[str] = field(default_factory=set)
    matchers: dict[str, set[str]] = field(default_factory=dict)
    """Per metric, the labels its selectors match on."""
    grouping: set[str] = field(default_factory=set)
    """Labels of ``by``, ``without``, ``on``, ``ignoring``, ``group_left/right``."""
    counted: set[str] = field(default_factory=set)
    """Metrics read through ``rate``, ``irate``, ``increase`` or ``resets``: counters."""


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    """The dashboard's JSON."""
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def _panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those folded into collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: Mapping[str, Any]) -> list[Query]:
    """Every panel's targets, in the dashboard's order."""
    return [
        Query(
            panel["title"],
            target["refId"],
            target["expr"],
            target.get("legendFormat", ""),
            bool(target.get("instant")) and not target.get("range", False),
        )
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
    ]


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each query variable's ``label_values(selector, label)``: name → (selector, label)."""
    found = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = _LABEL_VALUES.match(text)
        if match is None or not match["selector"]:
            raise PromQLError(f"variable {variable['name']}: not label_values(selector, label)")
        found[variable["name"]] = (match["selector"], match["label"])
    return found


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with Grafana's ``$name`` and ``${name}`` replaced by ``values[name]``
    (``__rate_interval`` among them); a variable without a value raises ``KeyError``."""
    return _VARIABLE.sub(lambda match: values[match[1] or match[2]], expr)


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise PromQLError(f"cannot read {expr[position : position + 20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append((kind, match[0]))
        position = match.end()
    return tokens


def _label_list(tokens: list[tuple[str, str]], start: int, names: set[str]) -> int:
    """Read ``( label, … )`` from ``tokens[start]``; the index after it."""
    index = start + 1
    while tokens[index][1] != ")":
        kind, text = tokens[index]
        if kind == "end":
            raise PromQLError("unclosed label list")
        if kind == "ident":
            names.add(text)
        elif text != ",":
            raise PromQLError(f"unexpected {text!r} in a label list")
        index += 1
    return index + 1


def _matchers(tokens: list[tuple[str, str]], start: int, labels: set[str]) -> int:
    """Read ``{ label op "value", … }`` from ``tokens[start]``; the index after it."""
    index = start + 1
    while tokens[index][1] != "}":
        label, op, value = (tokens[index : index + 3] + [("end", "")] * 3)[:3]
        if label[0] != "ident" or op[1] not in ("=", "!=", "=~", "!~") or value[0] != "string":
            raise PromQLError(f"not a label matcher: {label[1]} {op[1]} {value[1]}")
        labels.add(label[1])
        index += 3
        if tokens[index][0] == "end":
            raise PromQLError("unclosed selector")
        if tokens[index][1] == ",":
            index += 1
    return index + 1


def read_names(expr: str) -> Names:
    """The metric and label names ``expr`` reads; :class:`PromQLError` if it is not
    PromQL this module knows (unbalanced brackets, an unknown function, …)."""
    tokens = [*_tokens(expr), ("end", "")]
    names = Names()
    calls: list[str] = []  # per open parenthesis, the function it calls ("" for none)
    called = ""  # the function whose "(" comes next
    index = 0
    while index < len(tokens) - 1:
        kind, text = tokens[index]
        following = tokens[index + 1][1]
        if text in UNSUPPORTED:
            raise PromQLError(f"{text!r} is not supported here: {expr!r}")
        if kind == "ident" and text in GROUPING and following == "(":
            index = _label_list(tokens, index + 1, names.grouping)
            continue
        if kind == "ident" and (following == "(" or text in AGGREGATIONS):
            if text not in FUNCTIONS:
                raise PromQLError(f"unknown function {text!r} in {expr!r}")
            called = text
        elif kind == "ident" and text not in KEYWORDS:
            names.metrics.add(text)
            if COUNTER_FUNCTIONS.intersection(calls):
                names.counted.add(text)
            labels = names.matchers.setdefault(text, set())
            if following == "{":
                index = _matchers(tokens, index + 1, labels)
                continue
        elif text == "{":
            raise PromQLError(f"a selector without a metric name in {expr!r}")
        elif text == "(":
            calls.append(called)
            called = ""
        elif text == ")":
            if not calls:
                raise PromQLError(f"unbalanced ')' in {expr!r}")
            calls.pop()
        index += 1
    if calls:
        raise PromQLError(f"unbalanced '(' in {expr!r}")
    return names
