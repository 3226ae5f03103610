"""``manage.py txcache_setup`` and ``manage.py txcache_status``: the ``txcache setup`` and
``txcache status`` commands, with the connection settings taken from ``TXCACHE`` and
``DATABASES``."""
