"""The async RESP transport: one connection multiplexed across tasks, and the endpoint that
keeps a server's health (:class:`~txcache._resp.Health`, shared with the sync endpoint).

:class:`AsyncRespConnection` is an :class:`asyncio.Protocol` with hiredis's reader: a call
packs its command, writes it at once and waits on a future; replies arrive in request order,
so a FIFO of futures pairs them. The protocol's ``data_received`` resolves the futures
itself — no reader task, so a reply wakes its caller after one event-loop step, not two.
A caller that is cancelled leaves its future in the FIFO (cancelled): its reply is read and
dropped when it comes, and the replies after it still reach their callers. A request is
written whole or not at all (``transport.write`` does not suspend), so cancellation never
leaves half a command on the wire.

A server silent for ``timeout`` seconds while a reply is owed (to a caller still waiting or
not) counts as lost: every waiting call fails with :class:`~txcache._resp.ConnectionLost`
and the connection is closed; the endpoint marks the server down.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import hiredis

from txcache._resp import (
    Command,
    ConnectionClosed,
    ConnectionLost,
    Greeting,
    Health,
    PasswordRefused,
    ReplyError,
    ReplyReader,
    greeting_refused,
    parse_address,
    read_reply,
    show_address,
    tls_context,
    tls_hint,
    uses_tls,
)

__all__ = ["AsyncEndpoint", "AsyncRespConnection"]

T = TypeVar("T")
Argument = str | bytes | int | float
_MAX_IDLE_CONNECTIONS = 16


class AsyncRespConnection(asyncio.Protocol):
    """One connection to a RESP server, shared by any number of tasks (module docstring).
    Open it with :meth:`open`."""

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        """Not connected yet: :meth:`open` makes one."""
        self.address = address
        self._timeout = timeout
        self._reader = ReplyReader(address)
        # Futures of the calls owed a reply, in request order, with their deadlines.
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._lost: ConnectionLost | None = None
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def open(
        cls,
        address: tuple[str, int],
        *,
        password: str | None = None,
        connect_timeout: float = 1.0,
        timeout: float = 5.0,
        tls: ssl.SSLContext | None = None,
        greeting: Greeting | None = None,
    ) -> AsyncRespConnection:
        """Connect to ``address`` (over TLS with ``tls``, checking the certificate names
        the host), authenticate and send ``greeting``'s command; raises
        :class:`~txcache._resp.ConnectionLost` (:class:`~txcache._resp.PasswordRefused`
        when ``AUTH`` is refused). asyncio sets ``TCP_NODELAY`` on TCP transports."""
        loop = asyncio.get_running_loop()
        host = address[0] if tls is not None else None
        try:
            async with asyncio.timeout(connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: cls(address, timeout),
                    address[0],
                    address[1],
                    ssl=tls,
                    server_hostname=host,
                )
        except TimeoutError as error:
            raise ConnectionLost(f"cannot connect to {show_address(address)}: {error!r}") from error
        except OSError as error:
            why = tls_hint(error)
            raise ConnectionLost(f"cannot connect to {show_address(address)}: {why}") from error
        try:
            await connection._introduce(password, greeting)
        except BaseException:  # refused, lost or cancelled: no caller holds it to close
            connection.close()
            raise
        return connection

    async def _introduce(self, password: str | None, greeting: Greeting | None) -> None:
        """Authenticate and send the greeting's command (raises as :meth:`open`)."""
        if password is not None:
            reply = await self.call("AUTH", password)
            if isinstance(reply, ReplyError):
                raise PasswordRefused(
                    f"{show_address(self.address)} refused the password: {reply}", reply
                )
        if greeting is not None:
            command = greeting()
            reply = None if command is None else await self.call(*command)
            greeting_refused(self.address, command, reply)

    @property
    def usable(self) -> bool:
        """Whether calls can still be made (not lost, not closed)."""
        return self._lost is None and self._transport is not None

    @property
    def owed(self) -> int:
        """How many replies are still expected (cancelled callers' included)."""
        return len(self._waiting)

    async def call(self, *command: Argument) -> Any:
        """Send one command and return its reply (a :class:`ReplyError` for ``-ERR``);
        raises :class:`~txcache._resp.ConnectionLost`."""
        (future,) = self.send([command])
        return await future

    async def pipeline(self, commands: Sequence[Sequence[Argument]]) -> list[Any]:
        """Send several commands in one write and return their replies in order."""
        return list(await asyncio.gather(*self.send(commands)))

    def send(self, commands: Sequence[Sequence[Argument]]) -> list[asyncio.Future[Any]]:
        """Write ``commands`` at once; a future per reply, in order."""
        if self._lost is not None:
            raise self._lost
        if self._transport is None:
            raise ConnectionLost(f"{show_address(self.address)}: the connection is closed")
        loop = asyncio.get_running_loop()
        data = b"".join(hiredis.pack_command(cast(Any, tuple(c))) for c in commands)
        self._transport.write(data)
        deadline = loop.time() + self._timeout
        futures = [loop.create_future() for _ in commands]
        self._waiting.extend((future, deadline) for future in futures)
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._check_deadline)
        return futures

    def close(self) -> None:
        """Close the connection; calls still waiting fail with ``ConnectionLost``."""
        self._fail(ConnectionLost(f"{show_address(self.address)}: the connection was closed"))

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio's callback: the socket is connected."""
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """asyncio's callback: hand every complete reply to the oldest waiting call."""
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except ConnectionLost as lost:
                self._fail(lost)
                return
            if reply is False:
                return
            if not self._waiting:
                self._fail(
                    ConnectionLost(f"{show_address(self.address)} sent a reply nobody asked")
                )
                return
            future, _ = self._waiting.popleft()
            if not future.done():  # a cancelled caller's reply is dropped
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        """asyncio's callback: the connection ended."""
        if exc is None or isinstance(exc, ConnectionResetError | BrokenPipeError):
            why = f": {exc}" if exc is not None else ""
            lost: ConnectionLost = ConnectionClosed(
                f"{show_address(self.address)} closed the connection{why}"
            )
        else:  # a timeout, an unreachable host: not the peer closing it
            lost = ConnectionLost(f"{show_address(self.address)}: {exc}")
        self._fail(lost)

    # -- failure ----------------------------------------------------------------------------

    def _fail(self, error: ConnectionLost) -> None:
        """Fail every waiting call with ``error`` and close the transport (idempotent)."""
        if self._lost is None:
            self._lost = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(self._lost)
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()

    def _check_deadline(self) -> None:
        """The timer: fail the connection if the oldest reply owed is overdue, else wait
        for the next deadline (one timer per connection, not one per call)."""
        self._timer = None
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        deadline = self._waiting[0][1]
        if loop.time() >= deadline:
            self._fail(
                ConnectionLost(
                    f"{show_address(self.address)} did not answer within {self._timeout} s"
                )
            )
            return
        self._timer = loop.call_at(deadline, self._check_deadline)


