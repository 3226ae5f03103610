"""RUBiS, the auction benchmark of the TxCache evaluation, on PostgreSQL and txcache.

- ``rubis.schema``: the RUBiS 1.4.3 tables and indexes plus the TxCache port's additions
  (``items_by_rc`` and a one-row virtual clock).
- ``rubis.generate``: the InitDB data generator (``python -m rubis.generate``).
- ``rubis.transitions``: the client emulator's model: transition tables, next-state draws,
  the Back stack, think times. Pure logic, no I/O.
- ``rubis.mix``: the request mix of a transition table, simulated and exact
  (``python -m rubis.mix``).
- ``rubis.queries``: the shared cacheable functions; ``rubis.interactions``: the read pages
  (``Rubis``); ``rubis.writes``: the five writes.
- ``rubis.pages``: the cacheable page functions; ``rubis.html``: the HTML;
  ``rubis.app``/``rubis.routes``: the WSGI application; ``rubis.serve``: granian serving it
  (``python -m rubis.serve``); ``rubis.process``: that server as a child process.
- ``rubis.client``: what an emulated user requests next; ``rubis.emulator``: the client
  emulator (``python -m rubis.emulator``).
"""

from __future__ import annotations

__all__: list[str] = []
