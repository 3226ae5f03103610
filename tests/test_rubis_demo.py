"""``make demo``'s RUBiS part, end to end at ``tiny`` scale: both runs, the summary, the plot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_rubis_demo_runs_both_modes_and_prints_the_comparison(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "rubis.demo", "--preset", "tiny", "--clients", "2"]
    command += ["--duration", "2", "--warmup", "2", "--output", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    for line in ("without the cache", "with txcache", "speedup", "hit rate", "staleness misses"):
        assert line in out, out
    assert (tmp_path / "rubis_demo.png").stat().st_size > 0
