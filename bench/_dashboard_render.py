"""``dashboard_screenshot.py``'s drawing: the dashboard's panels, laid out on Grafana's grid
(24 columns, rows of 30 px) as ``dashboards/txcache.json`` places them, in the colours of
Grafana's dark theme, each drawn from the series its queries returned.

What it draws of each panel type: ``row`` (a title across the grid), ``timeseries`` (lines,
stacked areas where the panel stacks, a logarithmic axis where it asks for one, a right axis
for the series an override moves there, the panel's unit on the axes, the legend below),
``stat`` (the last value, coloured by the thresholds, over a sparkline) and ``bargauge``
(one horizontal bar per series). Dashed vertical lines mark the events the run caused, as
Grafana's annotations would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["Event", "Series", "last", "render", "unit_text"]

BACKGROUND, PANEL, BORDER, TEXT, DIM = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9e"
EVENT = "#ff7383"
PALETTE = (
    "#73bf69",
    "#f2cc0c",
    "#8ab8ff",
    "#ff780a",
    "#f2495c",
    "#5794f2",
    "#b877d9",
    "#705da0",
    "#37872d",
    "#fade2a",
    "#447ebc",
    "#c15c17",
    "#890f02",
    "#0a437c",
    "#6d1f62",
    "#584477",
)
NAMED_COLOURS = {"green": "#73bf69", "red": "#f2495c", "orange": "#ff9830", "blue": "#5794f2"}
COLUMN_PX, ROW_PX, GAP_PX, DPI = 1800 / 24, 30, 6, 100


@dataclass(frozen=True)
class Series:
    """One series a query returned: its legend, times (Unix seconds) and values."""

    ref: str
    legend: str
    times: Sequence[float]
    values: Sequence[float]


@dataclass(frozen=True)
class Event:
    """Something the run did at a moment, marked on every time series panel."""

    time: float
    label: str


# -- units -------------------------------------------------------------------------------------


def _scaled(value: float, steps: Sequence[tuple[float, str]], digits: int = 3) -> str:
    for factor, suffix in steps:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {suffix}".rstrip()
    factor, suffix = steps[-1]
    return f"{value / factor:.{digits}g} {suffix}".rstrip()


def unit_text(unit: str, value: float, decimals: int | None = None) -> str:
    """``value`` as Grafana shows it in ``unit`` (the units the dashboard uses)."""
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞"
    iec = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B")]
    si = [(1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")]
    if unit == "percentunit":
        return f"{value * 100:.{1 if decimals is None else decimals}f}%"
    if unit == "bytes":
        return _scaled(value, iec)
    if unit == "Bps":
        return _scaled(value, iec) + "/s"
    if unit == "s":  # zero as "0 s", as Grafana shows it, not in the smallest unit
        return _scaled(value, [(1, "s"), (1e-3, "ms"), (1e-6, "µs")]) if value else "0 s"
    if unit == "ops":
        return _scaled(value, si) + " ops/s" if value else "0"
    if decimals is not None and abs(value) < 1e3:
        return f"{value:.{decimals}f}"
    return _scaled(value, si)


# -- geometry ----------------------------------------------------------------------------------


def _box(figure: Any, grid: Mapping[str, int], top_px: float) -> tuple[float, float, float, float]:
    """The panel's rectangle in figure coordinates (left, bottom, width, height)."""
    width_px, height_px = figure.get_size_inches() * DPI
    left = grid["x"] * COLUMN_PX + GAP_PX / 2
    top = top_px + grid["y"] * ROW_PX + GAP_PX / 2
    width, height = grid["w"] * COLUMN_PX - GAP_PX, grid["h"] * ROW_PX - GAP_PX
    return left / width_px, 1 - (top + height) / height_px, width / width_px, height / height_px


