"""TLS on every connection that crosses a network: the agent's SQL sessions and replication
stream to PostgreSQL (``sslmode`` up to ``verify-full``), and the nodes' and the agent's
RESP endpoints (``--tls-cert``/``--tls-key``) as the agent and the library reach them
(``rediss://``). Against Debian's PostgreSQL 15 (the embedded build has no SSL) with a test
CA made by trustme; refusals must say what is wrong.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import trustme

import txcache
from library_fixtures import LibraryStack
from postgres_fixtures import fresh_database
from txcache import _protocol as protocol
from txcache._resp import ConnectionLost, tls_context
from txcache._setup import setup_database
from txcache.aio._resp import AsyncRespConnection
from txcache.stack import (
    AgentProcess,
    EmbeddedPostgres,
    NodeProcess,
    ProcessStartError,
    TlsFiles,
)


@dataclass(frozen=True)
class Certificates:
    """The test CA's files: ``parts`` for the nodes and the agent (naming 127.0.0.1),
    ``postgres_cert``/``postgres_key`` for the database (naming ``localhost`` only), and
    ``other_ca``, a CA that signed none of them."""

    parts: TlsFiles
    postgres_cert: Path
    postgres_key: Path
    other_ca: Path


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(directory / "other-ca.pem"))
    paths = {}
    for name, hosts in (("parts", ("127.0.0.1", "localhost")), ("postgres", ("localhost",))):
        issued = ca.issue_cert(*hosts)
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        paths[name] = (cert, key)
    return Certificates(
        parts=TlsFiles(cert=paths["parts"][0], key=paths["parts"][1], ca=directory / "ca.pem"),
        postgres_cert=paths["postgres"][0],
        postgres_key=paths["postgres"][1],
        other_ca=directory / "other-ca.pem",
    )


@pytest.fixture(scope="module")
def ssl_postgres(
    certificates: Certificates, system_postgres_bin: Path
) -> Iterator[EmbeddedPostgres]:
    files = (certificates.postgres_cert, certificates.postgres_key)
    with EmbeddedPostgres(bin_dir=system_postgres_bin, ssl=files) as server:
        yield server


@pytest.fixture
def ssl_database(ssl_postgres: EmbeddedPostgres) -> Iterator[str]:
    """A fresh database of the SSL server; its DSN names the host by IP (127.0.0.1)."""
    yield from fresh_database(ssl_postgres)


def tls_dsn(dsn: str, *, host: str, sslmode: str, root: Path | None) -> str:
    """``dsn`` reaching the server by ``host`` with TLS settings."""
    dsn = dsn.replace("host=127.0.0.1", f"host={host}")
    return f"{dsn} sslmode={sslmode}" + (f" sslrootcert={root}" if root else "")


def agent_refusal(dsn: str) -> str:
    """The log of an agent that was expected not to start against ``dsn``."""
    with pytest.raises(ProcessStartError) as refused:
        AgentProcess(dsn, ["127.0.0.1:1"], start_timeout=20).stop()
    return str(refused.value)


@txcache.cacheable
def item_price(item_id: int) -> int:
    row = txcache.query_one("SELECT price FROM items WHERE id = %s", (item_id,))
    assert row is not None
    return int(row[0])


def test_everything_runs_over_tls_with_verified_certificates(
    certificates: Certificates, ssl_database: str
) -> None:
    dsn = tls_dsn(ssl_database, host="localhost", sslmode="verify-full", root=certificates.parts.ca)
    with LibraryStack(dsn, tls=certificates.parts) as lib:
        assert all(address.startswith("rediss://") for address in lib.node_addresses)
        lib.caught_up()  # the stream reached both nodes: replication and the agent's links
        lib.fresh_pins()  # the library's pins came from the agent's TLS endpoint
        with lib.cache.read_only(staleness=60):
            assert item_price(1) == 10
        with lib.cache.read_only(staleness=60) as tx:
            assert item_price(1) == 10
            assert tx.snapshot is None, "served from a node over TLS"
        lib.commit("UPDATE items SET price = 11 WHERE id = 1")
        with lib.cache.read_only(staleness=0):
            assert item_price(1) == 11, "the invalidation came through"
        sessions = lib.admin.execute(
            "SELECT a.backend_type, a.application_name, s.ssl FROM pg_stat_activity a "
            "JOIN pg_stat_ssl s USING (pid) WHERE a.application_name LIKE 'txcache-agent%' "
            "OR a.backend_type = 'walsender'"
        ).fetchall()
    kinds = {backend for backend, _, _ in sessions}
    assert {"walsender", "client backend"} <= kinds, sessions
    assert all(ssl for _, _, ssl in sessions), f"a session without TLS: {sessions}"


def test_verify_full_refuses_a_certificate_for_another_name(
    certificates: Certificates, ssl_database: str
) -> None:
    setup_database(ssl_database)
    root = certificates.parts.ca
    by_ip = tls_dsn(ssl_database, host="127.0.0.1", sslmode="verify-full", root=root)
    log = agent_refusal(by_ip)
    assert "cannot connect to PostgreSQL" in log, log
    assert 'not valid for name "127.0.0.1"' in log, log
    assert "sslrootcert" in log, log


def test_verify_ca_is_refused_saying_what_to_use(
    certificates: Certificates, ssl_database: str
) -> None:
    for sslmode in ("verify-ca", "require"):
        dsn = tls_dsn(ssl_database, host="localhost", sslmode=sslmode, root=certificates.parts.ca)
        assert "use sslmode=verify-full" in agent_refusal(dsn), sslmode


def test_a_certificate_from_another_ca_is_refused(
    certificates: Certificates, ssl_database: str
) -> None:
    setup_database(ssl_database)
    root = certificates.other_ca
    dsn = tls_dsn(ssl_database, host="localhost", sslmode="verify-full", root=root)
    log = agent_refusal(dsn)
    assert "UnknownIssuer" in log, log


def test_a_verify_mode_without_a_ca_file_says_what_to_add(ssl_database: str) -> None:
    dsn = tls_dsn(ssl_database, host="localhost", sslmode="verify-full", root=None)
    assert "sslrootcert=" in agent_refusal(dsn)


def test_require_encrypts_without_a_ca(ssl_database: str) -> None:
    setup_database(ssl_database)
    dsn = tls_dsn(ssl_database, host="127.0.0.1", sslmode="require", root=None)
    with AgentProcess(dsn, ["127.0.0.1:1"]), psycopg.connect(ssl_database) as admin:
        encrypted = admin.execute(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.backend_type = 'walsender'"
        ).fetchall()
    assert encrypted == [(True,)], encrypted


def test_a_tls_node_serves_only_clients_that_trust_it(certificates: Certificates) -> None:
    files = certificates.parts
    with NodeProcess("--tls-cert", str(files.cert), "--tls-key", str(files.key)) as node:
        address = f"rediss://{node.address}"
        with protocol.connect(address, tls_ca=str(files.ca), timeout=5) as connection:
            assert connection.call("PING") == b"PONG"
        with pytest.raises(ConnectionLost), protocol.connect(node.address, timeout=2) as plain:
            plain.call("PING")
        with pytest.raises(ConnectionLost, match="tls_ca"):
            protocol.connect(address, tls_ca=str(certificates.other_ca), timeout=5)

        async def ping_async() -> object:
            connection = await AsyncRespConnection.open(
                (node.host, node.port), tls=tls_context(str(files.ca)), timeout=5
            )
            try:
                return await connection.call("PING")
            finally:
                connection.close()

        assert asyncio.run(ping_async()) == b"PONG"
        node.wait_for_log("TLS handshake failed")


def test_an_agent_refuses_a_node_it_cannot_verify(
    certificates: Certificates, ssl_database: str
) -> None:
    setup_database(ssl_database)
    files = certificates.parts
    with NodeProcess("--tls-cert", str(files.cert), "--tls-key", str(files.key)) as node:
        agent = AgentProcess(
            ssl_database,
            [f"rediss://{node.address}"],
            "--node-tls-ca",
            str(certificates.other_ca),
        )
        try:
            agent.wait_for_log(
                "TLS handshake with", "the agent to report the node's certificate", timeout=20
            )
        finally:
            agent.stop()
    agent.wait_for_log("--node-tls-ca")


def txcache_status(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``txcache status`` with ``settings`` as its only ``TXCACHE_*`` variables."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TXCACHE_")}
    return subprocess.run(
        [sys.executable, "-m", "txcache", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, **settings},
        check=False,
    )


def test_status_checks_tls_endpoints_against_the_ca_of_tls_ca(
    certificates: Certificates, ssl_database: str
) -> None:
    with LibraryStack(ssl_database, tls=certificates.parts) as lib:
        settings = lib.settings()
        assert settings["TXCACHE_TLS_CA"] == str(certificates.parts.ca)
        endpoints = [*lib.node_addresses, lib.agent_address]
        assert all(address.startswith("rediss://") for address in endpoints)
        without_ca = {name: value for name, value in settings.items() if name != "TXCACHE_TLS_CA"}
        by_variable = txcache_status(**settings)
        by_option = txcache_status("--tls-ca", str(certificates.parts.ca), **without_ca)
        other_ca = txcache_status("--tls-ca", str(certificates.other_ca), **settings)
    for result in (by_variable, by_option):
        assert result.returncode == 0, result.stdout + result.stderr
        assert all(f"{address}: up" in result.stdout for address in endpoints), result.stdout
        assert "3 of 3 endpoint(s) up; all reachable" in result.stdout
    assert other_ca.returncode == 1  # --tls-ca wins over TXCACHE_TLS_CA
    for address in endpoints:
        [line] = [line for line in other_ca.stdout.splitlines() if f" {address}: " in line]
        assert "UNREACHABLE" in line, line
        assert "CERTIFICATE_VERIFY_FAILED" in line, line
        assert line.endswith("give txcache status --tls-ca the CA file, or set TXCACHE_TLS_CA")


def test_status_refuses_a_tls_ca_it_cannot_read(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    result = txcache_status("--nodes", "rediss://127.0.0.1:1", TXCACHE_TLS_CA=str(missing))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "txcache status: error: argument --tls-ca: the value must be the path of a readable "
        f"file, not {str(missing)!r}: No such file or directory"
    )
