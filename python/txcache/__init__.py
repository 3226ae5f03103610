"""txcache: a transactional, automatically invalidated cache for PostgreSQL applications.

This package holds the Python side of txcache. Today it can start and stop cache nodes
(:class:`NodeProcess`); the library proper (transactions, ``@cacheable``) follows the design
in ``docs/``.
"""

from txcache._node_process import NodeProcess, NodeStartError, find_txcached

__all__ = ["NodeProcess", "NodeStartError", "find_txcached"]

__version__ = "0.1.0"
