"""Django configured in this test process for the tests of ``txcache.django``, on a real
stack: PostgreSQL (a fresh database per test module), two ``txcached`` nodes and the agent,
started by :class:`txcache.stack.Stack`.

Django is configured once, when this module is first imported (``settings.configure``):
the ``default`` database uses the ``txcache.django.db`` engine, the middleware is the
txcache one above sessions and authentication, and this module is both an installed app
(its models, defined below once Django is set up) and the URLconf (the views of the
middleware tests). :func:`start_shop` points ``DATABASES["default"]`` and ``TXCACHE`` at a
new stack, creates the tables with ``migrate`` and seeds them; a test module makes it its
fixture::

    @pytest.fixture(scope="module")
    def shop(postgres):
        yield from start_shop(postgres)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import django
import psycopg
from django.conf import settings

import txcache
import txcache.django
from library_fixtures import wait_for_pin
from postgres_fixtures import fresh_database
from txcache.stack import EmbeddedPostgres, Stack, StackOptions

AGENT_ARGS = ("--pin-interval", "50ms", "--heartbeat-interval", "50ms")
STALENESS = 30.0

if not settings.configured:
    settings.configure(
        SECRET_KEY="txcache-django-tests",
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django.contrib.sessions",
            "txcache.django",
            "django_fixtures",
        ],
        DATABASES={
            "default": {"ENGINE": "txcache.django.db", "NAME": "not_started"},
            # A second alias on the same database, with Django's own engine (the checks'
            # tests point TXCACHE["DATABASE"] at it).
            "plain": {"ENGINE": "django.db.backends.postgresql", "NAME": "not_started"},
        },
        MIDDLEWARE=[
            "txcache.django.middleware.TransactionMiddleware",
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        ROOT_URLCONF="django_fixtures",
        TXCACHE={},
    )
    django.setup()

# After setup: models need the app registry.
from django.contrib import auth  # noqa: E402
from django.contrib.auth.models import User as User  # noqa: E402  # the tests' too
from django.db import connections, models, transaction  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from txcache.django import CachedManager  # noqa: E402
from txcache.django import decorators as txcache_views  # noqa: E402


class Category(models.Model):  # type: ignore[misc]  # Django ships no types
    name = models.CharField(max_length=50, unique=True)

    class Meta:
        app_label = "django_fixtures"
        db_table = "shop_category"


class Item(models.Model):  # type: ignore[misc]  # Django ships no types
    name = models.CharField(max_length=100)
    price = models.IntegerField()
    category = models.ForeignKey(Category, on_delete=models.PROTECT, related_name="items")
    details = models.JSONField(default=dict)
    changed = models.DateTimeField()

    objects = CachedManager()

    class Meta:
        app_label = "django_fixtures"
        db_table = "shop_item"


CHANGED = "2024-05-06 07:08:09.123456+00"
SEED = f"""
INSERT INTO shop_category (id, name) VALUES (1, 'lamps'), (2, 'desks'), (3, 'chairs');
INSERT INTO shop_item (id, name, price, category_id, details, changed)
SELECT i, 'item ' || i, 10 * i, 1 + i % 3,
       jsonb_build_object('size', i, 'tags', jsonb_build_array('a')), '{CHANGED}'::timestamptz
FROM generate_series(1, 30) i;
SELECT setval(pg_get_serial_sequence('shop_category', 'id'), 100);
SELECT setval(pg_get_serial_sequence('shop_item', 'id'), 1000);
"""


class DjangoShop(Stack):
    """A stack whose database Django's ``default`` alias uses, with its tables."""

    def __init__(self, dsn: str) -> None:
        super().__init__(StackOptions(dsn=dsn, nodes=2, max_memory="64mb", agent_args=AGENT_ARGS))
        self._admin: psycopg.Connection | None = None

    def start(self, *args: Any, **kwargs: Any) -> None:
        """Start the stack, point Django at it, create and seed the tables."""
        super().start(*args, **kwargs)
        use_stack(self)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # contenttypes, auth, sessions
        with connections["default"].schema_editor() as editor:  # this module's models
            editor.create_model(Category)
            editor.create_model(Item)
        self._admin = psycopg.connect(self.dsn, autocommit=True)
        self.admin.execute(SEED)
        User.objects.create_user("ann", password="ann-secret")
        self.settled()

    def stop(self) -> None:
        """Close Django's connections and the cache, then stop the stack."""
        txcache.django.close()
        connections.close_all()
        if self._admin is not None:
            self._admin.close()
        super().stop()

    @property
    def admin(self) -> psycopg.Connection:
        """An autocommit connection that writes behind Django's and the library's back."""
        assert self._admin is not None
        return self._admin

    @property
    def cache(self) -> txcache.Cache:
        """The process's cache (``txcache.django.get_cache()``)."""
        return txcache.django.get_cache()

    def settled(self, token: int = 0) -> None:
        """Wait until both nodes applied every commit so far and the cache knows a pin at
        or after ``token``."""
        self.caught_up()
        wait_for_pin(self.cache, not_before=token)


def use_stack(stack: Stack) -> None:
    """Point ``DATABASES["default"]`` (and ``"plain"``) and ``TXCACHE`` at ``stack``."""
    txcache.django.close()
    connections.close_all()
    params = psycopg.conninfo.conninfo_to_dict(stack.dsn)
    for alias in ("default", "plain"):
        database = connections[alias].settings_dict  # the dict Django's connections read
        database.update(
            NAME=params["dbname"],
            USER=params.get("user", ""),
            HOST=params.get("host", ""),
            PORT=str(params.get("port", "")),
        )
    settings.TXCACHE = {
        "NODES": stack.node_addresses,
        "AGENT": stack.agent_address,
        "STALENESS": STALENESS,
        "REFRESH_INTERVAL": 0.05,
    }


