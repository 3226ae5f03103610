"""The backend's test databases: Django's PostgreSQL ``DatabaseCreation``, which keeps the
process's cache on the database the alias names (docs/django.md, "Django's test runner").

Django's test runner moves an alias from database to database: ``create_test_db`` creates
``test_<name>`` and rewrites the alias's ``NAME``; with parallel workers ``clone_test_db``
copies it (``CREATE DATABASE … TEMPLATE``) and each worker's ``setup_worker_connection``
names its clone; a mirror alias takes its primary's test database
(``set_as_test_mirror``); ``destroy_test_db`` drops them and names the original database
again. The process's cache (:func:`txcache.django.get_cache`) is made from the alias's
settings of the moment it connects. One made before a step would go on reading the old
database, and its pooled connections would keep busy a database that PostgreSQL must
clone or drop with no one connected ("is being accessed by other users"). So each step
closes it first, as Django closes its own connection (and its pool) there; the next use
connects again, to the database the alias names then.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import creation as postgresql

from txcache.django import conf

__all__ = ["DatabaseCreation"]


class DatabaseCreation(postgresql.DatabaseCreation):  # type: ignore[misc]
    """Django's PostgreSQL test-database creation; the process's cache is closed before the
    alias changes database and before a database it may be connected to is cloned or
    dropped (the module docstring)."""

    def create_test_db(self, *args: Any, **kwargs: Any) -> str:
        """Create the test database and name it, with no cache made for the old name."""
        self._to_test_database()
        name: str = super().create_test_db(*args, **kwargs)
        return name

    def clone_test_db(self, *args: Any, **kwargs: Any) -> None:
        """Clone the test database: nobody may be connected to it, the cache included."""
        self._to_test_database()
        super().clone_test_db(*args, **kwargs)

    def setup_worker_connection(self, _worker_id: int) -> None:
        """Name the worker's clone (in a parallel worker process), with no cache made for
        the database named before. A cache a forked worker inherited is dropped, not
        closed (its connections are the parent's), and replaced at once: it would
        otherwise stay the library's default cache."""
        super().setup_worker_connection(_worker_id)
        self._to_test_database()
        conf.replace_inherited()

    def set_as_test_mirror(self, primary_settings_dict: dict[str, Any]) -> None:
        """Name the primary's test database, with no cache made for the old name."""
        self._to_test_database()
        super().set_as_test_mirror(primary_settings_dict)

    def destroy_test_db(
        self,
        old_database_name: str | None = None,
        verbosity: int = 1,
        keepdb: bool = False,
        suffix: str | None = None,
    ) -> None:
        """Drop (or keep) a test database, none of the cache's connections left in it, and
        name the original database again (without a ``suffix``: not a clone)."""
        self._to_test_database()
        super().destroy_test_db(old_database_name, verbosity, keepdb, suffix)
        if suffix is None and old_database_name is not None:
            conf.move_alias(self.connection.alias, test_database=False)

    def _to_test_database(self) -> None:
        """Close the process's cache if it is this alias's, which is (or is about to be) on
        a test database — marked before the switch: a ``DSN`` given takes the alias's
        ``NAME``, the original database's until then."""
        conf.move_alias(self.connection.alias, test_database=True)
