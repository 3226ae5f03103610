"""A lean RESP2 connection for the library's hot path.

A cache hit is one round trip, so the client is kept as thin as a correct one can be: one
socket with ``TCP_NODELAY``, commands packed and replies parsed by hiredis (the C parser
redis-py uses), no connection-pool machinery. Error replies come back as
:class:`ReplyError` values, not exceptions, so a caller decides what an error means; a
socket failure raises :class:`ConnectionLost`. Whether a server is up (:class:`Health`) and
what a reply means to the library (:func:`read_reply`) are decided here once, for this
transport and the async one (:mod:`txcache.aio._resp`).

The commands themselves (arguments and typed replies) are :mod:`txcache._protocol`'s: a
:class:`Command` pairs a request with the decoder of its reply, and both transports here run
it — :meth:`RespConnection.run` raising on any failure (for tools, the ``txcache`` command
and benches), :meth:`Endpoint.run` never raising for a server's failure (for the library).
"""

from __future__ import annotations

import functools
import logging
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

import hiredis

__all__ = [
    "BadReply",
    "Command",
    "ConnectionClosed",
    "ConnectionLost",
    "Endpoint",
    "Greeting",
    "Health",
    "PasswordRefused",
    "ReplyError",
    "RespConnection",
    "greeting_refused",
    "parse_address",
    "read_reply",
    "tls_context",
    "unreadable",
    "uses_tls",
]

log = logging.getLogger("txcache")

ReplyError = hiredis.ReplyError
_READ_SIZE = 65536
_FIRST_BACKOFF = 0.5
_MAX_BACKOFF = 10.0
_MAX_IDLE_CONNECTIONS = 64
# What a decoder raises when a reply does not have its command's shape (a missing element,
# a nil or a string where a number belongs, bytes that are not UTF-8): decoders unpack
# replies directly instead of checking every element, and the transport turns these into
# BadReply.
_SHAPE_ERRORS = (ValueError, TypeError, IndexError, KeyError, AttributeError)

T = TypeVar("T")


class ConnectionLost(OSError):
    """The peer could not be reached, closed the connection, or did not answer in time."""


class ConnectionClosed(ConnectionLost):
    """The peer closed the connection (end of stream, or a reset) instead of answering.
    On a connection that sat idle this need not mean the server is down: servers close
    their clients' connections when they restart, and an agent when it changes terms."""


class PasswordRefused(ConnectionLost):
    """The server answered ``AUTH`` with an error (a wrong password, or none configured);
    :attr:`reply` is that error reply. A :class:`ConnectionLost`, since the connection is
    closed and the server unusable with these settings."""

    def __init__(self, message: str, reply: ReplyError) -> None:
        """``message`` for logs; ``reply`` the server's error reply to ``AUTH``."""
        super().__init__(message)
        self.reply = reply


class BadReply(ValueError):
    """A reply without the shape its command's contract (docs/protocol.md) gives: the peer
    is not what it was taken for (another server on that port, an older binary)."""


@dataclass(frozen=True, slots=True)
class Command(Generic[T]):
    """One request and how to read its reply; :mod:`txcache._protocol` builds one per
    command (``arguments[0]`` is the command's name)."""

    arguments: tuple[str | bytes | int | float, ...]
    decode: Callable[[Any], T]
    """Turns a reply that is not an error into the command's result; may fail with any of
    the errors a mis-shaped reply causes (:meth:`read` turns them into :class:`BadReply`)."""

    def read(self, reply: Any) -> T:
        """The decoded ``reply``; :class:`BadReply` when it has the wrong shape."""
        try:
            return self.decode(reply)
        except BadReply:
            raise
        except _SHAPE_ERRORS as error:
            name = self.arguments[0]
            raise BadReply(f"unexpected reply to {name!s}: {error}") from error


