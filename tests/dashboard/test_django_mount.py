"""The dashboard mounted beside a Django project's ASGI application, as docs/dashboard.md shows,
in a fresh interpreter (Django's settings are process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SITE = """
import os, sys, json
os.environ["DJANGO_SETTINGS_MODULE"] = "site_settings"

from django.core.asgi import get_asgi_application

django_app = get_asgi_application()

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from ratchet import Ratchet
from ratchet_dashboard import DashboardSettings, create_dashboard

app = Ratchet(f"sqlite:///{sys.argv[1]}", allow_empty_class_policy=True)
application = Starlette(
    routes=[
        Mount("/ratchet", app=create_dashboard(app, settings=DashboardSettings())),
        Mount("/", app=django_app),
    ]
)
with TestClient(application, client=("127.0.0.1", 50000)) as client:
    board = client.get("/ratchet/jobs")
    shop = client.get("/shop/")
    print(json.dumps({
        "dashboard": board.status_code,
        "linked": 'href="/ratchet/dlq"' in board.text,
        "django": shop.status_code,
        "django_text": shop.text,
    }))
app.close()
"""

SETTINGS = """
SECRET_KEY = "test-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "site_urls"
INSTALLED_APPS = []
DATABASES = {}
"""

URLS = """
from django.http import HttpResponse
from django.urls import path

urlpatterns = [path("shop/", lambda request: HttpResponse("the shop"))]
"""


def test_mounted_beside_a_django_asgi_application(tmp_path: Path) -> None:
    (tmp_path / "site_settings.py").write_text(SETTINGS)
    (tmp_path / "site_urls.py").write_text(URLS)
    (tmp_path / "mysite_asgi.py").write_text(SITE)
    done = subprocess.run(
        [sys.executable, "mysite_asgi.py", str(tmp_path / "jobs.db")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"dashboard": 200, "linked": True, "django": 200, "django_text": "the shop"}