def start_shop(postgres: EmbeddedPostgres) -> Iterator[DjangoShop]:
    """A :class:`DjangoShop` on a fresh database of the session's PostgreSQL, for one test
    module; stopped and its database dropped afterwards."""
    databases = fresh_database(postgres)
    try:
        with DjangoShop(next(databases)) as shop:
            yield shop
    finally:
        next(databases, None)  # drops the database


# -- views of the middleware tests (this module is the URLconf) ----------------------------


def transaction_of_request() -> dict[str, Any]:
    """What the request runs in: the kind of txcache transaction, its staleness and token."""
    current = txcache.current_transaction()
    if current is None:
        return {"kind": None}
    if isinstance(current, txcache.ReadOnlyTransaction):
        return {"kind": "read_only", "staleness": current.staleness,
                "not_before": current.not_before}  # fmt: skip
    return {"kind": "read_write"}


def item_page(request: HttpRequest, item_id: int) -> JsonResponse:
    """An item, read through the cache, and the request's transaction."""
    item = Item.objects.select_related("category").txcache().get(id=item_id)
    return JsonResponse(
        {"price": item.price, "category": item.category.name, **transaction_of_request()}
    )


def set_price(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST: change an item's price."""
    changed = Item.objects.filter(id=item_id).update(price=int(request.POST["price"]))
    return JsonResponse({"changed": changed, **transaction_of_request()})


def set_price_then_fail(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST: change an item's price, then raise: nothing may be committed."""
    Item.objects.filter(id=item_id).update(price=int(request.POST["price"]))
    raise RuntimeError("the view failed after its write")


@txcache_views.bypass
def bypassed(request: HttpRequest) -> JsonResponse:
    """No txcache transaction; the ORM on Django's own connection."""
    count = Item.objects.count()
    own = connections["default"].connection is not None
    return JsonResponse({"count": count, "own_connection": own, **transaction_of_request()})


def set_price_then_roll_back(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST: change an item's price, then ask for a rollback as DRF's handlers do."""
    Item.objects.filter(id=item_id).update(price=int(request.POST["price"]))
    transaction.set_rollback(True)
    return JsonResponse({"rolling_back": transaction.get_rollback()})


@txcache_views.bypass
def set_price_bypassed(request: HttpRequest, item_id: int) -> JsonResponse:
    """POST, in no txcache transaction: change an item's price on Django's own connection."""
    changed = Item.objects.filter(id=item_id).update(price=int(request.POST["price"]))
    return JsonResponse({"changed": changed, **transaction_of_request()})


@txcache_views.staleness(7)
def patient(request: HttpRequest) -> JsonResponse:
    """Read-only requests of this view may be 7 s stale."""
    return JsonResponse(transaction_of_request())


@txcache_views.read_write
def count_visit(request: HttpRequest, item_id: int) -> JsonResponse:
    """A GET that writes."""
    Item.objects.filter(id=item_id).update(price=models.F("price") + 1)
    return JsonResponse(transaction_of_request())


@txcache_views.read_only(staleness=3)
def search(request: HttpRequest) -> JsonResponse:
    """A POST that only reads; a write it tried would be refused."""
    if request.POST.get("write"):
        Item.objects.filter(id=1).update(price=0)
    names = list(Item.objects.filter(category_id=int(request.POST["category"]))
                 .order_by("id").values_list("name", flat=True)[:3])  # fmt: skip
    return JsonResponse({"names": names, **transaction_of_request()})


def category_of_name(request: HttpRequest, name: str) -> JsonResponse:
    """An unmarked GET that writes as Django's update_or_create() does: it locks the row
    first (``SELECT … FOR UPDATE``)."""
    category, created = Category.objects.update_or_create(name=name, defaults={"name": name})
    return JsonResponse({"id": category.id, "created": created, **transaction_of_request()})


def unavailable(request: HttpRequest) -> JsonResponse:
    """A read whose snapshot is gone."""
    raise txcache.SnapshotUnavailable(
        "every pin this transaction's cached reads are valid at is gone"
    )


def log_in(request: HttpRequest) -> JsonResponse:
    """POST: log a user in (the session is written in the request's transaction)."""
    user = auth.authenticate(request, username=request.POST["username"],
                             password=request.POST["password"])  # fmt: skip
    if user is None:
        return JsonResponse({"error": "bad credentials"}, status=403)
    auth.login(request, user)
    return JsonResponse(transaction_of_request())


def whoami(request: HttpRequest) -> JsonResponse:
    """Who the session says the user is."""
    return JsonResponse({"user": request.user.get_username(), **transaction_of_request()})


urlpatterns = [
    path("items/<int:item_id>/", item_page),
    path("items/<int:item_id>/price", set_price),
    path("items/<int:item_id>/price-then-fail", set_price_then_fail),
    path("items/<int:item_id>/price-then-roll-back", set_price_then_roll_back),
    path("items/<int:item_id>/visit", count_visit),
    path("bypassed", bypassed),
    path("items/<int:item_id>/bypassed-price", set_price_bypassed),
    path("patient", patient),
    path("search", search),
    path("categories/<str:name>", category_of_name),
    path("unavailable", unavailable),
    path("login", log_in),
    path("whoami", whoami),
]
