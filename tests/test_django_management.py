"""The management commands and the system checks of ``txcache.django``, on a real stack:
``txcache_setup`` and ``txcache_status`` do what ``txcache setup`` and ``txcache status`` do
with the connection settings of ``TXCACHE`` and ``DATABASES``; each check fires on the
misconfiguration it names, and none on a sound one."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db.backends.postgresql import psycopg_any
from django.db.backends.signals import connection_created
from django.test import override_settings
from psycopg.conninfo import conninfo_to_dict

from django_fixtures import DjangoShop, start_shop
from txcache.django import conf
from txcache.stack import EmbeddedPostgres, free_port

ENGINE = "txcache.django.db"
MIDDLEWARE = "txcache.django.middleware.TransactionMiddleware"
SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"


@pytest.fixture(scope="module")
def shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    yield from start_shop(postgres)


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def test_txcache_setup_reports_a_prepared_database(shop: DjangoShop) -> None:
    checked = run("txcache_setup", "--check").splitlines()
    assert checked[0].startswith("txcache setup --check: ")
    assert any(line.split()[:2] == ["ok", "publication"] for line in checked)
    assert checked[-1].startswith("everything was already in place")
    again = run("txcache_setup").splitlines()  # idempotent
    assert again[-1].startswith("everything was already in place")


def test_txcache_setup_check_exits_3_when_a_step_is_missing(shop: DjangoShop) -> None:
    with pytest.raises(CommandError) as raised:
        run("txcache_setup", "--check", "--slot", "not_created")
    assert raised.value.returncode == 3


def test_txcache_status_reports_the_nodes_and_the_agent(shop: DjangoShop) -> None:
    text = run("txcache_status")
    for node in shop.node_addresses:
        assert f"node {node}: up" in text
    assert f"agent {shop.agent_address}: up" in text
    assert text.rstrip().endswith("endpoint(s) up; all reachable")
    report = json.loads(run("txcache_status", "--json"))
    assert report["ok"] is True
    assert [node["address"] for node in report["nodes"]] == shop.node_addresses


def test_txcache_status_fails_on_a_node_that_is_down(shop: DjangoShop) -> None:
    dead = f"127.0.0.1:{free_port()}"
    nodes = [*shop.node_addresses, dead]
    with (
        override_settings(TXCACHE={**settings.TXCACHE, "NODES": nodes}),
        pytest.raises(CommandError) as raised,
    ):
        run("txcache_status", "--timeout", "0.5")
    assert raised.value.returncode == 1


def test_the_dsn_is_the_database_s_with_django_s_encoding_and_time_zone(shop: DjangoShop) -> None:
    derived = conninfo_to_dict(conf.library_settings(conf.txcache_settings()).dsn)
    assert derived["dbname"] == settings.DATABASES["default"]["NAME"]
    assert (derived["client_encoding"], derived["options"]) == ("UTF8", "-c TimeZone=UTC")
    with shop.cache.pool.connection() as pooled:
        assert pooled.info.parameter_status("TimeZone") == "UTC"
    given = conf.TxcacheSettings(library={"dsn": "dbname=other options='-c search_path=app'"})
    explicit = conninfo_to_dict(conf.library_settings(given).dsn)
    assert explicit["options"] == "-c search_path=app -c TimeZone=UTC"
    assert (explicit["dbname"], explicit["client_encoding"]) == ("other", "UTF8")


def messages(**changes: Any) -> list[str]:
    """The ids of the txcache checks' messages with ``changes`` to the settings."""
    with override_settings(**changes):
        return sorted(message.id for message in run_checks(tags=["txcache"]))


def databases(monkeypatch: pytest.MonkeyPatch, **default: Any) -> None:
    """``DATABASES`` with ``default`` changed (as the checks read it; the connections keep
    theirs: Django's override_settings warns for DATABASES)."""
    changed = {alias: dict(each) for alias, each in settings.DATABASES.items()}
    changed["default"].update(default)
    monkeypatch.setattr(settings, "DATABASES", changed)


def test_a_sound_configuration_passes_every_check(shop: DjangoShop) -> None:
    assert messages() == []


