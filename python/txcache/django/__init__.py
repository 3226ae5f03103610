"""Django on txcache (docs/django.md): the ORM inside ``@txcache.cacheable`` functions,
queryset caching, and request-scoped transactions. An optional extra:
``pip install 'txcache[django]'``.

Importing this package needs no Django settings: the parts that do are imported from
their modules (``txcache.django.db``, ``txcache.django.middleware``, ...).
"""
