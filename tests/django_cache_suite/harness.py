"""Fetch Django's own tests of the installed Django and run its cache cases in a subprocess.

Django's wheel has no tests; its sdist does. :func:`django_tests` downloads the sdist of
the installed version with pip (once: the tests stay in the directory given, which the
caller keeps between runs) and extracts what ``cache.tests`` needs: ``runtests.py``,
``urls.py`` and ``cache/``. :func:`run_cases` runs labels of them with Django's
``runtests.py`` and returns what :class:`django_cache_suite.runner.RecordingRunner`
recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import django

SUITE_PACKAGE_DIR = Path(__file__).resolve().parent
"""Where ``django_cache_suite`` is importable from: the repository's ``tests`` directory."""
IMPORT_ROOT = SUITE_PACKAGE_DIR.parent

# What cache.tests needs of Django's tests directory: the runner, the URLconf its settings
# name, and the cache app (models, helpers, the tests).
_NEEDED = ("tests/runtests.py", "tests/urls.py", "tests/cache/")


def django_tests(cache_dir: Path) -> Path:
    """The ``tests`` directory of the installed Django's sdist under ``cache_dir``,
    downloaded and extracted unless an earlier run left it there."""
    version = django.__version__
    tests = cache_dir / f"django-{version}" / "tests"
    if (tests / "runtests.py").exists():
        return tests
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        sdist = _download_sdist(version, Path(scratch))
        extracted = Path(scratch) / "extracted"
        _extract(sdist, extracted)
        # A run stopped halfway leaves only its scratch directory, never half a tree.
        try:
            os.replace(extracted / f"django-{version}", cache_dir / f"django-{version}")
        except OSError:
            if not (tests / "runtests.py").exists():
                raise  # not another run's tree having got there first
    return tests


def _download_sdist(version: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", ":all:", "--dest", str(into), f"django=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip could not download Django {version}'s sdist:\n{done.stderr}")
    (sdist,) = into.glob("*.tar.gz")
    return sdist


def _extract(sdist: Path, into: Path) -> None:
    with tarfile.open(sdist) as archive:
        members = [
            member
            for member in archive.getmembers()
            if member.name.partition("/")[2].startswith(_NEEDED)
        ]
        archive.extractall(into, members=members, filter="data")


def run_cases(
    tests: Path, labels: list[str], environment: dict[str, str], results: Path
) -> dict[str, Any]:
    """Run ``labels`` with Django's ``runtests.py`` in ``tests`` (one process, settings
    ``django_cache_suite.settings`` with ``environment`` added) and return the outcome:
    ``ran``, and the ids of the ``failures``, ``errors``, ``skipped`` and
    ``unexpected_successes``. Raises naming the output when there is no outcome."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TXCACHE")}
    env.update(environment)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(IMPORT_ROOT), env.get("PYTHONPATH")]))
    env["TXCACHE_SUITE_RESULTS"] = str(results)
    command = [sys.executable, "runtests.py", "--settings=django_cache_suite.settings"]
    command += ["--parallel=1", "--noinput", *labels]
    done = subprocess.run(
        command, cwd=tests, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if not results.exists():
        raise RuntimeError(f"Django's runtests.py recorded nothing:\n{done.stdout}{done.stderr}")
    outcome: dict[str, Any] = json.loads(results.read_text())
    outcome["output"] = done.stdout + done.stderr
    return outcome
