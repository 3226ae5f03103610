"""The request mix a transition table produces: simulated, and computed exactly.

``python -m rubis.mix [--table default|browse_only] [--requests N] [--seed S]`` prints both
side by side, with the write shares (docs/rubis.md quotes its output).

- ``simulated_mix`` runs seeded ``Session``s back to back and counts the pages requested.
- ``exact_mix`` does not sample: it propagates the probability of every (state, Back stack)
  configuration a session can be in, request by request, and sums the expected visits per
  session (by renewal, long-run shares are expected visits over expected session length).
  It reads the table's columns itself (cut-off at 1, stay below 1), so it checks the
  sampler rather than repeating it. Configurations below ``prune`` are dropped; the mass
  dropped is reported and is far below the statistical error of any simulation.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from rubis.transitions import (
    BACK,
    END_OF_SESSION,
    HOME,
    MAX_TRANSITIONS,
    STATE_COUNT,
    STATES,
    WRITE_STATES,
    Session,
    TransitionTable,
    load_table,
)

__all__ = ["STATIC_STATES", "Mix", "exact_mix", "main", "simulated_mix"]

#: Pages RUBiS serves as static HTML or fixed forms (no database access): Home, Register,
#: Browse, BuyNowAuth, PutBidAuth, PutCommentAuth, Sell, SellItemForm, AboutMe's auth form.
STATIC_STATES = frozenset({0, 1, 3, 12, 15, 18, 21, 23, 25})

Configuration = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Mix:
    """Per-state shares of all requests, and how they were obtained."""

    shares: tuple[float, ...]
    sessions: float
    requests_per_session: float
    lost: float = 0.0

    def share_of(self, states: frozenset[int]) -> float:
        """The share of requests going to ``states``."""
        return sum(self.shares[s] for s in states)

    @property
    def write_share(self) -> float:
        """Writes among all requests."""
        return self.share_of(WRITE_STATES)

    @property
    def dynamic_write_share(self) -> float:
        """Writes among requests that are not static pages."""
        dynamic = frozenset(range(STATE_COUNT)) - STATIC_STATES
        return self.write_share / self.share_of(dynamic)


def simulated_mix(table: TransitionTable, *, requests: int, seed: int = 1) -> Mix:
    """Count the pages of seeded sessions until ``requests`` pages were requested."""
    rng = random.Random(seed)
    counts: Counter[int] = Counter()
    sessions = 0
    while counts.total() < requests:
        sessions += 1
        counts.update(Session(table, rng).pages())
    total = counts.total()
    shares = tuple(counts[s] / total for s in range(STATE_COUNT))
    return Mix(shares, sessions, total / sessions)


def _effective(column: Sequence[float]) -> list[tuple[int | None, float]]:
    """(row, probability) of each outcome of a draw; row ``None`` is staying put."""
    outcomes: list[tuple[int | None, float]] = []
    used = 0.0
    for row, probability in enumerate(column):
        taken = max(0.0, min(probability, 1.0 - used))
        used += taken
        if taken > 0:
            outcomes.append((row, taken))
    if used < 1.0:
        outcomes.append((None, 1.0 - used))
    return outcomes


def _successor(table: TransitionTable, config: Configuration, row: int | None) -> Configuration:
    """The configuration after outcome ``row`` (not End of Session)."""
    state, stack = config
    if row == BACK:
        return (stack[-1], stack[:-1]) if stack else (HOME, ())
    target = state if row is None else row
    if table.columns[target][BACK] != 0:
        return target, (*stack, state)
    return target, ()


def exact_mix(
    table: TransitionTable, *, max_transitions: int = MAX_TRANSITIONS, prune: float = 1e-13
) -> Mix:
    """Expected visits per session to each state, by propagating configurations."""
    outcomes = [_effective(column) for column in table.columns]
    alive: dict[Configuration, float] = {(HOME, ()): 1.0}
    visits = [0.0] * STATE_COUNT
    lost = 0.0
    for _ in range(max_transitions):
        following: defaultdict[Configuration, float] = defaultdict(float)
        for config, mass in alive.items():
            visits[config[0]] += mass
            for row, probability in outcomes[config[0]]:
                if row != END_OF_SESSION:
                    following[_successor(table, config, row)] += mass * probability
        alive = {c: m for c, m in following.items() if m >= prune}
        lost += sum(following.values()) - sum(alive.values())
        if not alive:
            break
    length = sum(visits)
    return Mix(tuple(v / length for v in visits), 1.0, length, lost)


def _report(exact: Mix, simulated: Mix) -> str:
    """A markdown table of both mixes."""
    lines = [
        "| state | exact % | simulated % |",
        "|---|---:|---:|",
        *(
            f"| {s} {STATES[s]} | {100 * exact.shares[s]:.3f} | {100 * simulated.shares[s]:.3f} |"
            for s in range(STATE_COUNT)
        ),
        f"| writes | {100 * exact.write_share:.2f} | {100 * simulated.write_share:.2f} |",
        f"| writes among dynamic pages | {100 * exact.dynamic_write_share:.2f} "
        f"| {100 * simulated.dynamic_write_share:.2f} |",
        f"| requests per session | {exact.requests_per_session:.2f} "
        f"| {simulated.requests_per_session:.2f} |",
    ]
    return "\n".join(lines) + f"\n\nexact: probability mass pruned {exact.lost:.1e}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the exact and a simulated mix of a table."""
    parser = argparse.ArgumentParser(prog="python -m rubis.mix", description=__doc__)
    parser.add_argument("--table", choices=["default", "browse_only"], default="default")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    table = load_table(args.table)
    simulated = simulated_mix(table, requests=args.requests, seed=args.seed)
    sys.stdout.write(_report(exact_mix(table), simulated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
