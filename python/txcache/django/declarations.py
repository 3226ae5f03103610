"""What a Django model declares, in cacheable functions' code hash (docs/django.md,
"Cacheable functions with the ORM").

A model's fields, ``Meta`` and managers live in objects (``Model._meta``, its managers),
which the code hash reads by class only. A deploy that changes them — ``Meta.ordering``, a
manager's ``get_queryset``, a queryset method, a field's ``db_column``, ``default`` or
class (its ``from_db_value``) — often runs no SQL that would invalidate anything, so
without them in the hash the functions reading the model would keep their keys and serve
what the old code computed. :func:`model_declaration` is what the hash reads of a model:
each field as its migration would write it (``Field.deconstruct()``), with its class, the
table, the ordering and the managers, with their classes (and queryset classes), which the
hash then reads as code.
"""

from __future__ import annotations

from typing import Any

from django.db import models

__all__ = ["model_declaration"]


def model_declaration(cls: type) -> object:
    """What the model ``cls`` declares, as data; ``None`` for any other class."""
    if not issubclass(cls, models.Model) or not hasattr(cls, "_meta"):
        return None
    meta: Any = cls._meta
    fields = tuple(_field(field) for field in (*meta.local_fields, *meta.local_many_to_many))
    managers = tuple(
        (manager.name, type(manager), getattr(manager, "_queryset_class", None))
        for manager in meta.local_managers
    )
    return (
        "django model",
        meta.db_table,
        _data(meta.ordering),
        meta.order_with_respect_to.name if meta.order_with_respect_to else None,
        meta.default_manager_name,
        meta.base_manager_name,
        fields,
        managers,
    )


def _field(field: Any) -> object:
    name, path, args, kwargs = field.deconstruct()
    return (name, type(field), path, field.column, _data(args), _data(kwargs))


def _data(value: Any) -> object:
    """``value`` with its containers as tuples, so that the hash reads their data, and
    Django's deconstructible objects (expressions, validators) as what they are made of."""
    if isinstance(value, list | tuple):
        return tuple(_data(item) for item in value)
    if isinstance(value, dict):
        return tuple((str(key), _data(value[key])) for key in sorted(value, key=str))
    if isinstance(value, set | frozenset):
        return frozenset(_data(item) for item in value)
    if isinstance(value, models.Field):  # an ArrayField's base_field, say
        return _field(value)
    deconstruct = getattr(value, "deconstruct", None)
    if callable(deconstruct) and not isinstance(value, type):
        try:
            path, args, kwargs = deconstruct()
        except (TypeError, ValueError):  # not Django's three parts: read by its class
            return value
        return (path, _data(args), _data(kwargs))
    return value
