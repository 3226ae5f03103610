"""The agent's Prometheus endpoint (``--metrics-port``), end to end: PostgreSQL, a node, the
agent. The metrics expected are those of docs/agent.md's "Metrics" table, which a Rust test
holds equal to the agent's own table."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from conftest import StartNode
from txcache import setup_database
from txcache.stack import AgentProcess, free_port, wait_until, wal_position

PREFIX = "txcache_agent_"


def documented_metrics() -> dict[str, str]:
    """docs/agent.md's metrics table: name (without its ``{label}``) → kind."""
    doc = (Path(__file__).parent.parent / "docs" / "agent.md").read_text()
    table = doc.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    metrics = {}
    for row in table.splitlines():
        if row.startswith("| `"):
            cells = [cell.strip() for cell in row.split("|")]
            metrics[re.sub(r"\{\w+\}$", "", cells[1].strip("`"))] = cells[2]
    return metrics


def exposed_name(name: str, kind: str) -> str:
    """A documented metric's name in the Prometheus text: a counter's ends in ``_total``."""
    return f"{name}_total" if kind == "counter" else name


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(response.read().decode())


def samples(text: str) -> dict[str, int]:
    """``name{labels}`` → value, for every sample line."""
    lines = (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    return {series: int(value) for series, value in lines}


def test_metrics_follow_the_stream_and_list_every_metric(
    database: str, start_node: StartNode
) -> None:
    with psycopg.connect(database, autocommit=True) as db:
        db.execute("CREATE TABLE items (id integer PRIMARY KEY)")
        setup_database(database)
        node = start_node("--max-memory", "64mb")
        port = free_port()
        agent = AgentProcess(
            database, [node.address], "--heartbeat-interval", "50ms", "--metrics-port", str(port)
        )
        try:
            db.execute("INSERT INTO items VALUES (1)")
            written = wal_position(db)
            delivered = f'{PREFIX}delivered_commits_total{{node="{node.address}"}}'

            def caught_up() -> str | None:
                text = scrape(port)
                now = samples(text)
                past = now[f"{PREFIX}stream_position"] >= written
                measured = now[f"{PREFIX}database_position"] >= written
                return text if past and measured and now.get(delivered, 0) >= 1 else None

            what = "the write in the agent's metrics"
            text = wait_until(caught_up, what, timeout=20, log=agent.log_text)
            now = samples(text)
            assert now[f'{PREFIX}node_connected{{node="{node.address}"}}'] == 1
            assert now[f"{PREFIX}nodes_connected"] == 1
            assert now[f"{PREFIX}commit_position"] < written <= now[f"{PREFIX}stream_position"]
            documented = documented_metrics()
            assert len(documented) >= 20
            exposed = {exposed_name(name, kind): kind for name, kind in documented.items()}
            for name, kind in exposed.items():
                assert f"# TYPE {PREFIX}{name} {kind}\n" in text, name
                assert f"# HELP {PREFIX}{name} " in text, name
            types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
            assert types == [PREFIX + name for name in exposed]
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
            refused.value.close()
            assert refused.value.code == 404
        finally:
            agent.stop()
