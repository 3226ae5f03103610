"""The generator of the sync drivers (tools/async_to_sync.py): what it does to async source,
as pure text (no formatting), and that every committed sync driver is what its source
generates."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parent.parent


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools/async_to_sync.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_to_sync"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SOURCE = '''"""AsyncCache's helper. Its sync twin is generated from it."""
from collections.abc import Coroutine
from typing import Any

from txcache._drivers import ASYNC
from txcache.aio._nodes import AsyncCacheNode


class AsyncThing:
    @staticmethod
    async def fetch(node: AsyncCacheNode) -> int:
        async with node.lock:  # a comment stays
            async for item in node.items():
                await asyncio.sleep(0.1)
        return await node.run(  # awaited across lines
            "PING",
        )

    def check(self) -> Coroutine[Any, Any, list[int]]:
        return self._check(ASYNC)

    if ASYNC:

        async def only_async(self) -> None:
            await asyncio.shield(self.fetch(None))

    else:

        @property
        def only_sync(self) -> int:
            return 1

    if ASYNC:
        cancelled = True
'''


def test_the_transform_keeps_the_sync_code_and_the_comments() -> None:
    text = generator().transform(SOURCE, "python/txcache/aio/_thing.py")
    assert text.startswith("# Generated from python/txcache/aio/_thing.py")
    assert '"""Cache\'s helper. It is generated from its async twin."""' in text
    assert "from txcache._nodes import CacheNode" in text
    assert "import ASYNC" not in text
    assert "class AsyncThing" in text  # not in the table: kept as written
    assert "    def fetch(node: CacheNode) -> int:" in text
    assert "        with node.lock:  # a comment stays" in text
    assert "            for item in node.items():" in text
    assert "                time.sleep(0.1)" in text
    assert "        return node.run(  # awaited across lines" in text
    assert "def check(self) -> list[int]:" in text
    assert "return self._check(False)" in text
    assert "only_async" not in text
    assert "shield" not in text
    assert "cancelled" not in text
    assert "    @property\n    def only_sync(self) -> int:\n        return 1" in text
    assert "await " not in text
    assert "async def" not in text


def test_the_committed_sync_drivers_are_what_their_sources_generate() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/async_to_sync.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
