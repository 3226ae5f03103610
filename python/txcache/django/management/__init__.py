"""Management commands of ``txcache.django`` (in ``commands``)."""
