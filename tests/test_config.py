"""Settings of a cache (``txcache._config.load_settings``): arguments > environment >
``txcache.toml`` > defaults, and a ``ConfigurationError`` naming the setting for anything
missing or malformed. Pure logic: the environment is an explicit mapping, the file lives in
a temporary directory."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

import txcache
from txcache._config import Settings, load_settings
from txcache.errors import ConfigurationError, TxcacheError

DSN = "postgresql:///app"


@pytest.fixture(autouse=True)
def empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty directory, so no stray txcache.toml is read."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_file(text: str, path: Path | None = None) -> Path:
    path = path or Path("txcache.toml")
    path.write_text(text)
    return path


# --- defaults ------------------------------------------------------------------------------


def test_defaults_apply_to_everything_but_the_dsn() -> None:
    settings = load_settings({"dsn": DSN}, {})
    assert settings == Settings(dsn=DSN)
    assert settings.nodes == ()
    assert settings.agent is None
    assert settings.password is None
    assert settings.secret is None
    assert settings.mode == "consistent"
    assert settings.staleness == 1.0
    assert settings.fresh_pin_age == 5.0
    assert settings.pool_size == 10
    assert settings.node_timeout == 1.0
    assert settings.refresh_interval == 0.25


def test_arguments_that_are_none_count_as_not_given() -> None:
    settings = load_settings({"dsn": DSN, "mode": None, "pool_size": None}, {})
    assert settings.mode == "consistent"
    assert settings.pool_size == 10


# --- precedence ----------------------------------------------------------------------------


def test_the_file_overrides_the_defaults() -> None:
    write_file(f'dsn = "{DSN}"\npool_size = 3\nmode = "bypass"\nnodes = ["a:1", "b:2"]\n')
    settings = load_settings({}, {})
    assert settings.dsn == DSN
    assert settings.pool_size == 3
    assert settings.mode == "bypass"
    assert settings.nodes == ("a:1", "b:2")


def test_the_environment_overrides_the_file() -> None:
    write_file('dsn = "dbname=from_file"\npool_size = 3\nstaleness = 2.5\n')
    settings = load_settings({}, {"TXCACHE_DSN": "dbname=from_env", "TXCACHE_POOL_SIZE": "4"})
    assert settings.dsn == "dbname=from_env"
    assert settings.pool_size == 4
    assert settings.staleness == 2.5, "what the environment does not set comes from the file"


def test_arguments_override_the_environment_and_the_file() -> None:
    write_file('dsn = "dbname=from_file"\nagent = "file:1"\nsecret = "file"\n')
    environ = {"TXCACHE_DSN": "dbname=from_env", "TXCACHE_AGENT": "env:1"}
    settings = load_settings({"dsn": "dbname=from_argument", "agent": "arg:1"}, environ)
    assert settings.dsn == "dbname=from_argument"
    assert settings.agent == "arg:1"
    assert settings.secret == "file"


def test_every_setting_can_come_from_the_environment() -> None:
    environ = {
        "TXCACHE_DSN": DSN,
        "TXCACHE_NODES": "n1:7000,n2:7001",
        "TXCACHE_AGENT": "agent:7100",
        "TXCACHE_PASSWORD": "pw",
        "TXCACHE_SECRET": "s3cret",
        "TXCACHE_MODE": "no_consistency",
        "TXCACHE_STALENESS": "0.5",
        "TXCACHE_FRESH_PIN_AGE": "2",
        "TXCACHE_POOL_SIZE": "20",
        "TXCACHE_POOL_TIMEOUT": "7",
        "TXCACHE_NODE_TIMEOUT": "3.5",
        "TXCACHE_REFRESH_INTERVAL": "1e-1",
    }
    assert load_settings({}, environ) == Settings(
        dsn=DSN,
        nodes=("n1:7000", "n2:7001"),
        agent="agent:7100",
        password="pw",
        secret="s3cret",
        mode="no_consistency",
        staleness=0.5,
        fresh_pin_age=2.0,
        pool_size=20,
        pool_timeout=7.0,
        node_timeout=3.5,
        refresh_interval=0.1,
    )


def test_an_empty_environment_variable_counts_as_unset() -> None:
    write_file('dsn = "dbname=from_file"\n')
    settings = load_settings({}, {"TXCACHE_DSN": "", "TXCACHE_POOL_SIZE": ""})
    assert settings.dsn == "dbname=from_file"
    assert settings.pool_size == 10


def test_other_environment_variables_are_ignored() -> None:
    settings = load_settings({}, {"TXCACHE_DSN": DSN, "TXCACHE_COLOUR": "blue", "DSN": "x"})
    assert settings == Settings(dsn=DSN)


def test_the_given_environment_is_used_instead_of_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TXCACHE_DSN", "dbname=from_process")
    monkeypatch.setenv("TXCACHE_POOL_SIZE", "99")
    assert load_settings({}, {"TXCACHE_DSN": DSN}).pool_size == 10


def test_the_process_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXCACHE_DSN", "dbname=from_process")
    monkeypatch.delenv("TXCACHE_CONFIG", raising=False)
    assert load_settings({}).dsn == "dbname=from_process"


def test_txcache_config_names_the_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "conf" / "cache.toml"
    elsewhere.parent.mkdir()
    write_file('dsn = "dbname=from_named_file"\n', elsewhere)
    write_file('dsn = "dbname=from_working_directory"\n')
    settings = load_settings({}, {"TXCACHE_CONFIG": str(elsewhere)})
    assert settings.dsn == "dbname=from_named_file"


# --- nodes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("a:1", ("a:1",)),
        ("a:1,b:2", ("a:1", "b:2")),
        (" a:1 , b:2 ", ("a:1", "b:2")),
        ("a:1,,b:2,", ("a:1", "b:2")),
        (",", ()),
    ],
)
def test_nodes_from_the_environment_are_comma_separated(text: str, nodes: tuple[str, ...]) -> None:
    assert load_settings({}, {"TXCACHE_DSN": DSN, "TXCACHE_NODES": text}).nodes == nodes


def test_nodes_given_as_a_string_or_a_list_become_a_tuple() -> None:
    assert load_settings({"dsn": DSN, "nodes": "a:1, b:2"}, {}).nodes == ("a:1", "b:2")
    assert load_settings({"dsn": DSN, "nodes": ["a:1", "b:2"]}, {}).nodes == ("a:1", "b:2")


def test_nodes_in_the_file_may_be_a_string() -> None:
    write_file(f'dsn = "{DSN}"\nnodes = "a:1,b:2"\n')
    assert load_settings({}, {}).nodes == ("a:1", "b:2")


def test_nodes_that_are_a_number_are_malformed() -> None:
    write_file(f'dsn = "{DSN}"\nnodes = 5\n')
    with pytest.raises(ConfigurationError, match="nodes"):
        load_settings({}, {})


# --- malformed values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pool_size", "ten"),
        ("pool_size", "1.5"),
        ("pool_size", "0x10"),
        ("staleness", "soon"),
        ("fresh_pin_age", "5s"),
        ("node_timeout", "1,5"),
        ("refresh_interval", "--1"),
    ],
)
def test_a_malformed_number_in_the_environment_names_the_setting(name: str, text: str) -> None:
    environ = {"TXCACHE_DSN": DSN, f"TXCACHE_{name.upper()}": text}
    with pytest.raises(ConfigurationError) as raised:
        load_settings({}, environ)
    assert name in str(raised.value)
    assert repr(text) in str(raised.value)


def test_a_malformed_number_in_the_file_names_the_setting() -> None:
    write_file(f'dsn = "{DSN}"\nstaleness = "a while"\n')
    with pytest.raises(ConfigurationError, match="staleness"):
        load_settings({}, {})


def test_a_malformed_number_given_as_an_argument_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="node_timeout"):
        load_settings({"dsn": DSN, "node_timeout": [1]}, {})


def test_a_fractional_pool_size_in_the_file_is_malformed() -> None:
    write_file(f'dsn = "{DSN}"\npool_size = 1.5\n')
    with pytest.raises(ConfigurationError, match="pool_size"):
        load_settings({}, {})


def test_configuration_error_is_a_txcache_error() -> None:
    with pytest.raises(TxcacheError):
        load_settings({}, {"TXCACHE_POOL_SIZE": "x", "TXCACHE_DSN": DSN})


# --- the file ------------------------------------------------------------------------------


def test_unknown_keys_in_the_file_are_named() -> None:
    write_file(f'dsn = "{DSN}"\npoolsize = 3\nnode = "a:1"\n')
    with pytest.raises(ConfigurationError) as raised:
        load_settings({}, {})
    assert "node" in str(raised.value)
    assert "poolsize" in str(raised.value)


def test_unknown_arguments_are_named() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        load_settings({"dsn": DSN, "timeout": 3}, {})


def test_a_file_that_is_not_toml_is_named() -> None:
    path = write_file("dsn = \n")
    with pytest.raises(ConfigurationError, match=str(path)):
        load_settings({}, {})


def test_a_missing_txcache_config_file_is_an_error() -> None:
    missing = "/nonexistent/txcache-settings.toml"
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"dsn": DSN}, {"TXCACHE_CONFIG": missing})
    assert "TXCACHE_CONFIG" in str(raised.value)
    assert missing in str(raised.value)


def test_a_missing_txcache_toml_is_fine() -> None:
    assert not Path("txcache.toml").exists()
    assert load_settings({"dsn": DSN}, {}) == Settings(dsn=DSN)


# --- dsn and mode --------------------------------------------------------------------------


def test_a_missing_dsn_says_how_to_give_one() -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"nodes": "a:1"}, {})
    message = str(raised.value)
    assert "TXCACHE_DSN" in message
    assert "dsn" in message
    assert "txcache.toml" in message


@pytest.mark.parametrize("mode", ["consistent", "no_consistency", "bypass"])
def test_every_mode_is_accepted(mode: str) -> None:
    assert load_settings({"dsn": DSN}, {"TXCACHE_MODE": mode}).mode == mode


@pytest.mark.parametrize("mode", ["Consistent", "none", "", "no-consistency"])
def test_a_bad_mode_is_named_with_the_valid_ones(mode: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings({"dsn": DSN, "mode": mode}, {})
    message = str(raised.value)
    assert "mode" in message
    assert repr(mode) in message
    assert "no_consistency" in message


def test_a_bad_mode_in_the_file_is_an_error() -> None:
    write_file(f'dsn = "{DSN}"\nmode = "fast"\n')
    with pytest.raises(ConfigurationError, match="fast"):
        load_settings({}, {})


# --- connect() and the reference ---------------------------------------------------------


def test_connect_takes_nodes_as_the_comma_separated_string_the_environment_takes(
    database: str,
) -> None:
    with txcache.connect(database, nodes="127.0.0.1:46999, 127.0.0.1:47000", mode="bypass") as c:
        assert c.settings.nodes == ("127.0.0.1:46999", "127.0.0.1:47000")


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "no cache nodes (the setting nodes, or TXCACHE_NODES) and no agent"),
        ({"nodes": "127.0.0.1:46999"}, "no agent (the setting agent, or TXCACHE_AGENT)"),
    ],
)
def test_a_cache_that_cannot_cache_says_so_once_naming_the_setting(
    database: str, caplog: pytest.LogCaptureFixture, given: dict[str, Any], missing: str
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="txcache"),
        txcache.connect(database, **given) as cache,
        cache.read_only(),
    ):
        txcache.query("SELECT 1")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert missing in warnings[0]
    assert "uncached" in warnings[0]
    assert missing in (cache.uncached_reason or "")


def test_bypass_mode_is_not_warned_about(database: str, caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="txcache"),
        txcache.connect(database, mode="bypass") as cache,
    ):
        assert cache.uncached_reason == "mode bypass"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_settings_reference_describes_every_setting() -> None:
    reference = (Path(__file__).parents[1] / "docs" / "settings.md").read_text()
    for field in dataclasses.fields(Settings):
        assert f"`{field.name}`" in reference, field.name
        assert f"`TXCACHE_{field.name.upper()}`" in reference, field.name
