"""The RUBiS client emulator:
``python -m rubis.emulator --url URL --clients N --duration S [--peak] [--seed 1]``.

``--clients`` threads each run RUBiS sessions back to back: a session follows the transition
table (``rubis.transitions.Session``: the cumulative draw, the Back stack, End of Session,
the 1,000-request cap), builds each request from the previous page (``rubis.client``),
waits a think time (TPC-W's, mean 7 s; none with ``--peak``) and goes Home after an error
page (status 400), as RUBiS's client did. Each thread keeps one HTTP/1.1 connection alive
(``http.client``) and the session's ``not_before`` cookie, so a session reads its writes.

Reported (``Report``, printed and with ``--json`` written as JSON): requests answered and
throughput within the measured time (after ``--warmup``; a request still waiting at its end
is not counted), latency percentiles overall and per
interaction, per-interaction counts, error pages, and errors (a status other than 200/400,
or a failed connection; the first few are quoted). A plain-text progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rubis.client import Request, Visitor
from rubis.generate import PRESETS
from rubis.transitions import (
    HOME,
    STATES,
    Session,
    TransitionTable,
    load_table,
    think_time_ms,
)

__all__ = ["Emulation", "Report", "Tally", "main", "run"]

_COOKIE = "txcache_nb"
_SAMPLES = 5
_BACKOFF = 0.1
_REASON = re.compile(r"<h2>Sorry</h2><p>(.*?)</p>")
_DIGITS = re.compile(r"\d+(\.\d+)?")


@dataclass(slots=True)
class Tally:
    """What one client thread counted (merged into the ``Report``)."""

    latencies: dict[int, list[float]] = field(default_factory=dict)
    error_pages: Counter[int] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    errors: Counter[int] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    sessions: int = 0
    unbuildable: int = 0

    def record(self, state: int, seconds: float, status: int | None, why: str = "") -> None:
        """One request's outcome (``status`` ``None``: no response, which is an error but
        not a request served)."""
        if status is not None:
            self.latencies.setdefault(state, []).append(seconds)
        if status == 400:
            self.error_pages[state] += 1
            found = _REASON.search(why)
            self.reasons[_DIGITS.sub("N", found.group(1) if found else why[:80])] += 1
        elif status != 200:
            self.errors[state] += 1
            if len(self.samples) < _SAMPLES:
                self.samples.append(f"{STATES[state]}: {status} {why}"[:300])

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to these."""
        for state, values in other.latencies.items():
            self.latencies.setdefault(state, []).extend(values)
        self.error_pages.update(other.error_pages)
        self.reasons.update(other.reasons)
        self.errors.update(other.errors)
        self.samples.extend(other.samples[: _SAMPLES - len(self.samples)])
        self.sessions += other.sessions
        self.unbuildable += other.unbuildable


