"""Recurring masters and named leases for the SQL store (:class:`~ratchet.ports.RecurringStore`).

Exactly-once creation of occurrences: the materializer's transaction claims due masters with
``FOR UPDATE SKIP LOCKED`` (PostgreSQL, MySQL; SQLite's ``BEGIN IMMEDIATE`` serialises every
writer), moves each master's ``next_fire`` with a compare-and-set on its old value, and inserts
the occurrences in the same transaction. A concurrent materializer skips a locked master, and
once the first commits the master is no longer due. As a last guard every occurrence carries an
idempotency key derived from its master and fire time, which the store never accepts twice.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, false, insert, or_, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from ratchet.domain.errors import DuplicateBusinessKeyError
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.misfire import RecurringMisfirePolicy
from ratchet.domain.model import JobRecord, NewJob
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.recurring import (
    FirePlan,
    MaterializedFire,
    NewRecurring,
    RecurringRecord,
    RecurringSource,
    RecurringStatus,
    SyncReport,
)
from ratchet.sql import schema

if TYPE_CHECKING:
    from ratchet.ports import InsertResult
    from ratchet.sql.dialect import SqlDialect

T = TypeVar("T")

log = logging.getLogger("ratchet.recurring")

R = schema.recurring_job
RT = schema.recurring_tag
LOCK = schema.scheduler_lock
J = schema.job
Q = schema.job_queue

NextFireFn = Callable[[str, str, datetime], datetime | None]
FirePlanner = Callable[[RecurringRecord, datetime], FirePlan]

#: A master whose plan raised is retried this much later (never in a hot loop).
PLAN_ERROR_DELAY = timedelta(minutes=1)
ACTIVE = RecurringStatus.ACTIVE.value


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else int(value / timedelta(milliseconds=1))


def _columns(m: NewRecurring) -> dict[str, Any]:
    """The definition columns of a master (everything a decorator controls)."""
    kind, limit = m.misfire.to_storage()
    return {
        "name": m.name,
        "cron_expr": m.cron,
        "zone_id": m.zone,
        "target": m.target,
        "payload": m.payload,
        "priority": int(m.priority),
        "max_retries": m.max_retries,
        "backoff_policy": m.backoff.value,
        "backoff_ms": _ms(m.backoff_delay),
        "timeout_ms": _ms(m.timeout),
        "params": json.dumps(dict(m.params), sort_keys=True) if m.params else None,
        "tags": json.dumps(list(m.tags)) if m.tags else None,
        "misfire_policy": kind,
        "max_catch_up": limit,
    }


def _to_record(r: Row[Any]) -> RecurringRecord:
    return RecurringRecord(
        recurring_id=r.recurring_id,
        cron=r.cron_expr,
        zone=r.zone_id,
        target=r.target,
        payload=r.payload,
        next_fire=r.next_fire,
        created_at=r.created_at,
        priority=JobPriority(r.priority),
        max_retries=r.max_retries,
        backoff=BackoffPolicy(r.backoff_policy),
        backoff_delay=timedelta(milliseconds=r.backoff_ms),
        timeout=None if r.timeout_ms is None else timedelta(milliseconds=r.timeout_ms),
        tags=tuple(json.loads(r.tags)) if r.tags else (),
        params=json.loads(r.params) if r.params else {},
        business_key=r.business_key,
        name=r.name,
        misfire=RecurringMisfirePolicy.from_storage(r.misfire_policy, r.max_catch_up),
        source=RecurringSource(r.source),
        status=RecurringStatus(r.status),
        paused=bool(r.is_paused),
        paused_at=r.paused_at,
        last_fire=r.last_fire,
        updated_at=r.updated_at,
        ended_at=r.ended_at,
    )


class RecurringStoreMixin:
    """Adds :class:`~ratchet.ports.RecurringStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:
        dialect: SqlDialect

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

        def _insert(
            self, conn: Connection, jobs: Sequence[NewJob], now: datetime
        ) -> list[InsertResult]: ...

        def _record_cols(self) -> list[Any]: ...

        def _to_record(self, r: Row[Any], last_epoch: int | None = None) -> JobRecord: ...

    # ------------------------------------------------------------------ masters
    def _insert_master(self, conn: Connection, m: NewRecurring, now: datetime) -> None:
        conn.execute(
            insert(R).values(
                recurring_id=m.recurring_id,
                business_key=m.business_key,
                active_key=m.business_key if m.next_fire is not None else None,
                source=m.source.value,
                status=ACTIVE if m.next_fire is not None else RecurringStatus.EXHAUSTED.value,
                next_fire=m.next_fire,
                last_fire=None,
                is_paused=False,
                paused_at=None,
                created_at=m.created_at,
                updated_at=now,
                ended_at=None if m.next_fire is not None else now,
                **_columns(m),
            )
        )
        self._set_tags(conn, m.recurring_id, m.tags)

    @staticmethod
    def _set_tags(conn: Connection, recurring_id: uuid.UUID, tags: Sequence[str]) -> None:
        conn.execute(delete(RT).where(RT.c.recurring_id == recurring_id))
        if tags:
            conn.execute(insert(RT), [{"recurring_id": recurring_id, "tag": t} for t in tags])

    def create_recurring(self, master: NewRecurring, *, now: datetime) -> uuid.UUID:
        def work(conn: Connection) -> uuid.UUID:
            if master.business_key is not None:
                holder = conn.execute(
                    select(R.c.recurring_id).where(R.c.active_key == master.business_key)
                ).scalar()
                if holder is not None:
                    raise DuplicateBusinessKeyError(master.business_key, holder)
            self._insert_master(conn, master, now)
            return master.recurring_id

        try:
            return self._run(work)
        except IntegrityError as exc:  # a racing creator took the key after our check
            if master.business_key is None:
                raise
            holder = self.find_recurring(master.business_key)
            raise DuplicateBusinessKeyError(
                master.business_key, holder.recurring_id if holder else None
            ) from exc

    def get_recurring(self, recurring_id: uuid.UUID) -> RecurringRecord | None:
        def work(conn: Connection) -> RecurringRecord | None:
            row = conn.execute(select(R).where(R.c.recurring_id == recurring_id)).first()
            return None if row is None else _to_record(row)

        return self._run(work, write=False)

    def find_recurring(self, business_key: str) -> RecurringRecord | None:
        key = business_key.strip()

        def work(conn: Connection) -> RecurringRecord | None:
            row = conn.execute(select(R).where(R.c.active_key == key)).first()
            return None if row is None else _to_record(row)

        return self._run(work, write=False)

    def list_recurring(
        self, *, tag: str | None = None, active_only: bool = True, limit: int = 1000
    ) -> list[RecurringRecord]:
        stmt = select(R)
        if active_only:
            stmt = stmt.where(R.c.status == ACTIVE)
        if tag is not None:
            stmt = stmt.where(
                R.c.recurring_id.in_(
                    select(RT.c.recurring_id).where(RT.c.tag == tag.strip().lower())
                )
            )
        stmt = stmt.order_by(R.c.created_at, R.c.recurring_id).limit(limit)

        def work(conn: Connection) -> list[RecurringRecord]:
            return [_to_record(r) for r in conn.execute(stmt)]

        return self._run(work, write=False)

    def recurring_fires(self, recurring_id: uuid.UUID, limit: int = 1000) -> list[JobRecord]:
        stmt = (
            select(*self._record_cols())
            .select_from(schema.job_with_state)
            .where(J.c.recurring_master_id == recurring_id)
            .order_by(J.c.job_id)
            .limit(limit)
        )

        def work(conn: Connection) -> list[JobRecord]:
            return [self._to_record(r) for r in conn.execute(stmt)]

        return self._run(work, write=False)

    # ------------------------------------------------------------------ operators
    def _locked_master(self, conn: Connection, recurring_id: uuid.UUID) -> Row[Any] | None:
        stmt = select(R).where(R.c.recurring_id == recurring_id, R.c.status == ACTIVE)
        return conn.execute(self.dialect.lock_rows(stmt)).first()

    def pause_recurring(self, recurring_id: uuid.UUID, *, now: datetime) -> bool:
        def work(conn: Connection) -> bool:
            row = self._locked_master(conn, recurring_id)
            if row is None:
                return False
            if not row.is_paused:
                conn.execute(
                    update(R)
                    .where(R.c.recurring_id == recurring_id)
                    .values(is_paused=True, paused_at=now, updated_at=now)
                )
            return True

        return self._run(work)

    def resume_recurring(
        self, recurring_id: uuid.UUID, *, now: datetime, next_fire: NextFireFn
    ) -> bool:
        def work(conn: Connection) -> bool:
            row = self._locked_master(conn, recurring_id)
            if row is None or not row.is_paused:
                return False
            following = next_fire(row.cron_expr, row.zone_id, now)
            values: dict[str, Any] = {
                "is_paused": False,
                "paused_at": None,
                "next_fire": following,
                "updated_at": now,
            }
            if following is None:
                values.update(status=RecurringStatus.EXHAUSTED.value, active_key=None, ended_at=now)
            conn.execute(update(R).where(R.c.recurring_id == recurring_id).values(**values))
            return True

        return self._run(work)

    def _end(
        self, conn: Connection, ids: Sequence[uuid.UUID], status: RecurringStatus, now: datetime
    ) -> None:
        if ids:
            conn.execute(
                update(R)
                .where(R.c.recurring_id.in_(list(ids)), R.c.status == ACTIVE)
                .values(
                    status=status.value,
                    active_key=None,
                    next_fire=None,
                    ended_at=now,
                    updated_at=now,
                )
            )

    def cancel_recurring(self, recurring_id: uuid.UUID, *, now: datetime) -> bool:
        def work(conn: Connection) -> bool:
            if self._locked_master(conn, recurring_id) is None:
                return False
            self._end(conn, [recurring_id], RecurringStatus.CANCELED, now)
            return True

        return self._run(work)

    def cancel_recurring_by_business_key(self, business_key: str, *, now: datetime) -> int:
        key = business_key.strip()

        def work(conn: Connection) -> int:
            stmt = select(R.c.recurring_id).where(R.c.active_key == key)
            ids = list(conn.execute(self.dialect.lock_rows(stmt)).scalars())
            self._end(conn, ids, RecurringStatus.CANCELED, now)
            return len(ids)

        return self._run(work)

    def cancel_recurring_by_tag(self, tag: str, *, now: datetime) -> int:
        norm = tag.strip().lower()

        def work(conn: Connection) -> int:
            stmt = select(R.c.recurring_id).where(
                R.c.status == ACTIVE,
                R.c.recurring_id.in_(select(RT.c.recurring_id).where(RT.c.tag == norm)),
            )
            ids = list(conn.execute(self.dialect.lock_rows(stmt)).scalars())
            self._end(conn, ids, RecurringStatus.CANCELED, now)
            return len(ids)

        return self._run(work)

    # ------------------------------------------------------------------ materializer
    def materialize_recurring(
        self, node_id: str, *, now: datetime, limit: int, plan: FirePlanner
    ) -> tuple[int, list[MaterializedFire]]:
        if limit <= 0:
            return 0, []
        is_due = (R.c.is_paused == false(), R.c.next_fire <= now, R.c.status == ACTIVE)
        # A cheap read first: most runs find nothing due and then take no write lock at all.
        probe = select(R.c.recurring_id).where(*is_due).limit(1)
        if self._run(lambda conn: conn.execute(probe).first(), write=False) is None:
            return 0, []
        due = select(R).where(*is_due).order_by(R.c.next_fire, R.c.recurring_id).limit(limit)

        def work(conn: Connection) -> tuple[int, list[MaterializedFire]]:
            rows = conn.execute(self.dialect.lock_for_claim(due)).all()
            jobs: list[NewJob] = []
            owners: list[uuid.UUID] = []
            for row in rows:
                master = _to_record(row)
                try:
                    decision = plan(master, now)
                except Exception:
                    log.exception(
                        "recurring master %s (%s): could not plan its fires; retrying in %s",
                        master.recurring_id,
                        master.cron,
                        PLAN_ERROR_DELAY,
                    )
                    conn.execute(
                        update(R)
                        .where(R.c.recurring_id == master.recurring_id)
                        .values(next_fire=now + PLAN_ERROR_DELAY, updated_at=now)
                    )
                    continue
                values: dict[str, Any] = {
                    "next_fire": decision.next_fire,
                    "last_fire": decision.last_fire,
                    "updated_at": now,
                }
                if decision.next_fire is None:
                    values.update(
                        status=RecurringStatus.EXHAUSTED.value, active_key=None, ended_at=now
                    )
                # Compare-and-set on the old next fire: a master another node advanced since
                # our read is not ours any more (never happens under the claim lock; cheap).
                moved = conn.execute(
                    update(R)
                    .where(
                        R.c.recurring_id == master.recurring_id,
                        R.c.next_fire == row.next_fire,
                        R.c.status == ACTIVE,
                    )
                    .values(**values)
                ).rowcount
                if moved == 1:
                    jobs.extend(decision.jobs)
                    owners.extend(master.recurring_id for _ in decision.jobs)
            results = self._insert(conn, jobs, now) if jobs else []
            fires = [
                MaterializedFire(r.job_id, owner, j.scheduled_time, j.target, r.inserted)
                for j, owner, r in zip(jobs, owners, results, strict=True)
            ]
            return len(rows), fires

        return self._run(work)

    # ------------------------------------------------------------------ decorators
    def sync_recurring(
        self,
        definitions: Sequence[NewRecurring],
        *,
        now: datetime,
        next_fire: NextFireFn,
        owns: Callable[[str], bool] | None = None,
    ) -> SyncReport:
        wanted: dict[str, NewRecurring] = {}
        for d in definitions:
            if not d.business_key:
                raise ValueError(f"decorator master {d.target} has no business key (its id)")
            wanted[d.business_key] = d

        def work(conn: Connection) -> SyncReport:
            stmt = select(R).where(
                R.c.status == ACTIVE,
                or_(
                    R.c.source == RecurringSource.DECORATOR.value,
                    R.c.active_key.in_(list(wanted)),
                ),
            )
            existing = {r.active_key: r for r in conn.execute(self.dialect.lock_rows(stmt))}
            created: list[str] = []
            updated: list[str] = []
            unchanged: list[str] = []
            for key, d in wanted.items():
                row = existing.pop(key, None)
                if row is None:
                    self._insert_master(conn, d, now)
                    created.append(key)
                    continue
                current = _to_record(row)
                if current.definition() == d.definition() and current.source is d.source:
                    unchanged.append(key)
                    continue
                values: dict[str, Any] = {
                    **_columns(d),
                    "source": d.source.value,
                    "updated_at": now,
                }
                if (current.cron, current.zone) != (d.cron, d.zone):
                    following = next_fire(d.cron, d.zone, now)
                    values["next_fire"] = following
                    if following is None:
                        values.update(
                            status=RecurringStatus.EXHAUSTED.value, active_key=None, ended_at=now
                        )
                conn.execute(update(R).where(R.c.recurring_id == row.recurring_id).values(**values))
                if current.tags != d.tags:
                    self._set_tags(conn, row.recurring_id, d.tags)
                updated.append(key)
            removed = [
                r
                for r in existing.values()
                if r.source == RecurringSource.DECORATOR.value and (owns is None or owns(r.target))
            ]
            self._end(conn, [r.recurring_id for r in removed], RecurringStatus.CANCELED, now)
            return SyncReport(
                tuple(created),
                tuple(updated),
                tuple(unchanged),
                tuple(r.active_key for r in removed),
            )

        return self._run(work)

    # ------------------------------------------------------------------ leases
    def try_lock(self, name: str, owner: str, *, now: datetime, lease: timedelta) -> bool:
        def work(conn: Connection) -> bool:
            stmt = select(LOCK).where(LOCK.c.lock_name == name)
            row = conn.execute(self.dialect.lock_rows(stmt)).first()
            if row is None:
                conn.execute(
                    insert(LOCK).values(
                        lock_name=name, owner_node=owner, locked_at=now, expires_at=now + lease
                    )
                )
                return True
            if row.owner_node != owner and row.expires_at > now:
                return False
            conn.execute(
                update(LOCK)
                .where(LOCK.c.lock_name == name)
                .values(owner_node=owner, locked_at=now, expires_at=now + lease)
            )
            return True

        try:
            return self._run(work)
        except IntegrityError:
            return False  # another node inserted the lease first

    def release_lock(self, name: str, owner: str) -> bool:
        def work(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    delete(LOCK).where(LOCK.c.lock_name == name, LOCK.c.owner_node == owner)
                ).rowcount
            )

        return self._run(work)
