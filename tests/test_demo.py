"""``make demo``'s first part, ``python -m txcache.demo``, run as ``make demo`` runs it: each
step shows what its heading says (the README promises these steps)."""

from __future__ import annotations

import re
import subprocess
import sys


def test_the_demo_shows_hits_an_invalidation_and_one_commit_point_while_data_changes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "txcache.demo"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = done.stdout
    # The transaction that took no snapshot is its own, not the first one's with its miss.
    second = out.split("A second read-only transaction", 1)[1].split("\n\n", 1)[0]
    assert "(hit)" in second, second
    assert "database snapshot: None" in second, second
    assert re.search(r"get_item\(42\) +-> \(42, 'item 42', 999\)", out), out  # invalidated
    # Item 6, read after the write that changed 5 and 6 committed, as of item 5's read...
    during = out.split("One commit point while data changes", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"get_item\(5\) +-> \(5, 'item 5', 50\)", during), during
    assert re.search(r"get_item\(6\) .*-> \(6, 'item 6', 60\)", during), during
    # ...and both new prices in a transaction not before that commit.
    after = out.split("A transaction not before that commit", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"get_item\(5\) +-> \(5, 'item 5', 555\)", after), after
    assert re.search(r"get_item\(6\) +-> \(6, 'item 6', 555\)", after), after
