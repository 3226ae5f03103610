"""Items and orders, and a catalogue to start from."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

CATALOGUE = [
    ("desk lamp", "lamps", 2500, 40),
    ("floor lamp", "lamps", 8900, 12),
    ("oak desk", "desks", 32000, 5),
    ("standing desk", "desks", 54000, 3),
    ("office chair", "chairs", 12000, 20),
    ("bar stool", "chairs", 3000, 50),
]


def seed(apps: Any, schema_editor: Any) -> None:
    item = apps.get_model("shop", "Item")
    item.objects.bulk_create(
        [item(name=n, category=c, price_cents=p, stock=s) for n, c, p, s in CATALOGUE]
    )


class Migration(migrations.Migration):
    initial = True
    dependencies = ()

    operations = (
        migrations.CreateModel(
            name="Item",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100)),
                ("category", models.CharField(db_index=True, max_length=50)),
                ("price_cents", models.IntegerField()),
                ("stock", models.IntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("customer", models.CharField(db_index=True, max_length=50)),
                ("quantity", models.IntegerField()),
                ("total_cents", models.IntegerField()),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "item",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="orders",
                        to="shop.item",
                    ),
                ),
            ],
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    )
