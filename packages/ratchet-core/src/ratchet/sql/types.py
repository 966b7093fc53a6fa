"""Column types shared by every dialect."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import CHAR, types
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Dialect

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    if value.tzinfo is None:
        raise ValueError("naive datetime given where an aware UTC time is required")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """The aware UTC datetime of a microsecond timestamp."""
    return _EPOCH + timedelta(microseconds=value)


class UTCMicros(types.TypeDecorator[datetime]):
    """An aware datetime stored as a BIGINT of microseconds since the epoch (UTC).

    Integers compare, index and subtract the same way on every database, so the claim's age boost
    is one expression for all dialects.
    """

    impl = types.BigInteger
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> int | None:
        return None if value is None else to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else from_micros(int(value))


class UUIDType(types.TypeDecorator[uuid.UUID]):
    """UUIDs: native on PostgreSQL, BINARY(16) on MySQL, 32 hex chars elsewhere.

    All three keep UUIDv7's time order under byte/string comparison.
    """

    impl = CHAR(32)
    cache_ok = True

    @staticmethod
    def storage(dialect: Dialect) -> str:
        """How ``dialect`` stores the UUID: ``native``, ``bytes`` (16) or ``hex`` (32 chars)."""
        if dialect.name == "postgresql":
            return "native"
        if dialect.name in ("mysql", "mariadb"):
            return "bytes"
        return "hex"

    def load_dialect_impl(self, dialect: Dialect) -> types.TypeEngine[Any]:
        kind = self.storage(dialect)
        if kind == "native":
            return dialect.type_descriptor(postgresql.UUID(as_uuid=True))
        if kind == "bytes":
            return dialect.type_descriptor(mysql.BINARY(16))
        return dialect.type_descriptor(CHAR(32))

    def process_bind_param(self, value: uuid.UUID | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, uuid.UUID):
            value = uuid.UUID(str(value))
        kind = self.storage(dialect)
        if kind == "native":
            return value
        if kind == "bytes":
            return value.bytes
        return value.hex

    def process_result_value(self, value: Any, dialect: Dialect) -> uuid.UUID | None:
        if value is None:
            return None
        if isinstance(value, uuid.UUID):
            return value
        if isinstance(value, (bytes, bytearray)):
            return uuid.UUID(bytes=bytes(value))
        return uuid.UUID(hex=str(value))
