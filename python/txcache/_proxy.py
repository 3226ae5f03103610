"""A TCP proxy in a process of its own, for cutting one part off the network (tests, the
checker's faults): ``SIGSTOP`` it and every connection through it goes silent with both
ends still open (a partition: nothing is refused, nothing arrives), ``SIGCONT`` heals it,
killing it closes every connection. Relaying to PostgreSQL (``--postgres``), after
``SIGUSR1`` it holds every new *replication* connection silent once the client has sent
its start-up message, and relays the others: a server that answers SQL but hangs each
replication start.

Run as ``python -m txcache._proxy TARGET_HOST TARGET_PORT [--postgres]``; it listens on a
free port of 127.0.0.1 and prints ``listening on PORT`` once ready. :class:`TcpProxy` does
that.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

__all__ = ["TcpProxy"]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


# The request codes a PostgreSQL client may send before its start-up message.
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
# No start-up message is longer (PostgreSQL refuses those over 10,000 bytes).
_STARTUP_MAX = 10_000


async def _startup(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> tuple[bytes, bool]:
    """Reads the client's messages up to its start-up message, relaying an encryption
    request and the server's one-byte answer: returns what is still to send the server and
    whether the start-up message asks for replication (an encrypted session's is not read)."""
    while True:
        header = await client[0].readexactly(8)
        length = int.from_bytes(header[:4], "big")
        code = int.from_bytes(header[4:], "big")
        if length > _STARTUP_MAX:
            return header, False  # not PostgreSQL's: relayed unread
        if length != 8 or code not in (_SSL_REQUEST, _GSSENC_REQUEST):
            body = await client[0].readexactly(max(length - 8, 0))
            return header + body, b"replication\x00" in body
        server[1].write(header)
        await server[1].drain()
        answer = await server[0].readexactly(1)
        client[1].write(answer)
        await client[1].drain()
        if answer in (b"S", b"G"):
            return b"", False


async def _serve(target_host: str, target_port: int, postgres: bool) -> None:
    holding = False

    def hold_replication() -> None:
        nonlocal holding
        holding = True
        print("holding replication connections", flush=True)

    async def relay(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        pending, replication = b"", False
        try:
            if postgres:
                pending, replication = await _startup(
                    (client_reader, client_writer), (server_reader, server_writer)
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            client_writer.close()
            server_writer.close()
            return
        if replication and holding:
            server_writer.close()
            await client_reader.read()  # silent until the client gives up
            client_writer.close()
            return
        server_writer.write(pending)
        await asyncio.gather(
            _pipe(client_reader, server_writer), _pipe(server_reader, client_writer)
        )

    if postgres:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, hold_replication)
    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    async with server:
        await server.serve_forever()


class TcpProxy:
    """The proxy as a child process: ``port`` relays to ``target_host:target_port``
    (``postgres``: a PostgreSQL server, whose replication starts it can hold)."""

    def __init__(self, target_host: str, target_port: int, *, postgres: bool = False) -> None:
        """Start it and wait until it listens."""
        command = [sys.executable, "-m", "txcache._proxy", target_host, str(target_port)]
        self.process = subprocess.Popen(
            [*command, "--postgres"] if postgres else command,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the TCP proxy did not start: {line!r}")
        self.port = int(line.split()[-1])

    def cut(self) -> None:
        """Freeze every connection through it (a partition)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def heal(self) -> None:
        """Let its connections flow again."""
        os.kill(self.process.pid, signal.SIGCONT)

    def hold_replication(self) -> None:
        """From now on, hold every new replication connection silent after its start-up
        message (a server that answers SQL but hangs each replication start); needs
        ``postgres``."""
        assert self.process.stdout is not None
        os.kill(self.process.pid, signal.SIGUSR1)
        line = self.process.stdout.readline()
        if not line.startswith("holding replication"):
            raise RuntimeError(f"the TCP proxy did not hold replication: {line!r}")

    def stop(self) -> None:
        """End it and every connection through it."""
        self.heal()
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], int(sys.argv[2]), "--postgres" in sys.argv[3:]))
