"""What a framework integration builds on, beyond :mod:`txcache`'s public surface: the one
module ``txcache.django`` and ``txcache.sqlalchemy`` import from the library's insides, and
the one an integration of yours should (docs/architecture.md, "Adding a framework
integration"). Stable within a release; not for application code.

- **Transactions.** :data:`Params`, :data:`Row`; :class:`ReadOnlyCore` (what a read-only
  transaction of either driver is: ``isinstance`` tells a read-only block of the sync or the
  async driver); :class:`CommitRecord` (what a read/write transaction of either driver knows
  of its commit: ``wrote``, the commit timestamp).
- **Statements.** :func:`check_read_only`: what a read-only transaction may run — an
  integration that runs statements on a connection of its own refuses what the library
  would; :func:`leaves_session_alone` and :func:`changes_settings`: what a statement does
  to its session, for one whose session the library's transactions do not share.
- **Cacheable calls.** :func:`run_directly_when`: a condition under which a call outside any
  transaction runs its function directly (Django's ``atomic()`` on its own connection);
  :func:`provide_default_cache`: what makes the cache of such calls while none is open (the
  framework's process cache, in a worker or a script that never asked for it).
- **Read-your-writes.** :mod:`tokens <txcache._tokens>`: record a write committed outside
  txcache's transactions (``tokens.wrote_elsewhere``), give a request its own state
  (``tokens.scope``, ``tokens.advance``), hand its client the token (``tokens.floor``). A
  sync or async cache's ``request_scope()`` and ``written_token()`` cover the common case.
- **Settings and nodes.** :func:`load_settings` (arguments > ``TXCACHE_*`` >
  ``txcache.toml`` > defaults, as :func:`txcache.connect` reads them), :class:`NodeRing`
  and :func:`parse_address` (to place keys on the nodes as the library does), and
  :func:`view_stats` (per-view statistics beside the per-function ones).
"""

from __future__ import annotations

from txcache import _tokens as tokens
from txcache._cacheable_base import run_directly_when
from txcache._commit import CommitRecord
from txcache._config import load_settings
from txcache._connect import provide_default_cache
from txcache._current import Params, Row
from txcache._read_only_core import ReadOnlyCore
from txcache._resp import parse_address
from txcache._ring import NodeRing
from txcache._statements import changes_settings, check_read_only, leaves_session_alone
from txcache._stats import view_stats

__all__ = [
    "CommitRecord",
    "NodeRing",
    "Params",
    "ReadOnlyCore",
    "Row",
    "changes_settings",
    "check_read_only",
    "leaves_session_alone",
    "load_settings",
    "parse_address",
    "provide_default_cache",
    "run_directly_when",
    "tokens",
    "view_stats",
]
