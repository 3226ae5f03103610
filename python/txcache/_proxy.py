"""A TCP proxy in a process of its own, for cutting one part off the network (tests, the
checker's faults): ``SIGSTOP`` it and every connection through it goes silent with both
ends still open (a partition: nothing is refused, nothing arrives), ``SIGCONT`` heals it,
killing it closes every connection.

Run as ``python -m txcache._proxy TARGET_HOST TARGET_PORT``; it listens on a free port of
127.0.0.1 and prints ``listening on PORT`` once ready. :class:`TcpProxy` does that.
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


async def _serve(target_host: str, target_port: int) -> None:
    async def relay(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, server_writer), _pipe(server_reader, client_writer)
        )

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    async with server:
        await server.serve_forever()


class TcpProxy:
    """The proxy as a child process: ``port`` relays to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        """Start it and wait until it listens."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "txcache._proxy", target_host, str(target_port)],
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

    def stop(self) -> None:
        """End it and every connection through it."""
        self.heal()
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], int(sys.argv[2])))
