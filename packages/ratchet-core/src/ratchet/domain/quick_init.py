"""A faster ``__init__`` for frozen dataclasses built once per job on the worker's hot path.

A frozen dataclass's generated ``__init__`` stores each field with ``object.__setattr__``,
which costs about four times a plain assignment: an 11-field value takes 4.4 µs to build
instead of 1.1 µs. :func:`quick_init` gives such a class an ``__init__`` with the same
signature, defaults and ``__post_init__`` call that writes the fields into the instance's
``__dict__`` instead. Everything else (immutability, equality, hashing, ``repr``,
``dataclasses.replace``) stays the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_NO_VALUE = object()


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of the frozen dataclass ``cls`` (with a ``__dict__``: not
    ``slots=True``) by one that stores its fields straight into the instance's ``__dict__``.

    :raises TypeError: ``cls`` is not such a dataclass, or has a field that its ``__init__``
        does not take.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with a __dict__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__} has a field that __init__ does not take")
    if any(f.name == "self" or f.name.startswith("_quick_") for f in fields):
        raise TypeError(f"{cls.__name__} has a field whose name the generated __init__ uses")
    namespace: dict[str, Any] = {"_quick_no_value": _NO_VALUE}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            namespace[f"_quick_default_{f.name}"] = f.default
            declared = f"{f.name}=_quick_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_quick_factory_{f.name}"] = f.default_factory
            declared = f"{f.name}=_quick_no_value"
            body.append(
                f"    if {f.name} is _quick_no_value:\n        {f.name} = _quick_factory_{f.name}()"
            )
        else:
            declared = f.name
        (keyword if f.kw_only else positional).append(declared)
    body.append("    _quick_values = self.__dict__")
    body.extend(f"    _quick_values[{f.name!r}] = {f.name}" for f in fields)
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}) -> None:\n" + "\n".join(body) + "\n"
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
