"""UUIDv7 ids: ordered, versioned, and never repeated by a forked child."""

from __future__ import annotations

import copy
import os
import pickle
import sys
import uuid

import pytest

from ratchet.ids import uuid7

RANDOM_BITS = (1 << 62) - 1


def test_ids_are_version_7_unique_and_ordered() -> None:
    ids = [uuid7() for _ in range(5000)]  # several refills of the random buffer
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert len({i.int & RANDOM_BITS for i in ids}) == len(ids)


def test_an_id_behaves_as_the_uuid_parsed_from_its_text() -> None:
    made = uuid7()  # built without uuid.UUID's __init__
    parsed = uuid.UUID(str(made))
    assert made == parsed and hash(made) == hash(parsed) and made.bytes == parsed.bytes
    assert made.is_safe is parsed.is_safe
    assert pickle.loads(pickle.dumps(made)) == parsed
    assert copy.deepcopy(made) == parsed
    with pytest.raises(TypeError):
        made.int = 0  # type: ignore[misc]


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_does_not_reuse_the_parents_random_bits() -> None:
    uuid7()  # the buffer now holds unused random bytes that the child inherits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, uuid7().bytes)
        os._exit(0)
    os.close(write)
    child = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    mine = uuid7()
    assert int.from_bytes(child, "big") & RANDOM_BITS != mine.int & RANDOM_BITS