def _inner(
    box: tuple[float, float, float, float], figure: Any, pad: Mapping[str, float]
) -> list[float]:
    """``box`` less ``pad`` pixels on each side (``left``, ``right``, ``top``, ``bottom``)."""
    width_px, height_px = figure.get_size_inches() * DPI
    left, bottom, width, height = box
    return [
        left + pad["left"] / width_px,
        bottom + pad["bottom"] / height_px,
        width - (pad["left"] + pad["right"]) / width_px,
        height - (pad["top"] + pad["bottom"]) / height_px,
    ]


def _frame(figure: Any, box: tuple[float, float, float, float], title: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    left, bottom, width, height = box
    figure.patches.append(
        FancyBboxPatch(
            (left, bottom),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.002",
            transform=figure.transFigure,
            facecolor=PANEL,
            edgecolor=BORDER,
            linewidth=0.8,
            # Below the axes (zorder 0). A figure patch's default zorder is 1, and the figure
            # draws its artists by zorder whatever their kind: an opaque frame then covered
            # the axes of its own panel, and every line, sparkline and bar vanished under it
            # (the first screenshot: only the frames, titles, legends and stat numbers).
            zorder=-10,
        )
    )
    _, height_px = figure.get_size_inches() * DPI
    figure.text(
        left + 0.004,
        bottom + height - 15 / height_px,
        title,
        color=TEXT,
        fontsize=9.5,
        fontweight="bold",
        va="center",
    )


# -- panels ------------------------------------------------------------------------------------


def _style(ax: Any, unit: str, colour: str = DIM) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_facecolor(PANEL)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(colors=colour, labelsize=7, length=0)
    ax.grid(True, color=BORDER, linewidth=0.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: unit_text(unit, value)))
    # A logarithmic axis labels its minor ticks too (2x10^-4, 3x10^-4, ...), over the major
    # labels when a panel spans less than a decade; Grafana labels the major ticks only.
    ax.yaxis.set_minor_formatter(NullFormatter())


def _binary_ticks(ax: Any, unit: str) -> None:
    """Ticks at multiples of a power of two for byte units (0, 2, 4, 6 MiB rather than
    matplotlib's decimal 977 KiB, 1.91 MiB, ...), about five of them, as Grafana places
    them; other units keep matplotlib's."""
    from matplotlib.ticker import MultipleLocator

    if unit not in ("bytes", "Bps") or ax.get_yscale() != "linear":
        return
    low, high = ax.get_ylim()
    if high <= low:
        return
    ax.yaxis.set_major_locator(MultipleLocator(2 ** math.ceil(math.log2((high - low) / 5))))


def _time_axis(ax: Any, start: float, end: float) -> None:
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    ax.set_xlim(start, end)
    ax.xaxis.set_major_locator(MultipleLocator(30 if end - start > 90 else 10))
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda value, _: datetime.fromtimestamp(value, UTC).strftime("%H:%M:%S"))
    )


