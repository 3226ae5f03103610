"""Longer, indexed item names, written in title case: a schema change (the column's type, an
index) and a data change on a cached model's table, which can run while the site serves it —
the agent turns both into invalidations at their commit."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = (("shop", "0001_initial"),)

    operations = (
        migrations.AlterField(
            model_name="item",
            name="name",
            field=models.CharField(db_index=True, max_length=200),
        ),
        migrations.RunSQL("UPDATE shop_item SET name = initcap(name)", migrations.RunSQL.noop),
    )
