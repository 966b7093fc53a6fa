#!/usr/bin/env python
"""The shop's manage.py (``python manage.py migrate``, ``runserver``, ``ratchet_worker``)."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
