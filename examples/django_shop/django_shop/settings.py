"""Settings of the shop, from the environment: the database is ``TXCACHE_DSN`` (what
``txcache up`` prints), the nodes and the agent ``TXCACHE_NODES`` and ``TXCACHE_AGENT``, the
mode ``TXCACHE_MODE`` (``bypass``: the same site without the cache) and every other library
setting its ``TXCACHE_*`` variable (read by the library itself), the staleness of pages
``SHOP_STALENESS`` (seconds, default 5)."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(os.environ.get("TXCACHE_DSN", "dbname=shop"))

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "django-shop-example-not-a-secret")
DEBUG = os.environ.get("SHOP_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "txcache.django",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Above sessions and auth: a login, the admin's writes and the session they save are
    # the request's transaction, covered by the token the next request carries.
    "txcache.django.middleware.TransactionMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "django_shop.urls"
WSGI_APPLICATION = "django_shop.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "txcache.django.db",
        "NAME": _database.get("dbname", ""),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
        # The DSN's other parameters (sslmode, application_name, …): Django's connection and
        # txcache's pool, whose DSN is derived from this one, both connect with them.
        "OPTIONS": {
            key: value
            for key, value in _database.items()
            if key not in ("dbname", "user", "password", "host", "port")
        },
    }
}

TXCACHE = {"STALENESS": float(os.environ.get("SHOP_STALENESS", "5"))}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
