"""HTTP load for the example apps' benchmarks: a mix of GETs with Zipf-popular keys, a
minimal keep-alive HTTP/1.1 client, and a closed loop of clients driving a server with it.

The load generator runs in the benchmark's process and shares the machine's CPUs with the
servers it measures, so it is made to cost as little CPU per request as it can: one event
loop, no HTTP library (:class:`Connection`).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from _report import percentile, quantiles

__all__ = ["Connection", "Load", "RequestMix", "drive", "zipf_keys", "zipf_weights"]

Draw = Callable[[random.Random], str]
"""A path to GET, drawn with the client's RNG."""


def zipf_weights(count: int, exponent: float) -> list[float]:
    """Cumulative weights of ranks 1..``count`` under Zipf(``exponent``), for
    ``random.choices``."""
    return list(itertools.accumulate(1 / rank**exponent for rank in range(1, count + 1)))


def zipf_keys(
    count: int, exponent: float, shuffle: random.Random
) -> Callable[[random.Random], int]:
    """A draw of keys 0..``count - 1`` by Zipf(``exponent``) popularity over an order fixed
    by ``shuffle`` (so that the most popular keys are spread over the key space: the
    popular products, say, over categories); call it with the client's RNG."""
    order = list(range(count))
    shuffle.shuffle(order)
    weights = zipf_weights(count, exponent)

    def draw(rng: random.Random) -> int:
        return rng.choices(order, cum_weights=weights)[0]

    return draw


class RequestMix:
    """Which GET to send next: an endpoint by its share of the requests, then its path."""

    def __init__(self, endpoints: Mapping[str, tuple[int, Draw]]) -> None:
        """``endpoints``: each one's name, its share (percent, or any weight) and the draw
        of its path."""
        self.kinds = list(endpoints)
        self.shares = {kind: share for kind, (share, _) in endpoints.items()}
        self._weights = list(itertools.accumulate(self.shares.values()))
        self._draws = {kind: draw for kind, (_, draw) in endpoints.items()}

    def next(self, rng: random.Random) -> tuple[str, str]:
        """An endpoint's name and the path to GET."""
        kind = rng.choices(self.kinds, cum_weights=self._weights)[0]
        return kind, self._draws[kind](rng)

    def describe(self) -> str:
        """The shares as text: ``60 % product, 15 % category, …``."""
        return ", ".join(f"{share} % {kind}" for kind, share in self.shares.items())


class Connection:
    """One keep-alive HTTP/1.1 connection that sends GETs and reads their responses, no
    more: the load generator shares the machine's CPUs with the servers, and httpx spends
    more CPU per request than the apps themselves (about 2 ms, against under 0.1 ms here),
    which would cap every mode at the client's speed. Speaks exactly what the apps answer: a
    status line, headers with ``Content-Length`` (FastAPI's JSON responses; Django's, which
    its ``CommonMiddleware`` measures), the body."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.host = host  # Django answers only the hosts of its ALLOWED_HOSTS

    @classmethod
    async def open(cls, url: str) -> Connection:
        """A connection to ``http://host:port``."""
        address = url.removeprefix("http://")
        host, port = address.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)), host=address)

    async def get(self, path: str) -> int:
        """GET ``path``; the response's status code (its body is read and dropped)."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        marker = head.lower().find(b"\r\ncontent-length:")
        if marker < 0:
            raise RuntimeError(f"a response without Content-Length: {head!r}")
        length = int(head[marker + 17 : head.index(b"\r\n", marker + 2)])
        await self.reader.readexactly(length)
        return int(head[9:12])

    async def close(self) -> None:
        """Close the connection."""
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


@dataclass
class Load:
    """What one closed-loop run got back: latencies (ms) by endpoint, status codes, time."""

    latency_ms: dict[str, list[float]]
    statuses: Counter[int]
    seconds: float

    @property
    def requests(self) -> int:
        """Requests answered."""
        return sum(self.statuses.values())

    def summary(self) -> dict[str, Any]:
        """The run as a row of raw results: time, requests, requests/s, statuses, latency
        p50 and p99 (overall and by endpoint) and the overall distribution
        (:func:`_report.quantiles`)."""
        every = [value for values in self.latency_ms.values() for value in values]
        return {
            "seconds": round(self.seconds, 3),
            "requests": self.requests,
            "throughput": self.requests / self.seconds,
            "statuses": {str(code): count for code, count in sorted(self.statuses.items())},
            "p50_ms": percentile(every, 0.5),
            "p99_ms": percentile(every, 0.99),
            "latency_by_endpoint": {
                kind: {
                    "count": len(values),
                    "p50_ms": percentile(values, 0.5),
                    "p99_ms": percentile(values, 0.99),
                }
                for kind, values in self.latency_ms.items()
            },
            "latency_quantiles_ms": quantiles(every),
        }


async def drive(url: str, mix: RequestMix, seconds: float, concurrency: int, seed: str) -> Load:
    """``concurrency`` clients, each on its own connection, sending its next GET as soon as
    the last one is answered, for ``seconds`` (requests under way then are finished and
    counted). Client ``i`` draws from the RNG seeded ``seed/i``, so that two runs with one
    seed send the same requests in each client's order (the modes compared, a round each)."""
    latency: dict[str, list[float]] = {kind: [] for kind in mix.kinds}
    statuses: Counter[int] = Counter()
    connections = [await Connection.open(url) for _ in range(concurrency)]
    started = time.perf_counter()
    deadline = started + seconds

    async def client_loop(index: int) -> None:
        rng, connection = random.Random(f"{seed}/{index}"), connections[index]
        while time.perf_counter() < deadline:
            kind, path = mix.next(rng)
            sent = time.perf_counter()
            status = await connection.get(path)
            latency[kind].append((time.perf_counter() - sent) * 1e3)
            statuses[status] += 1

    try:
        await asyncio.gather(*(client_loop(index) for index in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        for connection in connections:
            await connection.close()
    return Load(latency, statuses, elapsed)