class _Connection:
    """One keep-alive HTTP connection; reconnects once when a reused one was closed."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.http = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.cookie: str | None = None
        self.cookie_expires = 0.0

    def send(self, request: Request) -> tuple[int, str]:
        """The status and body of ``request``."""
        try:
            return self._send(request)
        except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine):
            self.http.close()  # the server closed an idle connection: reconnect
            return self._send(request)

    def _send(self, request: Request) -> tuple[int, str]:
        if self.cookie and time.monotonic() >= self.cookie_expires:
            self.cookie = None
        headers = {"Cookie": f"{_COOKIE}={self.cookie}"} if self.cookie else {}
        if request.body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        self.http.request(request.method, request.path, request.body, headers)
        response = self.http.getresponse()
        body = response.read().decode()
        self._keep(response.getheader("Set-Cookie"))
        return response.status, body

    def _keep(self, cookie: str | None) -> None:
        """Keep the ``not_before`` cookie until its ``Max-Age`` passes."""
        if not cookie or not cookie.startswith(f"{_COOKIE}="):
            return
        parts = [part.strip() for part in cookie.split(";")]
        self.cookie = parts[0].split("=", 1)[1]
        ages = [p.split("=", 1)[1] for p in parts[1:] if p.lower().startswith("max-age=")]
        self.cookie_expires = time.monotonic() + (float(ages[0]) if ages else float("inf"))

    def close(self) -> None:
        self.http.close()


@dataclass(slots=True)
class _Client:
    """One emulated client: sessions back to back, each run until ``stop``; a session that
    a run's end interrupts goes on in the next run (:class:`Emulation`)."""

    url: str
    rng: random.Random
    users: int
    peak: bool
    table: TransitionTable
    stop: threading.Event = field(default_factory=threading.Event)
    measure_from: float = 0.0
    measure_until: float = math.inf
    tally: Tally = field(default_factory=Tally)
    requests: int = 0
    arrived: bool = False
    session: Session | None = None
    visitor: Visitor | None = None
    previous: int = HOME
    connection: _Connection | None = None

    def begin_run(self, stop: threading.Event, measure_from: float, measure_until: float) -> None:
        """Count afresh in a run that ``stop`` ends, measuring the requests answered from
        ``measure_from`` until ``measure_until`` (not the ones still waiting then)."""
        self.stop, self.tally = stop, Tally()
        self.measure_from, self.measure_until = measure_from, measure_until

    def run(self) -> None:
        if self.connection is None:
            self.connection = _Connection(self.url)
        if not self.arrived:
            # With think times, clients arrive spread out as at steady state: an exponential
            # wait first makes their requests a Poisson stream from the start.
            self.arrived = True
            self.stop.wait(think_time_ms(self.rng, peak=self.peak) / 1000)
        while not self.stop.is_set():
            self._request(self.connection)
            self.stop.wait(think_time_ms(self.rng, peak=self.peak) / 1000)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def _request(self, connection: _Connection) -> None:
        """The next request of the session (a new one if none is under way)."""
        if self.session is None:
            self.session = Session(self.table, self.rng)
            self.visitor = Visitor.start(self.rng, self.users)
            connection.cookie = None
            self.previous = HOME
        session, visitor = self.session, self.visitor
        assert visitor is not None
        session.requests += 1
        state = session.state
        if self._visit(state, self.previous, visitor, connection):
            self.previous = state
            session.advance()
        else:
            self.previous = HOME
            session.error()
        if session.ended or session.requests >= session.max_transitions:
            self.tally.sessions += 1
            self.session = None

    def _visit(self, state: int, previous: int, visitor: Visitor, connection: _Connection) -> bool:
        """Request ``state``'s page; False for an error page."""
        request = visitor.request(state, previous)
        if request is None:
            self.tally.unbuildable += 1
            return False
        started = time.perf_counter()
        try:
            status, body = connection.send(request)
        except (OSError, http.client.HTTPException) as error:
            status, body = None, f"{type(error).__name__}: {error}"
            connection.close()
            self.stop.wait(_BACKOFF)  # do not spin against a server that is gone
        self.requests += 1
        if self.measure_from <= time.monotonic() < self.measure_until:
            self.tally.record(state, time.perf_counter() - started, status, body[-400:])
        if status == 200:
            visitor.saw(body)
        return status == 200


