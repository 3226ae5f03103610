"""``python -m txcache``: the ``txcache`` command (see :mod:`txcache.cli`)."""

from txcache.cli import main

raise SystemExit(main())
