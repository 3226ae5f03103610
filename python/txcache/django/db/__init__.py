"""The database backend ``ENGINE: "txcache.django.db"``: Django's PostgreSQL backend (psycopg
3) whose statements run in the current txcache transaction while one is open in the thread,
and on Django's own connection otherwise (:mod:`txcache.django.db.base`)."""