def _percentiles(values: list[float]) -> dict[str, float]:
    """Mean and percentiles in milliseconds."""
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    mean = round(sum(ordered) / len(ordered) * 1000, 3)
    return {"mean": mean, "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0)}


@dataclass(slots=True)
class Report:
    """The result of a run."""

    url: str
    clients: int
    duration: float
    peak: bool
    seed: int
    tally: Tally

    @property
    def requests(self) -> int:
        """Requests answered (with any status) in the measured time."""
        return sum(len(values) for values in self.tally.latencies.values())

    @property
    def throughput(self) -> float:
        """Requests per second over the measured time."""
        return self.requests / self.duration if self.duration > 0 else 0.0

    def counts(self) -> dict[str, int]:
        """Requests per interaction."""
        return {STATES[s]: len(v) for s, v in sorted(self.tally.latencies.items())}

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        every = [x for values in self.tally.latencies.values() for x in values]
        per_state = {
            STATES[s]: {
                "count": len(v),
                "error_pages": self.tally.error_pages[s],
                "errors": self.tally.errors[s],
                "latency_ms": _percentiles(v),
            }
            for s, v in sorted(self.tally.latencies.items())
        }
        return {
            "url": self.url,
            "clients": self.clients,
            "duration_s": round(self.duration, 3),
            "peak": self.peak,
            "seed": self.seed,
            "requests": self.requests,
            "throughput": round(self.throughput, 2),
            "latency_ms": _percentiles(every),
            "error_pages": sum(self.tally.error_pages.values()),
            "errors": sum(self.tally.errors.values()),
            "unbuildable": self.tally.unbuildable,
            "sessions_completed": self.tally.sessions,
            "per_interaction": per_state,
            "error_samples": self.tally.samples,
            "error_page_reasons": dict(self.tally.reasons.most_common(8)),
        }

    def summary(self) -> str:
        """A few lines for a terminal."""
        data = self.as_dict()
        latency = data["latency_ms"]
        lines = [
            f"{data['requests']} requests in {data['duration_s']} s from {self.clients} clients: "
            f"{data['throughput']} req/s",
            f"latency ms: mean {latency.get('mean')} p50 {latency.get('p50')} "
            f"p90 {latency.get('p90')} p99 {latency.get('p99')}",
            f"error pages {data['error_pages']}, errors {data['errors']}",
        ]
        lines += [f"  error: {sample}" for sample in data["error_samples"]]
        return "\n".join(lines)


def _progress(clients: list[_Client], started: float, total: float, stop: threading.Event) -> None:
    """A text progress bar on stderr, once a second."""
    last, before = started, 0
    while not stop.wait(1.0):
        now = time.monotonic()
        done = sum(client.requests for client in clients)
        errors = sum(sum(client.tally.errors.values()) for client in clients)
        share = min(1.0, (now - started) / total) if total > 0 else 1.0
        bar = "#" * int(share * 30)
        rate = (done - before) / (now - last)
        sys.stderr.write(
            f"\r[{bar:<30}] {now - started:5.0f}/{total:.0f} s {done} requests "
            f"{rate:7.1f} req/s {errors} errors"
        )
        sys.stderr.flush()
        last, before = now, done
    sys.stderr.write("\n")


class Emulation:
    """Emulated clients whose sessions go on from one run to the next: with think times a
    session lasts minutes, so runs of a few seconds each would otherwise see sessions'
    first pages only (Home, Browse), not the mix."""

    def __init__(
        self, url: str, *, clients: int, users: int, peak: bool = False, seed: int = 1
    ) -> None:
        """``clients`` clients of ``url`` (``users`` registered users; ``peak``: no think
        time), each with its own generator seeded from ``seed``."""
        self.url, self.peak, self.seed = url, peak, seed
        table = load_table("default")
        self.clients = [
            _Client(url, random.Random(f"{seed}-{i}"), users, peak, table) for i in range(clients)
        ]

    def run(
        self,
        duration: float,
        *,
        warmup: float = 0.0,
        progress: bool = False,
        window_ended: Callable[[], None] | None = None,
    ) -> Report:
        """Every client for ``warmup`` + ``duration`` seconds; the report of the last
        ``duration``. ``window_ended`` is called as the time is up, before the requests
        still waiting are answered (what the clients wait for then is not counted)."""
        stop = threading.Event()
        started = time.monotonic()
        for client in self.clients:
            client.begin_run(stop, started + warmup, started + warmup + duration)
        threads = [
            threading.Thread(target=client.run, name=f"rubis-client-{i}")
            for i, client in enumerate(self.clients)
        ]
        if progress:
            bar_stop = threading.Event()
            bar = threading.Thread(
                target=_progress, args=(self.clients, started, warmup + duration, bar_stop)
            )
            bar.start()
        for thread in threads:
            thread.start()
        stop.wait(warmup + duration)
        stop.set()
        if window_ended is not None:
            window_ended()
        for thread in threads:
            thread.join()
        if progress:
            bar_stop.set()
            bar.join()
        tally = Tally()
        for client in self.clients:
            tally.merge(client.tally)
        return Report(self.url, len(self.clients), duration, self.peak, self.seed, tally)

    def close(self) -> None:
        """Close every client's connection."""
        for client in self.clients:
            client.close()


def run(
    url: str,
    *,
    clients: int,
    duration: float,
    users: int,
    peak: bool = False,
    seed: int = 1,
    warmup: float = 0.0,
    progress: bool = False,
) -> Report:
    """Emulate ``clients`` users against ``url`` for ``warmup`` + ``duration`` seconds."""
    emulation = Emulation(url, clients=clients, users=users, peak=peak, seed=seed)
    try:
        return emulation.run(duration, warmup=warmup, progress=progress)
    finally:
        emulation.close()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m rubis.emulator", description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=0.0, help="unmeasured seconds first")
    parser.add_argument("--peak", action="store_true", help="no think time (peak load)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small", help="its users")
    parser.add_argument("--users", type=int, help="user count (default: the preset's)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    report = run(
        args.url,
        clients=args.clients,
        duration=args.duration,
        users=args.users or PRESETS[args.preset].users,
        peak=args.peak,
        seed=args.seed,
        warmup=args.warmup,
        progress=not args.quiet,
    )
    print(report.summary())
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    return 1 if report.tally.errors else 0


if __name__ == "__main__":
    sys.exit(main())
