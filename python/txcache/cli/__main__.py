"""``python -m txcache.cli``: the ``txcache`` command."""

from txcache.cli import main

raise SystemExit(main())
