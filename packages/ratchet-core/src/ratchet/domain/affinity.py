"""Node tag affinity (pure): which nodes may run a job.

A worker declares *node tags* (``ratchet worker --tags gpu,eu``). A job may *require* tags (every
one must be among the node's) and *exclude* tags (none may be among the node's). A job with
neither runs anywhere. The claim applies :meth:`Affinity.allows` in the database; this module is
the rule it renders and the oracle its tests compare against.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ratchet.domain.errors import ConfigurationError, InvalidJobOptions

MAX_NODE_TAG_LENGTH = 64
_TAG = re.compile(r"[a-z0-9][a-z0-9_.:-]*")


class InvalidTag(InvalidJobOptions, ConfigurationError):
    """A node or affinity tag is malformed (it must be 1..64 of ``a-z 0-9 _ . : -`` after trimming
    and lower-casing, starting with a letter or digit): a job option, or a worker's setting."""


class ConflictingAffinity(InvalidJobOptions):
    """A job both requires and excludes the same tag: no node could ever run it."""


def node_tag(value: object, what: str = "node tag") -> str:
    """``value`` trimmed and lower-cased, if it is a well-formed tag.

    :raises InvalidTag: not a string, blank, longer than 64 characters, or other characters.
    """
    if not isinstance(value, str):
        raise InvalidTag(f"{what} must be a string, got {type(value).__name__}")
    tag = value.strip().lower()
    if not tag:
        raise InvalidTag(f"{what} must not be blank")
    if len(tag) > MAX_NODE_TAG_LENGTH:
        raise InvalidTag(
            f"{what} {tag[:20]!r}... is {len(tag)} characters; at most {MAX_NODE_TAG_LENGTH}"
        )
    if _TAG.fullmatch(tag) is None:
        raise InvalidTag(
            f"{what} {tag!r} is malformed: use letters, digits, '_', '.', ':' and '-', "
            "starting with a letter or digit (e.g. 'gpu', 'region:eu-west')"
        )
    return tag


def node_tags(values: str | Iterable[object], what: str = "node tag") -> frozenset[str]:
    """A set of well-formed tags from an iterable, or from a comma-separated string
    (``"gpu, eu"``; empty items between commas are ignored).

    :raises InvalidTag: a malformed tag (see :func:`node_tag`).
    """
    items: Iterable[object] = values.split(",") if isinstance(values, str) else values
    if isinstance(values, str):
        items = [item for item in items if isinstance(item, str) and item.strip()]
    return frozenset(node_tag(item, what) for item in items)


@dataclass(frozen=True)
class Affinity:
    """The node tags a job requires and excludes."""

    require: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "require", node_tags(self.require, "required tag"))
        object.__setattr__(self, "exclude", node_tags(self.exclude, "excluded tag"))
        both = self.require & self.exclude
        if both:
            raise ConflictingAffinity(
                f"tag(s) {', '.join(sorted(both))} are both required and excluded: no node could "
                "run the job; drop them from one of require_tags / exclude_tags"
            )

    @property
    def empty(self) -> bool:
        """True when the job runs on any node."""
        return not (self.require or self.exclude)

    def allows(self, tags: Iterable[str]) -> bool:
        """Whether a node with ``tags`` may run the job: it has every required tag and no
        excluded one."""
        have = tags if isinstance(tags, frozenset) else frozenset(tags)
        return self.require <= have and not (self.exclude & have)


NO_AFFINITY = Affinity()


def runnable_anywhere(affinity: Affinity, nodes: Iterable[Iterable[str]]) -> bool:
    """Whether any of ``nodes`` (each a node's tags) may run a job with ``affinity``."""
    return any(affinity.allows(tags) for tags in nodes)


@dataclass(frozen=True)
class StrandedJob:
    """A live job that no live node may run (its affinity is not satisfied by any node's tags)."""

    job_id: uuid.UUID
    status: str
    target: str
    affinity: Affinity
    waiting_since: datetime
    """When it became due."""
