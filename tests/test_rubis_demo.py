"""``make demo``'s RUBiS part, end to end at ``tiny`` scale: both runs, the summary, the plot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_the_rubis_demo_runs_both_modes_and_prints_the_comparison(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "rubis.demo", "--preset", "tiny", "--clients", "2"]
    command += ["--duration", "2", "--warmup", "3", "--output", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    for line in ("without the cache", "with txcache", "speedup", "hit rate", "staleness misses"):
        assert line in out, out
    # The cached run's warm-up shows its progress, as the measured runs do.
    assert "txcache: warming up for 3 s (not measured)" in out, out
    assert "txcache: measuring for 2 s" in out, out
    assert re.search(r"\] +\d/3 s \d+ requests", done.stderr), done.stderr[-2000:]
    assert (tmp_path / "rubis_demo.png").stat().st_size > 0
