#!/usr/bin/env python
"""Django's command-line utility for the shop: ``python manage.py migrate``, ``txcache_setup``,
``runserver`` … (README.md)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
