"""``ratchet keys`` and what the job commands show of principals and sensitive fields."""

from __future__ import annotations

import json

import security_jobs
from click.testing import CliRunner

from ratchet import Ratchet
from ratchet.cli import main
from ratchet.domain.masking import MASK
from ratchet.encryption import StaticKeyProvider, generate_key
from ratchet.testing import FakeClock

K1, K2 = generate_key(), generate_key()


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def test_generate_prints_a_usable_key() -> None:
    code, out = invoke("keys", "generate")
    assert code == 0
    StaticKeyProvider({"k": out.strip()}, "k")


def test_report_counts_old_and_current_keys(sqlite_url: str, clock: FakeClock) -> None:
    def app(keys: dict[str, str], current: str | None) -> Ratchet:
        provider = None if current is None else StaticKeyProvider(keys, current)
        return Ratchet(
            sqlite_url, allowed_modules=["security_jobs"], clock=clock, key_provider=provider
        )

    with app({"k1": K1}, "k1") as a:
        ended = a.enqueue(security_jobs.double, 1).submit()
        a.worker().run_due()
        old_live = [a.enqueue(security_jobs.double, n).with_tags("later").submit() for n in (2, 3)]
        a.pause_job(old_live[0].id)
        a.pause_job(old_live[1].id)
    with app({"k1": K1, "k2": K2}, "k2") as a:
        a.enqueue(security_jobs.double, 4).submit()
    with app({}, None) as a:
        a.enqueue(security_jobs.double, 5).submit()

    env = {"RATCHET_ENCRYPTION_KEYS": f"k1={K1},k2={K2}"}
    code, out = invoke("keys", "report", "--url", sqlite_url, env=env)
    assert code == 0, out
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["KEY", "ID", "STATE", "LIVE", "TOTAL"]
    assert lines[1:] == [
        ["(none)", "plaintext", "1", "1"],
        ["k1", "old", "2", "3"],
        ["k2", "current", "1", "1"],
    ]
    code, out = invoke(
        "keys", "report", "--url", sqlite_url, "--current", "k2", "--json", "--list", "5"
    )
    doc = json.loads(out)
    assert doc["current"] == "k2"
    [k1] = [k for k in doc["keys"] if k["key_id"] == "k1"]
    assert set(k1["jobs"]) == {str(ended.id), *(str(h.id) for h in old_live)}
    assert set(k1["jobs"][:2]) == {str(h.id) for h in old_live}, "live jobs first"
    code, out = invoke("keys", "report", "--url", sqlite_url, "--current", "k2", "--check")
    assert code == 1 and "2 live job(s) still need an old key" in out
    code, _ = invoke("keys", "report", "--url", sqlite_url, "--current", "k1", "--check")
    assert code == 1, "k2's live job needs a key that is not current"


def test_report_on_an_empty_database(sqlite_url: str, clock: FakeClock) -> None:
    Ratchet(sqlite_url, allowed_modules=["security_jobs"], clock=clock).close()
    code, out = invoke("keys", "report", "--url", sqlite_url, "--check")
    assert (code, out.strip()) == (0, "no jobs")


def test_job_commands_show_the_principal_and_mask_secrets(
    sqlite_url: str, clock: FakeClock
) -> None:
    with Ratchet(sqlite_url, allowed_modules=["security_jobs"], clock=clock) as app:
        with app.as_principal("alice"):
            handle = (
                app.enqueue(security_jobs.login, "ann", password="hunter2")
                .with_param("db_password", "pw")
                .submit()
            )
        app.worker().run_due()
    code, out = invoke("jobs", "show", "--json", "--url", sqlite_url, str(handle.id))
    assert code == 0, out
    doc = json.loads(out)
    assert doc["caller_principal"] == "alice"
    assert doc["payload"]["kwargs"] == {"password": MASK}
    assert doc["params"] == {"db_password": MASK}
    assert doc["result"]["token"] == MASK
    assert "hunter2" not in out and "token-of-ann" not in out
    code, out = invoke("jobs", "list", "--url", sqlite_url, "--json")
    assert "hunter2" not in out and json.loads(out)["jobs"][0]["caller_principal"] == "alice"


def test_encrypted_jobs_show_as_a_note_without_the_key(sqlite_url: str, clock: FakeClock) -> None:
    with Ratchet(
        sqlite_url,
        allowed_modules=["security_jobs"],
        clock=clock,
        key_provider=StaticKeyProvider({"k1": K1}, "k1"),
    ) as app:
        handle = app.enqueue(security_jobs.double, 1).submit()
    code, out = invoke("jobs", "show", "--json", "--url", sqlite_url, str(handle.id))
    assert code == 0, out
    doc = json.loads(out)
    assert doc["payload"]["encrypted"] is True and doc["payload"]["key_id"] == "k1"
    assert doc["encryption_key_id"] == "k1"
    code, out = invoke(
        "jobs",
        "show",
        "--json",
        "--url",
        sqlite_url,
        str(handle.id),
        env={"RATCHET_ENCRYPTION_KEYS": f"k1={K1}"},
    )
    assert code == 0, out
    assert json.loads(out)["payload"] == {"args": [1], "kwargs": {}}
