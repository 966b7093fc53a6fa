"""The parts of ratchet-django that need no database: the priority and status mapping, the
settings check, the URL <-> DATABASES conversion, the backend's options."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from hypothesis import given
from hypothesis import strategies as st

from ratchet import JobPriority, JobStatus
from ratchet_django import conf
from ratchet_django.db import django_database
from ratchet_django.mapping import STATUS_NAMES, ratchet_priority

PRIORITIES = st.integers(min_value=-100, max_value=100)


@given(PRIORITIES, PRIORITIES)
def test_the_priority_mapping_keeps_the_order(a: int, b: int) -> None:
    if a <= b:
        assert ratchet_priority(a) <= ratchet_priority(b)


@given(PRIORITIES)
def test_the_sign_of_a_priority_survives(p: int) -> None:
    mapped = ratchet_priority(p)
    assert (mapped > JobPriority.NORMAL) == (p > 0)
    assert (mapped < JobPriority.NORMAL) == (p < 0)


def test_the_priority_levels_and_their_edges() -> None:
    edges = {-100: "LOWEST", -51: "LOWEST", -50: "LOW", -1: "LOW", 0: "NORMAL", 1: "HIGH"}
    edges |= {50: "HIGH", 51: "CRITICAL", 100: "CRITICAL"}
    assert {p: ratchet_priority(p).name for p in edges} == edges


@pytest.mark.parametrize("bad", [-101, 101])
def test_a_priority_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="between -100 and 100"):
        ratchet_priority(bad)


def test_every_status_has_a_django_status() -> None:
    from ratchet_django.compat import TaskResultStatus

    assert set(STATUS_NAMES) == set(JobStatus)
    assert {TaskResultStatus[name] for name in STATUS_NAMES.values()} == set(TaskResultStatus)
    assert STATUS_NAMES[JobStatus.CANCELED] == "FAILED"
    assert STATUS_NAMES[JobStatus.TIMED_OUT] == "RUNNING"


DATABASES = {"default": {}, "jobs": {}}


def test_settings_default_to_the_default_database() -> None:
    parsed = conf.parse(None, DATABASES)
    assert (parsed.database, parsed.allowed_modules, parsed.migrate_with_django) == (
        "default",
        (),
        True,
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "must be a dict"),
        ({"DATABSE": "jobs"}, r"unknown keys \['DATABSE'\]"),
        ({"DATABASE": "other"}, "'other', which is not in DATABASES"),
        ({"ALLOWED_MODULES": "shop."}, "must be a list of module prefixes"),
        ({"WORKER": 4}, r"RATCHET\['WORKER'\] must be a dict"),
    ],
)
def test_bad_settings_say_what_is_wrong(raw: Any, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        conf.parse(raw, DATABASES)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg://app:s3cret@db.internal:5433/shop",
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "shop",
                "USER": "app",
                "PASSWORD": "s3cret",
                "HOST": "db.internal",
                "PORT": "5433",
            },
        ),
        (
            "mariadb+pymysql://root@127.0.0.1/shop",
            {
                "ENGINE": "django.db.backends.mysql",
                "NAME": "shop",
                "USER": "root",
                "PASSWORD": "",
                "HOST": "127.0.0.1",
                "PORT": "",
            },
        ),
        ("sqlite:////tmp/x.db", {"ENGINE": "django.db.backends.sqlite3", "NAME": "/tmp/x.db"}),
    ],
)
def test_a_url_becomes_a_databases_entry(url: str, expected: dict[str, str]) -> None:
    assert django_database(url) == expected


def test_a_url_of_a_database_django_cannot_share_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="'oracle' URLs have no Django engine"):
        django_database("oracle://scott:tiger@db/orcl")


def test_unknown_backend_options_are_refused() -> None:
    from ratchet_django.backend import RatchetBackend

    with pytest.raises(ImproperlyConfigured, match=r"unknown keys \['RETRIES'\]"):
        RatchetBackend("default", {"OPTIONS": {"RETRIES": 3}})
    backend = RatchetBackend("default", {"OPTIONS": {"MAX_RETRIES": 2, "TIMEOUT": 1.5}})
    assert (backend.max_retries, backend.timeout.total_seconds()) == (2, 1.5)  # type: ignore[union-attr]
