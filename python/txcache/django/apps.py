"""The app config of ``txcache.django`` (``INSTALLED_APPS = [..., "txcache.django"]``): its
system checks and management commands, the process's cache as the default one, the active
time zone, language and ``USE_TZ`` in cacheable calls' keys
(:mod:`txcache.django.contexts`), the guard of other databases' connections
(:mod:`txcache.django.db.guards`), and a fresh cache after a test changes its settings."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.checks import register
from django.core.signals import setting_changed

from txcache.integration import provide_default_cache

__all__ = ["TxcacheConfig"]

_CACHE_SETTINGS = frozenset(("TXCACHE", "DATABASES", "USE_TZ", "TIME_ZONE"))


class TxcacheConfig(AppConfig):  # type: ignore[misc]
    """txcache's Django app; its label is ``txcache``."""

    name = "txcache.django"
    label = "txcache"
    verbose_name = "txcache"

    def ready(self) -> None:
        """Register the checks and the key contexts; make the process's cache the default of
        cacheable calls outside any transaction (a worker's, a management command's: it
        connects at the first); guard every database connection Django opens from now on
        (before any is); close the cache when a setting it is made from changes."""
        from txcache.django import conf, contexts
        from txcache.django.checks import CHECKS
        from txcache.django.db.guards import watch_other_databases

        for check in CHECKS:
            register(check, "txcache")
        contexts.register()
        provide_default_cache(conf.get_cache)
        watch_other_databases()
        setting_changed.connect(_settings_changed, dispatch_uid="txcache.django.settings")


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    """``override_settings`` changed what the cache is made from: the next use connects
    again with the new settings."""
    if setting in _CACHE_SETTINGS:
        from txcache.django import conf

        conf.close()