class AsyncEndpoint(Health):
    """A server the async library calls: a cache node (``multiplex``: one connection shared
    by every task, calls pipelined on it) or the agent (a connection per call in flight,
    reused: ``PIN`` and ``COMMITLSN`` wait on the agent, and a shared connection would hold
    every reply after theirs). Up/down as :class:`~txcache._resp.Health` decides: while it
    is down a task of the loop that marked it probes it. Nothing is connected until the
    first call."""

    def __init__(
        self,
        address: str,
        *,
        role: str,
        password: str | None = None,
        connect_timeout: float = 0.25,
        timeout: float = 1.0,
        multiplex: bool = True,
        tls_ca: str | None = None,
        greeting: Greeting | None = None,
    ) -> None:
        """``address`` is ``host:port``, or ``rediss://host:port`` for TLS checked against
        ``tls_ca`` (:func:`~txcache._resp.tls_context`); ``role`` names the server in
        logs; ``greeting`` what each new connection sends first."""
        super().__init__(address, role=role)
        self._target = parse_address(address)
        self._tls = tls_context(tls_ca) if uses_tls(address) else None
        self._password = password
        self._connect_timeout = connect_timeout
        self.timeout = timeout
        self._multiplex = multiplex
        self._greeting = greeting
        self._shared: AsyncRespConnection | None = None
        self._connecting: asyncio.Lock | None = None
        self._idle: list[AsyncRespConnection] = []
        self._prober: asyncio.Task[None] | None = None
        self._closed = False

    async def call(self, *command: Argument) -> Any:
        """One command; ``None`` when the server is down or the connection failed (it is
        then marked down). Error replies are returned as :class:`ReplyError`."""
        replies = await self.pipeline((command,))
        return None if replies is None else replies[0]

    async def run(self, command: Command[T]) -> T | ReplyError | None:
        """``command``'s decoded reply, as :func:`~txcache._resp.read_reply` gives it."""
        return read_reply(command, await self.call(*command.arguments))

    async def send_later(
        self, command: Command[T], on_reply: Callable[[T | ReplyError | None], None]
    ) -> None:
        """Send ``command`` without waiting for its reply: ``on_reply`` gets it decoded, as
        :meth:`run` returns it, when it arrives (``None`` if the connection is lost first),
        and ``None`` at once when the server is down or the endpoint closed. A node's
        connection is shared, so the caller goes on while the server answers; an agent's
        (a connection per call) is waited on."""
        if not self._multiplex:
            answer = await self.run(command)
            on_reply(answer)
            return
        if not self.is_up() or self._closed:
            on_reply(None)
            return
        connection = self._shared
        try:
            if connection is None or not connection.usable:
                connection = None
                connection = await self._connection()
            (future,) = connection.send([command.arguments])
        except ConnectionLost as error:
            self._lost(connection, error)
            on_reply(None)
            return

        def arrived(done: asyncio.Future[Any]) -> None:
            reply = None if done.cancelled() or done.exception() else done.result()
            result = read_reply(command, reply)  # out of on_reply's context: T as it is
            on_reply(result)

        future.add_done_callback(arrived)
        if self._closed:  # closed while connecting: nothing would close this one later
            connection.close()

    def settle(self) -> None:
        """Nothing to do: replies not waited for are handed over as they arrive (the sync
        endpoint reads them here)."""

    async def pipeline(self, commands: Sequence[Sequence[Argument]]) -> list[Any] | None:
        """Several commands in one write, their replies in order; ``None`` as :meth:`call`
        gives it, and once the endpoint is closed (a node the ring no longer names, used by
        a task that began before)."""
        if not self.is_up() or self._closed:
            return None
        connection = self._shared  # the common case: a node's connection, already open
        retried = False
        while True:
            try:
                if connection is None or not connection.usable:
                    connection = None
                    connection = await self._connection()
                if len(commands) == 1:  # no gather for one reply: the hit's path
                    replies = [await connection.call(*commands[0])]
                else:
                    replies = await connection.pipeline(commands)
                break
            except ConnectionClosed as error:
                # Closed by the server while idle (it restarted, or an agent changed terms)
                # is no sign it is down: once more, on a new connection, which then says.
                if retried or not self.is_up():
                    self._lost(connection, error)
                    return None
                retried, connection = True, None
            except ConnectionLost as error:
                self._lost(connection, error)
                return None
            except BaseException:
                # Cancelled while a reply is owed: a shared connection drops it when it
                # comes; an exclusive one would make its next user wait for it, so it goes.
                if connection is not None and not self._multiplex:
                    connection.close()
                raise
        if self._closed:  # closed meanwhile: nothing would close this connection later
            connection.close()
        elif not self._multiplex:
            self._give_back(connection)
        self._note_up()
        return replies

    def close(self) -> None:
        """Close every connection (calls waiting on them fail, and return ``None``) and
        stop probing."""
        self._closed = True
        prober, self._prober = self._prober, None
        if prober is not None:
            prober.cancel()
        self._drop_connections()

    def _drop_connections(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()
        while self._idle:
            self._idle.pop().close()

    async def _connection(self) -> AsyncRespConnection:
        if not self._multiplex:
            while self._idle:
                connection = self._idle.pop()
                if connection.usable:
                    return connection
            return await self._open()
        shared = self._shared
        if shared is not None and shared.usable:
            return shared
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:  # one connection, however many tasks call at once
            shared = self._shared
            if shared is None or not shared.usable:
                if not self.is_up():  # a task before this one found it down: no new try
                    raise ConnectionLost(f"{show_address(self._target)} is down")
                shared = self._shared = await self._open()
        return shared

    async def _open(self) -> AsyncRespConnection:
        return await AsyncRespConnection.open(
            self._target,
            password=self._password,
            connect_timeout=self._connect_timeout,
            timeout=self.timeout,
            tls=self._tls,
            greeting=self._greeting,
        )

    def refused(self, why: str) -> None:
        """The server refused to serve this client after it connected (a cache node now
        following another database's stream): down, its connections dropped, probed as
        after a lost connection (and its greeting refused again until that changes)."""
        self._lost(None, ConnectionLost(f"{show_address(self._target)} {why}"))

    def _give_back(self, connection: AsyncRespConnection) -> None:
        if connection.usable and len(self._idle) < _MAX_IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            connection.close()

    def _lost(self, connection: AsyncRespConnection | None, error: ConnectionLost) -> None:
        if connection is not None:
            connection.close()
            if connection is self._shared:
                self._shared = None
        if self._note_down(error) and not self._closed:  # a closed endpoint is not probed
            self._drop_connections()
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def _probe(self) -> None:
        """Until the server answers ``PING``: wait, try (cancelled by :meth:`close`)."""
        while True:
            await asyncio.sleep(self._probe_delay())
            try:
                connection = await self._open()
            except ConnectionLost:
                continue
            try:
                reply = await connection.call("PING")
            except ConnectionLost:
                continue  # the connection closed itself
            except asyncio.CancelledError:  # close() stops the probe
                connection.close()
                raise
            if isinstance(reply, ReplyError):  # not what it was taken for: stay down
                connection.close()
                continue
            if self._multiplex and self._shared is None:
                self._shared = connection
            else:
                self._give_back(connection)
            self._prober = None
            self._note_up()
            return
