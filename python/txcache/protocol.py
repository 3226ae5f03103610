"""A client of the nodes' and the agent's protocol, for tools: ``txcache status``, the stack,
the benchmarks, your own scripts.

An application never needs this: the library speaks to the nodes and the agent itself.
What is here is the library's own client (docs/protocol.md is the contract), one function
per command returning a :class:`Command` (the request and the decoder of its reply), and
a connection to run it on::

    from txcache import protocol

    with protocol.connect("127.0.0.1:6380", timeout=60) as node:
        node.run(protocol.txstatus()).position              # N
        memory = node.run(protocol.info("memory"))          # field -> text
        protocol.integer_fields(memory)["used_memory"]
        node.run(protocol.txget(b"key", 100, 200))          # a Hit or a Miss
        node.call("DBSIZE")                                 # any other command, raw
    with protocol.connect("127.0.0.1:6390") as agent:
        agent.run(protocol.agent_status())["pins_certified"]
        agent.run(protocol.pin())                           # a fresh txcache.Pin

Nodes: :func:`txget`, :func:`txset`, :func:`txinterval`, :func:`txstatus`, :func:`txdatabase`,
:func:`max_staleness`, :func:`info` (:func:`parse_fields`, :func:`integer_fields`); the
agent: :func:`pins`, :func:`standby_pins`, :func:`pin`, :func:`commit_lsn`,
:func:`tag_columns`, :func:`barrier`, :func:`database`, :func:`nodes`, :func:`agent_status`,
:func:`agent_role`, :func:`agent_standbys`. A node's misses
are of the kinds :data:`MISS_KINDS`.

:class:`RespConnection` (what :func:`connect` returns; hiredis, one socket, no pool) raises
:class:`ConnectionLost` when the connection fails (:class:`PasswordRefused` when ``AUTH``
is), the server's :class:`ReplyError` from :meth:`RespConnection.run`, and
:class:`BadReply` for a reply of the wrong shape; :meth:`RespConnection.call` returns an
error reply rather than raising it. :class:`AsyncRespConnection` is the asyncio connection
(``await AsyncRespConnection.open((host, port))``), one connection shared by any number of
tasks; :func:`parse_address` turns ``host:port`` into its ``(host, port)``.
"""

from txcache._protocol import (
    MISS_KINDS,
    Barrier,
    CatalogVersion,
    DatabaseIdentity,
    Hit,
    Interval,
    Miss,
    NodeStatus,
    Stored,
    agent_role,
    agent_standbys,
    agent_status,
    barrier,
    commit_lsn,
    connect,
    database,
    info,
    integer_fields,
    max_staleness,
    nodes,
    parse_fields,
    pin,
    pins,
    standby_pins,
    stream_name,
    tag_columns,
    txdatabase,
    txget,
    txinterval,
    txset,
    txstatus,
)
from txcache._resp import (
    BadReply,
    Command,
    ConnectionLost,
    PasswordRefused,
    ReplyError,
    RespConnection,
    parse_address,
)
from txcache.aio._resp import AsyncRespConnection

__all__ = [
    "MISS_KINDS",
    "AsyncRespConnection",
    "BadReply",
    "Barrier",
    "CatalogVersion",
    "Command",
    "ConnectionLost",
    "DatabaseIdentity",
    "Hit",
    "Interval",
    "Miss",
    "NodeStatus",
    "PasswordRefused",
    "ReplyError",
    "RespConnection",
    "Stored",
    "agent_role",
    "agent_standbys",
    "agent_status",
    "barrier",
    "commit_lsn",
    "connect",
    "database",
    "info",
    "integer_fields",
    "max_staleness",
    "nodes",
    "parse_address",
    "parse_fields",
    "pin",
    "pins",
    "standby_pins",
    "stream_name",
    "tag_columns",
    "txdatabase",
    "txget",
    "txinterval",
    "txset",
    "txstatus",
]