def test_the_txcache_setting_is_checked(shop: DjangoShop) -> None:
    current = settings.TXCACHE
    assert messages(TXCACHE=None) == ["txcache.E001"]
    assert messages(TXCACHE={**current, "NODE": "x:1"}) == ["txcache.E001"]
    assert messages(TXCACHE={**current, "TOKEN_MAX_AGE": 0}) == ["txcache.E001"]
    assert messages(TXCACHE={**current, "STALENESS": -1}) == ["txcache.E008"]
    assert messages(TXCACHE={**current, "NODES": "nowhere"}) == ["txcache.E008"]
    unconnected = {key: value for key, value in current.items() if key != "AGENT"}
    assert messages(TXCACHE=unconnected) == ["txcache.W001"]
    assert messages(TXCACHE={**unconnected, "MODE": "bypass"}) == []
    name = settings.DATABASES["default"]["NAME"]
    assert messages(TXCACHE={**current, "DSN": f"host=127.0.0.1 dbname={name}"}) == []
    assert messages(TXCACHE={**current, "DSN": "dbname=elsewhere"}) == ["txcache.E011"]


def test_a_txcache_cache_on_bad_nodes_is_a_check_s_error_not_a_traceback(shop: DjangoShop) -> None:
    """Django's own cache checks make every cache: a TxcacheCache on a malformed NODES must
    let the checks run and report it (txcache.E008)."""
    caches = {"default": {"BACKEND": "txcache.django.cache.TxcacheCache"}}
    with override_settings(TXCACHE={**settings.TXCACHE, "NODES": "nonsense"}, CACHES=caches):
        found = sorted(message.id for message in run_checks())
    assert "txcache.E008" in found, found


def test_the_database_is_checked(shop: DjangoShop, monkeypatch: pytest.MonkeyPatch) -> None:
    current = settings.TXCACHE
    assert messages(TXCACHE={**current, "DATABASE": "missing"}) == ["txcache.E002"]
    assert messages(TXCACHE={**current, "DATABASE": "plain"}) == ["txcache.E003", "txcache.E004"]
    databases(monkeypatch, AUTOCOMMIT=False, OPTIONS={"assume_role": "shopper"})
    assert messages() == ["txcache.E006", "txcache.E007"]


def test_psycopg_2_is_refused(shop: DjangoShop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg_any, "is_psycopg3", False)
    assert messages() == ["txcache.E005"]


def test_the_middleware_is_checked(shop: DjangoShop, monkeypatch: pytest.MonkeyPatch) -> None:
    order = list(settings.MIDDLEWARE)
    below_sessions = [SESSIONS, MIDDLEWARE, *(m for m in order if m not in (SESSIONS, MIDDLEWARE))]
    assert messages(MIDDLEWARE=below_sessions) == ["txcache.W002"]
    assert messages(SESSION_ENGINE="django.contrib.sessions.backends.signed_cookies",
                    MIDDLEWARE=below_sessions) == []  # fmt: skip
    assert messages(SESSION_SAVE_EVERY_REQUEST=True) == ["txcache.E009"]
    databases(monkeypatch, ATOMIC_REQUESTS=True)
    assert messages() == ["txcache.W003"]
    assert messages(MIDDLEWARE=[m for m in order if m != MIDDLEWARE]) == []


def test_manage_py_check_stops_on_an_error(shop: DjangoShop) -> None:
    with (
        override_settings(TXCACHE={**settings.TXCACHE, "DATABASE": "plain"}),
        pytest.raises(SystemCheckError, match=r"txcache\.E003"),
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


class Replica:
    """A database router that sends reads to a replica."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


class AnswerErrors:
    """A middleware that answers view exceptions."""

    def process_exception(self, request: Any, exception: Exception) -> None:
        return None


def test_a_middleware_answering_exceptions_below_it_is_warned_about(shop: DjangoShop) -> None:
    order = list(settings.MIDDLEWARE)
    assert messages(MIDDLEWARE=[*order, f"{__name__}.AnswerErrors"]) == ["txcache.W005"]
    assert messages(MIDDLEWARE=[f"{__name__}.AnswerErrors", *order]) == []  # above: seen


def set_tenant_schema(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A ``connection_created`` receiver as a tenant package writes it."""


def test_a_connection_created_receiver_is_warned_about(shop: DjangoShop) -> None:
    connection_created.connect(set_tenant_schema)
    try:
        found = run_checks(tags=["txcache"])
    finally:
        connection_created.disconnect(set_tenant_schema)
    assert [message.id for message in found] == ["txcache.W006"]
    assert f"{__name__}.set_tenant_schema" in found[0].msg
    assert messages() == []


def test_database_routers_are_warned_about(shop: DjangoShop) -> None:
    assert messages(DATABASE_ROUTERS=[f"{__name__}.Replica"]) == ["txcache.W004"]