def read_reply(command: Command[T], reply: Any) -> T | ReplyError | None:
    """What the library's endpoints return for ``reply`` (``None``: no reply, the server is
    down): the decoded reply, or a :class:`ReplyError` for an error reply or one of the
    wrong shape (which says the server cannot serve this command either)."""
    if reply is None or isinstance(reply, ReplyError):
        return reply
    try:
        return command.read(reply)
    except BadReply as error:
        return ReplyError(str(error))


_SCHEMES = {"redis": False, "rediss": True}
"""The schemes an address may start with, and whether each means TLS (redis-py's URLs)."""


def _split_scheme(address: str) -> tuple[bool, str]:
    """Whether ``address`` asks for TLS, and its ``host:port``; ``ValueError`` for a scheme
    other than ``redis://`` and ``rediss://``."""
    text = address.strip()
    scheme, separator, rest = text.partition("://")
    if not separator:
        return False, text
    if scheme not in _SCHEMES:
        raise ValueError(f"unknown scheme in {address!r} (host:port, or rediss://host:port)")
    return _SCHEMES[scheme], rest.rstrip("/")


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6; ``redis://`` or ``rediss://`` before it;
    surrounding spaces ignored) → ``(host, port)``; ``ValueError`` naming the text if
    malformed or the port is not 1…65535."""
    host, colon, port = _split_scheme(address)[1].rpartition(":")
    digits = port.isascii() and port.isdigit()  # int() refuses "²", which isdigit() takes
    if not colon or not host or not digits or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def uses_tls(address: str) -> bool:
    """Whether ``address`` names a server spoken to over TLS (``rediss://host:port``)."""
    return _split_scheme(address)[0]


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """What a TLS connection to a node or the agent trusts: the CAs in ``ca_file`` (PEM),
    or the system's when ``None``; the certificate must name the host connected to. One
    context per file, shared by every connection (loading CAs is the costly part)."""
    return ssl.create_default_context(cafile=ca_file)


Argument = str | bytes | int | float


Greeting = Callable[[], Sequence[Argument] | None]
"""What an endpoint sends on each new connection after ``AUTH`` (``None``: not ready to
connect yet); an error reply refuses the connection (:func:`greeting_refused`)."""


def greeting_refused(address: tuple[str, int], command: Sequence[Any] | None, reply: Any) -> None:
    """Raise :class:`ConnectionLost` when a connection's greeting could not be sent
    (``command`` is ``None``) or ``reply`` refuses it: the server will not serve this
    client (a cache node that follows another database's stream)."""
    where = show_address(address)
    if command is None:
        raise ConnectionLost(
            f"not connecting to {where} yet: the agent has not said which database it follows "
            "(is it running, and does it take the library's password?)"
        )
    if isinstance(reply, ReplyError):
        raise ConnectionLost(f"{where} refused {command[0]}: {reply}")


OnReply = Callable[[Any], None]
"""What gets a reply not waited for (``None`` when the connection was lost first)."""


class RespConnection:
    """One connection to a RESP server (a cache node or the agent). Commands sent with
    :meth:`send_later` are not waited for: their replies are read before the next reply
    this connection reads, or by :meth:`settle`, in the order they were sent."""

    __slots__ = ("_owed", "_reader", "_socket", "_timeout", "address")

    def __init__(
        self,
        address: tuple[str, int],
        *,
        password: str | None = None,
        connect_timeout: float = 1.0,
        timeout: float = 5.0,
        tls: ssl.SSLContext | None = None,
        greeting: Greeting | None = None,
    ) -> None:
        """Connect to ``address`` (over TLS with ``tls``, checking the certificate names
        the host), authenticate and send ``greeting``'s command; raises
        :class:`ConnectionLost`."""
        self.address = address
        self._reader = ReplyReader(address)
        self._owed: deque[OnReply] = deque()
        try:
            self._socket = socket.create_connection(address, timeout=connect_timeout)
            if tls is not None:
                self._socket = tls.wrap_socket(self._socket, server_hostname=address[0])
        except OSError as error:
            raise ConnectionLost(
                f"cannot connect to {show_address(address)}: {tls_hint(error)}"
            ) from error
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.settimeout(timeout)
        self._timeout = timeout
        if password is not None:
            reply = self.call("AUTH", password)
            if isinstance(reply, ReplyError):
                self.close()
                raise PasswordRefused(
                    f"{show_address(address)} refused the password: {reply}", reply
                )
        if greeting is not None:
            command = greeting()
            try:
                greeting_refused(address, command, None if command is None else self.call(*command))
            except ConnectionLost:
                self.close()
                raise

    def __enter__(self) -> RespConnection:
        """The connection itself; leaving the block closes it."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the connection."""
        self.close()

    def run(self, command: Command[T]) -> T:
        """Send ``command`` and return its decoded reply. Raises the server's
        :class:`ReplyError` for an error reply, :class:`BadReply` for a reply of the wrong
        shape and :class:`ConnectionLost` when the connection fails."""
        reply = self.call(*command.arguments)
        if isinstance(reply, ReplyError):
            raise reply
        return command.read(reply)

    def call(self, *command: Argument) -> Any:
        """Send one command and return its reply (a :class:`ReplyError` for ``-ERR``)."""
        self._send(hiredis.pack_command(cast(Any, command)))
        self.settle()
        return self._receive()

    def pipeline(self, commands: Sequence[Sequence[Argument]]) -> list[Any]:
        """Send several commands in one write and return their replies in order."""
        self._send(b"".join(hiredis.pack_command(cast(Any, tuple(c))) for c in commands))
        self.settle()
        return [self._receive() for _ in commands]

    def send_later(self, command: Sequence[Argument], on_reply: OnReply) -> None:
        """Send ``command`` without waiting for its reply: ``on_reply`` gets it when it is
        read (before the next reply, or by :meth:`settle`), or ``None`` if the connection is
        lost first. Raises :class:`ConnectionLost` when the command cannot be sent."""
        self._send(hiredis.pack_command(cast(Any, tuple(command))))
        self._owed.append(on_reply)

    @property
    def owed(self) -> int:
        """How many replies of :meth:`send_later` are not read yet."""
        return len(self._owed)

    def settle(self) -> None:
        """Read every reply still owed to :meth:`send_later` and hand each over; raises
        :class:`ConnectionLost` (after handing ``None`` to each) when the connection fails."""
        while self._owed:
            reply = self._receive()
            self._owed.popleft()(reply)

    def close(self) -> None:
        """Close the socket (idempotent); replies still owed are handed ``None``."""
        self._socket.close()
        while self._owed:
            self._owed.popleft()(None)

    def _send(self, data: bytes) -> None:
        try:
            self._socket.sendall(data)
        except OSError as error:
            self.close()
            raise _connection_error(self.address, error) from error

    def _receive(self) -> Any:
        """The next reply, whole within the timeout: a peer that drips one byte at a time
        cannot hold a call longer by keeping each read short of it."""
        reply = self._next_reply()
        deadline = None
        while reply is False:
            try:
                if deadline is None:  # the common case: one read, at the socket's timeout
                    deadline = time.monotonic() + self._timeout
                else:
                    self._socket.settimeout(_left(deadline, self.address, self._timeout))
                chunk = self._socket.recv(_READ_SIZE)
            except OSError as error:
                self.close()
                raise _connection_error(self.address, error) from error
            if not chunk:
                self.close()
                raise ConnectionClosed(f"{show_address(self.address)} closed the connection")
            self._reader.feed(chunk)
            reply = self._next_reply()
        if deadline is not None:
            self._socket.settimeout(self._timeout)
        return reply

    def _next_reply(self) -> Any:
        """The next whole reply received, else ``False``; a reply that cannot be read loses
        the connection."""
        try:
            return self._reader.gets()
        except ConnectionLost:
            self.close()
            raise


def _connection_error(address: tuple[str, int], error: OSError) -> ConnectionLost:
    """What a failed send or receive means: closed by the peer, or lost otherwise (a
    timeout, an unreachable host)."""
    closed = isinstance(error, (ConnectionResetError, BrokenPipeError))
    return (ConnectionClosed if closed else ConnectionLost)(f"{show_address(address)}: {error}")


def _left(deadline: float, address: tuple[str, int], timeout: float) -> float:
    """The seconds left before ``deadline``; :class:`TimeoutError` (an ``OSError``) when
    none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"the reply took longer than {timeout:g} s")
    return left


MAX_REPLY_BYTES = 513 * 1024 * 1024
"""The most bytes one reply may take before it is whole: a node's largest reply is its bulk
limit (at most 512 MiB) and a few headers. A peer that sends more without finishing the
reply is broken or hostile; its connection is lost rather than buffered without end."""


class ReplyReader:
    """hiredis's reader for one connection, with its failures made :class:`ConnectionLost`
    and the bytes of an unfinished reply bounded by ``limit`` (:data:`MAX_REPLY_BYTES`)."""

    def __init__(self, address: tuple[str, int], limit: int = MAX_REPLY_BYTES) -> None:
        """A reader for replies from ``address`` (named in its errors)."""
        self._address = address
        self._limit = limit
        self._reader = hiredis.Reader()
        self._unfinished = 0  # bytes fed since the last whole reply

    def feed(self, data: bytes) -> None:
        """Add bytes received from the peer."""
        self._reader.feed(data)
        self._unfinished += len(data)

    def gets(self) -> Any:
        """The next whole reply, else ``False``; :class:`ConnectionLost` when the bytes fed
        cannot be read (:func:`unreadable`) or an unfinished reply took more than the limit."""
        try:
            reply = self._reader.gets()
        except Exception as error:  # MemoryError, TypeError too: see unreadable()
            raise unreadable(self._address, error) from error
        if reply is not False:
            self._unfinished = self._reader.len()  # what is left belongs to the next replies
        elif self._unfinished > self._limit:
            raise ConnectionLost(
                f"{show_address(self._address)} sent more than {self._limit} bytes without "
                "finishing a reply (more than any txcache server's reply): a broken or hostile "
                "peer"
            )
        return reply


def unreadable(address: tuple[str, int], error: Exception) -> ConnectionLost:
    """What a reply hiredis could not read makes of the connection: lost. Bad framing is a
    ``ProtocolError``; an array claiming billions of elements a ``MemoryError``, a RESP3
    map keyed by an array a ``TypeError`` — a broken or hostile peer, never the
    application's error: the server counts as down and the call goes on without it."""
    what = "bad RESP" if isinstance(error, hiredis.ProtocolError) else "an unreadable reply"
    return ConnectionLost(f"{show_address(address)} sent {what}: {type(error).__name__}: {error}")


def show_address(address: tuple[str, int]) -> str:
    """``(host, port)`` as ``host:port``, for messages."""
    return f"{address[0]}:{address[1]}"


def tls_hint(error: OSError) -> str:
    """``error`` for a message, with what to check when it is a refused certificate."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"{error} (is tls_ca the CA that signed the server's --tls-cert, and does the "
            "certificate name this host?)"
        )
    return str(error)


class Health:
    """Whether a server the library calls is up, shared by the sync :class:`Endpoint` and
    the async one (no I/O). A failure marks it *down*: from then on calls return ``None`` at
    once, and only a probe in the background (a thread, or a task) calls it again, after
    0.5 s, then backing off to 10 s, until it answers. So a server that hangs (stopped,
    or its host unreachable) costs the calls in flight one timeout, once: no request ever
    waits on a server known to be down."""

    def __init__(self, address: str, *, role: str) -> None:
        """``address`` is ``host:port``; ``role`` names the server in logs."""
        self.address = address
        self.role = role
        self._lock = threading.Lock()
        self._down = False
        self._backoff = _FIRST_BACKOFF

    def __repr__(self) -> str:
        state = "up" if self.is_up() else "down"
        return f"{type(self).__name__}({self.address!r}, {state})"

    def is_up(self) -> bool:
        """Whether calls are being made (it is not down, waiting for a probe to answer)."""
        return not self._down

    def _note_down(self, error: BaseException) -> bool:
        """Mark the server down after ``error``; ``False`` if it was down already (another
        caller noted the same failure), else the caller drops its connections and starts
        the probe."""
        with self._lock:
            if self._down:
                return False
            self._down = True
            self._backoff = _FIRST_BACKOFF
        log.warning(
            "%s %s is unreachable (%s); the library works without it (reads go to the "
            "database) and checks it in the background, first in %.1f s",
            self.role,
            self.address,
            error,
            _FIRST_BACKOFF,
        )
        return True

    def _note_up(self) -> None:
        """A call or the probe succeeded: calls are made again."""
        if self._down:
            with self._lock:
                self._down = False
            log.warning("%s %s answers again; the library uses it", self.role, self.address)

    def _probe_delay(self) -> float:
        """Seconds until the probe's next attempt: 0.5, then doubling to 10."""
        with self._lock:
            delay, self._backoff = self._backoff, min(self._backoff * 2, _MAX_BACKOFF)
        return delay


class Endpoint(Health):
    """A server the library calls (a cache node, the agent): idle connections for reuse and
    whether it is up (:class:`Health`); while it is down a daemon thread probes it."""

    def __init__(
        self,
        address: str,
        *,
        role: str,
        password: str | None = None,
        connect_timeout: float = 0.25,
        timeout: float = 1.0,
        tls_ca: str | None = None,
        greeting: Greeting | None = None,
    ) -> None:
        """``address`` is ``host:port``, or ``rediss://host:port`` for TLS checked against
        ``tls_ca`` (:func:`tls_context`); ``role`` names the server in logs; ``greeting``
        what each new connection sends first. Nothing is connected until the first call."""
        super().__init__(address, role=role)
        self.timeout = timeout
        self._target = parse_address(address)
        self._options: dict[str, Any] = {
            "password": password,
            "connect_timeout": connect_timeout,
            "timeout": timeout,
            "tls": tls_context(tls_ca) if uses_tls(address) else None,
            "greeting": greeting,
        }
        self._idle: list[RespConnection] = []
        self._closed = threading.Event()

    def call(self, *command: Argument) -> Any:
        """One command; ``None`` when the server is down, the connection failed (it is
        then marked down) or the endpoint is closed (a node the ring no longer names, used
        by a transaction that began before). Error replies are returned as
        :class:`ReplyError`."""
        if not self.is_up() or self._closed.is_set():
            return None
        try:
            connection, reply = self._exchange(command)
        except ConnectionLost as error:
            self._mark_down(error)
            return None
        self._keep(connection)
        self._note_up()
        return reply

    def _exchange(self, command: Sequence[Argument]) -> tuple[RespConnection, Any]:
        """``command``'s reply, and the connection that carried it: an idle one, else a
        new one. An idle connection the server closed meanwhile (it restarted, or an agent
        changed terms) is no sign the server is down: the command goes once more, on a new
        connection, which then says."""
        try:
            idle = self._idle.pop()
        except IndexError:
            pass
        else:
            try:
                return idle, idle.call(*command)
            except ConnectionClosed:
                self._drop_idle()  # made before the server closed them too
        connection = RespConnection(self._target, **self._options)
        return connection, connection.call(*command)

    def send_later(
        self, command: Command[T], on_reply: Callable[[T | ReplyError | None], None]
    ) -> None:
        """Send ``command`` without waiting for its reply: ``on_reply`` gets it decoded, as
        :meth:`run` returns it, once it is read — before the connection's next reply, or by
        :meth:`settle` — and ``None`` at once when the server is down or the endpoint closed.
        The connection goes back to the idle ones at once, so the caller goes on while the
        server answers."""
        if not self.is_up() or self._closed.is_set():
            on_reply(None)
            return

        def decoded(reply: Any) -> None:
            result = read_reply(command, reply)  # out of on_reply's context: T as it is
            on_reply(result)

        try:
            connection = self._take()
            try:
                connection.send_later(command.arguments, decoded)
            except ConnectionClosed:  # an idle one the server closed: as in _exchange
                self._drop_idle()
                connection = RespConnection(self._target, **self._options)
                connection.send_later(command.arguments, decoded)
        except ConnectionLost as error:
            self._mark_down(error)
            on_reply(None)
            return
        self._keep(connection)

    def settle(self) -> None:
        """Read the replies still owed on idle connections, so that what waits for them
        (a store's outcome) is known within a refresh, however quiet the endpoint."""
        for connection in [c for c in self._idle if c.owed]:
            try:
                self._idle.remove(connection)
            except ValueError:  # another thread took it: its next call reads them
                continue
            try:
                connection.settle()
            except ConnectionClosed:
                continue  # closed while idle (a restart): the next call says whether it is up
            except ConnectionLost as error:
                self._mark_down(error)
                continue
            self._keep(connection)

    def _keep(self, connection: RespConnection) -> None:
        """Back to the idle connections; closed instead when there are enough or the
        endpoint is closed (the idle list was dropped, and nothing would close it later),
        after reading what it still owes."""
        if len(self._idle) < _MAX_IDLE_CONNECTIONS and not self._closed.is_set():
            self._idle.append(connection)
            # :meth:`close` sets the flag, then drops the idle list: closed by now, this
            # append may have come after that drop, which would then never close it.
            if self._closed.is_set():
                self._drop_idle()
            return
        try:
            connection.settle()
        except ConnectionLost:
            return
        connection.close()

    def run(self, command: Command[T]) -> T | ReplyError | None:
        """``command``'s decoded reply; ``None`` as :meth:`call` gives it, and a
        :class:`ReplyError` for an error reply or one of the wrong shape (which says the
        server cannot serve this command either; the caller logs it as it sees fit)."""
        return read_reply(command, self.call(*command.arguments))

    def close(self) -> None:
        """Read what the idle connections still owe (stores' outcomes), close them and stop
        probing."""
        self.settle()
        self._closed.set()
        self._drop_idle()

    def _drop_idle(self) -> None:
        while self._idle:
            try:
                self._idle.pop().close()
            except IndexError:  # another thread took the last one
                return

    def _take(self) -> RespConnection:
        try:
            return self._idle.pop()
        except IndexError:
            return RespConnection(self._target, **self._options)

    def refused(self, why: str) -> None:
        """The server refused to serve this client after it connected (a cache node now
        following another database's stream): down, its connections dropped, probed as
        after a lost connection (and its greeting refused again until that changes)."""
        self._mark_down(ConnectionLost(f"{show_address(self._target)} {why}"))

    def _mark_down(self, error: Exception) -> None:
        if self._note_down(error):
            self._drop_idle()
            name = f"txcache-probe-{self.address}"
            threading.Thread(target=self._probe, name=name, daemon=True).start()

    def _probe(self) -> None:
        """Until the server answers ``PING`` (or the endpoint is closed): wait, try."""
        while not self._closed.wait(self._probe_delay()):
            try:
                connection = RespConnection(self._target, **self._options)
                reply = connection.call("PING")
            except ConnectionLost:
                continue
            if isinstance(reply, ReplyError):  # not what it was taken for: stay down
                connection.close()
                continue
            self._keep(connection)
            self._note_up()
            return
