"""The authorization values and the shipped policies (pure)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.authorization import (
    AuthorizationRequest,
    JobAction,
    OwnerOnly,
    PermitAll,
    check_principal,
)
from ratchet.domain.errors import InvalidPrincipal, NotAuthorized
from ratchet.domain.model import JobFilter

principals = st.one_of(st.none(), st.sampled_from(["alice", "bob", "root"]))
JOB = uuid.UUID(int=7)


@given(st.sampled_from(JobAction), principals, principals, st.booleans())
def test_permit_all_allows_everything(
    action: JobAction, who: str | None, owner: str | None, bulk: bool
) -> None:
    request = AuthorizationRequest(action, who, None if bulk else JOB, owner=owner)
    assert PermitAll().authorize(request)
    assert PermitAll().filter_for_principal(JobFilter(tag="t"), who) == JobFilter(tag="t")


@given(st.sampled_from(JobAction), principals, principals, st.booleans())
def test_owner_only(action: JobAction, who: str | None, owner: str | None, bulk: bool) -> None:
    policy = OwnerOnly(admins={"root"})
    request = AuthorizationRequest(action, who, None if bulk else JOB, owner=owner)
    allowed = policy.authorize(request)
    if who == "root" or action in (JobAction.CREATE, JobAction.EXECUTE):
        assert allowed
    elif bulk:
        assert not allowed, "bulk actions are for admins"
    else:
        assert allowed == (owner is not None and owner == who)
    narrowed = policy.filter_for_principal(JobFilter(), who)
    if who == "root":
        assert narrowed == JobFilter()
    else:
        assert narrowed.caller_principal == (who or ""), "anonymous matches no job"


def test_principal_checks() -> None:
    assert check_principal(None) is None
    assert check_principal("ü" * 255) == "ü" * 255
    for bad in ("", "x" * 256, "a\0b", "\ud800", 3):
        with pytest.raises(InvalidPrincipal):
            check_principal(bad)


def test_refusal_message_names_who_what_and_which_job() -> None:
    request = AuthorizationRequest(JobAction.CANCEL, "bob", JOB, target="m:f")
    error = NotAuthorized(request.action.value, request.principal, request.subject())
    assert str(error) == f"principal 'bob' may not cancel job {JOB} (m:f)"
    key = AuthorizationRequest(JobAction.DELIVER_SIGNAL, None, signal_key="go")
    assert (
        str(NotAuthorized(key.action.value, key.principal, key.subject()))
        == "the anonymous caller may not deliver_signal the jobs waiting on signal key 'go'"
    )
    assert isinstance(error, PermissionError)