def _override(panel: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """The properties the panel's overrides give the series of query ``ref``."""
    found: dict[str, Any] = {}
    for override in panel["fieldConfig"].get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            found |= {prop["id"]: prop["value"] for prop in override["properties"]}
    return found


def _on_right(panel: Mapping[str, Any], ref: str) -> bool:
    """Whether an override moves the series of query ``ref`` to a right axis."""
    return _override(panel, ref).get("custom.axisPlacement") == "right"


def _draw_lines(
    ax: Any, series: Sequence[Series], colours: Sequence[str], stacked: bool, steps: bool
) -> None:
    base: dict[float, float] = {}
    for one, colour in zip(series, colours, strict=True):
        values = list(one.values)
        if stacked:
            bottom = [base.get(t, 0.0) for t in one.times]
            values = [
                b + (0.0 if math.isnan(v) else v) for b, v in zip(bottom, values, strict=True)
            ]
            ax.fill_between(one.times, bottom, values, color=colour, alpha=0.25, linewidth=0)
            base |= dict(zip(one.times, values, strict=True))
        style = "steps-post" if steps else "default"
        ax.plot(one.times, values, color=colour, linewidth=1.1, drawstyle=style)


def _legend(
    figure: Any, box: tuple[float, float, float, float], items: Sequence[tuple[str, str]], rows: int
) -> None:
    from matplotlib.lines import Line2D

    if not items:
        return
    handles = [Line2D([], [], color=colour, linewidth=2.5) for _, colour in items]
    left, bottom, _, _ = box
    _, height_px = figure.get_size_inches() * DPI
    columns = math.ceil(len(items) / rows)
    figure.legend(
        handles,
        [label for label, _ in items],
        loc="lower left",
        ncols=columns,
        bbox_to_anchor=(left + 0.002, bottom + 2 / height_px),
        fontsize=7,
        frameon=False,
        labelcolor=TEXT,
        handlelength=1.2,
        columnspacing=1.2,
        borderaxespad=0,
    )


def _timeseries(
    figure: Any,
    panel: Mapping[str, Any],
    box: Any,
    series: Sequence[Series],
    span: tuple[float, float],
    events: Sequence[Event],
) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    custom = defaults.get("custom", {})
    width_px = box[2] * figure.get_size_inches()[0] * DPI
    per_row = max(1, int(width_px // 150))
    rows = max(1, math.ceil(len(series) / per_row))
    pad = {
        "left": 52,
        "right": 48 if any(_on_right(panel, s.ref) for s in series) else 10,
        "top": 28,
        "bottom": 22 + 13 * rows,
    }
    ax = figure.add_axes(_inner(box, figure, pad))
    _style(ax, defaults.get("unit", "short"))
    _time_axis(ax, *span)
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    left = [(s, c) for s, c in zip(series, colours, strict=True) if not _on_right(panel, s.ref)]
    right = [(s, c) for s, c in zip(series, colours, strict=True) if _on_right(panel, s.ref)]
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    steps = custom.get("lineInterpolation") == "stepAfter"
    _draw_lines(ax, [s for s, _ in left], [c for _, c in left], stacked, steps)
    if custom.get("scaleDistribution", {}).get("type") == "log":
        from matplotlib.ticker import LogLocator

        ax.set_yscale("log")
        _style(ax, defaults.get("unit", "short"))
        # Ticks at 1, 2 and 5 of each decade: latencies often span less than one decade,
        # which powers of ten alone would label once or not at all.
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        ax.set_ylim(bottom=defaults.get("min", None), top=defaults.get("max", None))
        _binary_ticks(ax, defaults.get("unit", "short"))
    if right:
        extra = _override(panel, right[0][0].ref)
        twin = ax.twinx()
        _style(twin, extra.get("unit", "short"))
        twin.grid(False)
        _draw_lines(twin, [s for s, _ in right], [c for _, c in right], False, steps)
        twin.set_ylim(bottom=0)
        _binary_ticks(twin, extra.get("unit", "short"))
        twin.set_ylabel(extra.get("custom.axisLabel", ""), color=DIM, fontsize=7)
    for event in events:
        ax.axvline(event.time, color=EVENT, linewidth=0.8, linestyle=(0, (4, 3)), alpha=0.8)
    items = [(s.legend, c) for s, c in zip(series, colours, strict=True)]
    _legend(figure, box, items, rows)
    if not series:
        ax.text(0.5, 0.5, "No data", color=DIM, ha="center", va="center", transform=ax.transAxes)


def _threshold_colour(defaults: Mapping[str, Any], value: float) -> str:
    colour = "blue"
    for step in defaults.get("thresholds", {}).get("steps", []):
        if step["value"] is None or (not math.isnan(value) and value >= step["value"]):
            colour = step["color"]
    return NAMED_COLOURS.get(colour, colour)


def last(values: Sequence[float]) -> float:
    """The last value of ``values`` that is not NaN (Grafana's "last *"); NaN if none."""
    kept = [v for v in values if not math.isnan(v)]
    return kept[-1] if kept else math.nan


def _stat(
    figure: Any,
    panel: Mapping[str, Any],
    box: Any,
    series: Sequence[Series],
    span: tuple[float, float],
) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    value = last(series[0].values) if series else math.nan
    colour = _threshold_colour(defaults, value)
    spark = figure.add_axes(_inner(box, figure, {"left": 4, "right": 4, "top": 60, "bottom": 4}))
    spark.set_axis_off()
    if series:
        spark.fill_between(series[0].times, 0, series[0].values, color=colour, alpha=0.18)
        spark.plot(series[0].times, series[0].values, color=colour, linewidth=1)
        spark.set_xlim(*span)
        spark.set_ylim(bottom=0)
    left, bottom, width, height = box
    text = unit_text(defaults.get("unit", "none"), value, defaults.get("decimals"))
    figure.text(
        left + width / 2,
        bottom + height * 0.5,
        text,
        color=colour,
        fontsize=22,
        fontweight="bold",
        ha="center",
        va="center",
    )


def _bargauge(figure: Any, panel: Mapping[str, Any], box: Any, series: Sequence[Series]) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    ax = figure.add_axes(_inner(box, figure, {"left": 70, "right": 60, "top": 28, "bottom": 8}))
    ax.set_axis_off()
    bars = sorted(series, key=lambda s: float(s.legend.strip("≤ B") or 0))
    values = [last(s.values) for s in bars]
    peak = max([v for v in values if not math.isnan(v)] or [1.0])
    for row, (one, value) in enumerate(zip(bars, values, strict=True)):
        y = len(bars) - 1 - row
        ax.barh(y, 1, color=BORDER, height=0.7)
        ax.barh(y, value / peak, color=PALETTE[5], height=0.7)
        ax.text(-0.02, y, one.legend, color=TEXT, fontsize=7, ha="right", va="center")
        ax.text(
            1.02,
            y,
            unit_text(defaults.get("unit", "none"), value),
            color=TEXT,
            fontsize=7,
            va="center",
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, max(len(bars), 1) - 0.4)


def render(
    dashboard: Mapping[str, Any],
    results: Mapping[int, Sequence[Series]],
    path: Path,
    span: tuple[float, float],
    header: Sequence[str],
    events: Sequence[Event] = (),
) -> bool:
    """Draw every panel of ``dashboard`` with ``results`` (panel id → series) over ``span``
    (Unix seconds) under a ``header`` (title, then lines of notes) to ``path``; ``False``
    when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    top_px = 30 + 16 * len(header)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    figure = plt.figure(
        figsize=(1800 / DPI, (top_px + rows * ROW_PX + 8) / DPI), dpi=DPI, facecolor=BACKGROUND
    )
    height_px = figure.get_size_inches()[1] * DPI
    figure.text(
        0.006,
        1 - 20 / height_px,
        header[0],
        color=TEXT,
        fontsize=14,
        fontweight="bold",
        va="center",
    )
    for number, line in enumerate(header[1:]):
        figure.text(
            0.006, 1 - (42 + 16 * number) / height_px, line, color=DIM, fontsize=8.5, va="center"
        )
    draw: dict[str, Callable[..., None]] = {
        "timeseries": lambda p, b, s: _timeseries(figure, p, b, s, span, events),
        "stat": lambda p, b, s: _stat(figure, p, b, s, span),
        "bargauge": lambda p, b, s: _bargauge(figure, p, b, s),
    }
    for panel in dashboard["panels"]:
        box = _box(figure, panel["gridPos"], top_px)
        if panel["type"] == "row":
            left, bottom, _, height = box
            figure.text(
                left,
                bottom + height / 2,
                panel["title"],
                color=TEXT,
                fontsize=11,
                fontweight="bold",
                va="center",
            )
            continue
        _frame(figure, box, panel["title"])
        draw[panel["type"]](panel, box, results.get(panel["id"], []))
    figure.savefig(path, dpi=DPI, facecolor=BACKGROUND)
    plt.close(figure)
    return True
