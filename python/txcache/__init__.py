"""txcache: a transactional, automatically invalidated cache for PostgreSQL applications.

This package holds the Python side of txcache. Today: preparing a database
(:func:`setup_database`, ``txcache setup``), and starting the parts of a stack as child
processes (:class:`EmbeddedPostgres`, :class:`NodeProcess`, :class:`AgentProcess`). The
library proper (transactions, ``@cacheable``) follows the design in ``docs/``.
"""

from txcache._agent_process import AgentProcess
from txcache._node_process import NodeProcess, NodeStartError, find_txcached
from txcache._postgres import EmbeddedPostgres, PostgresStartError, find_postgres_bin
from txcache._setup import (
    SetupError,
    SetupReport,
    SetupStep,
    StepStatus,
    TxcacheError,
    setup_database,
)

__all__ = [
    "AgentProcess",
    "EmbeddedPostgres",
    "NodeProcess",
    "NodeStartError",
    "PostgresStartError",
    "SetupError",
    "SetupReport",
    "SetupStep",
    "StepStatus",
    "TxcacheError",
    "find_postgres_bin",
    "find_txcached",
    "setup_database",
]

__version__ = "0.1.0"
