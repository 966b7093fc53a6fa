"""Job targets: turning a callable into a stored ``module:qualname`` reference and back."""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratchet.domain.errors import InvalidJobArguments, InvalidJobTarget, UnknownJobTarget


@dataclass(frozen=True)
class TargetRef:
    """A stored reference to a callable: ``module:qualname``.

    ``bean`` is True for a method of a class whose instance the BeanResolver supplies.
    """

    module: str
    qualname: str
    bean: bool = False

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}" + ("#bean" if self.bean else "")

    @property
    def service_name(self) -> str:
        """The default circuit-breaker service name: module + qualname."""
        return f"{self.module}.{self.qualname}"

    @classmethod
    def parse(cls, text: str) -> TargetRef:
        """Inverse of ``str()``."""
        body, _, flag = text.partition("#")
        module, sep, qualname = body.partition(":")
        if not sep or not module or not qualname:
            raise UnknownJobTarget(f"stored job target {text!r} is not of the form module:qualname")
        return cls(module, qualname, flag == "bean")


#: The references of module-level functions already checked (a submission of many jobs of one
#: function checks it once); an entry stands only while its module still names the function.
_CHECKED: weakref.WeakKeyDictionary[Any, TargetRef] = weakref.WeakKeyDictionary()


def target_of(fn: Callable[..., Any]) -> TargetRef:
    """The reference under which ``fn`` can be stored and found again by another process.

    Accepts module-level functions, static and class methods, and methods of classes (bound or
    not: the instance is supplied at run time by the BeanResolver).

    :raises InvalidJobTarget: lambdas, closures, nested functions, ``__main__`` callables,
        builtins and other objects that another process could not import.
    """
    if type(fn) is types.FunctionType:
        ref = _CHECKED.get(fn)
        # Still the function its module names (a redefinition makes the check run again).
        if ref is not None and getattr(sys.modules.get(ref.module), ref.qualname, None) is fn:
            return ref
        ref = _target_of(fn)
        if "." not in ref.qualname:
            _CHECKED[fn] = ref
        return ref
    return _target_of(fn)


def _target_of(fn: Callable[..., Any]) -> TargetRef:
    if not callable(fn):
        raise InvalidJobTarget(f"a job target must be callable, got {type(fn).__name__}")
    bean = False
    func: Any = fn
    if inspect.ismethod(fn):
        owner = fn.__self__
        func = fn.__func__
        bean = not isinstance(owner, type)
    name = getattr(func, "__name__", None)
    qualname = getattr(func, "__qualname__", None)
    module = getattr(func, "__module__", None)
    if name == "<lambda>":
        raise InvalidJobTarget(
            "lambdas cannot be job targets: a worker in another process could not find them. "
            "Define a module-level function and pass its arguments to enqueue()."
        )
    if not isinstance(qualname, str) or not isinstance(module, str):
        raise InvalidJobTarget(f"{fn!r} has no importable name; use a module-level function")
    if "<locals>" in qualname:
        raise InvalidJobTarget(
            f"{qualname} is a nested function or closure; a worker could not import it. "
            "Move it to module level."
        )
    if module == "__main__":
        raise InvalidJobTarget(
            f"{qualname} is defined in __main__, which a worker process cannot import. "
            "Put job functions in an importable module."
        )
    if inspect.isbuiltin(func) or not (inspect.isfunction(func) or inspect.ismethod(fn)):
        raise InvalidJobTarget(
            f"{fn!r} is not a Python function; wrap it in a module-level function"
        )
    if "." in qualname and not bean:
        # Defined in a class: decide between static/class method and a bean method.
        owner_cls = _walk(importlib.import_module(module), qualname.rsplit(".", 1)[0])
        raw = inspect.getattr_static(owner_cls, str(name))
        bean = not isinstance(raw, (staticmethod, classmethod))
    ref = TargetRef(module, qualname, bean)
    try:
        resolved = resolve_attribute(ref)
    except UnknownJobTarget as exc:
        raise InvalidJobTarget(f"{ref} is not importable by that name: {exc}") from None
    if not bean and getattr(resolved, "__func__", resolved) is not func:
        raise InvalidJobTarget(
            f"{module}:{qualname} does not name this function (was it redefined or decorated "
            "without functools.wraps?)"
        )
    return ref


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a signature accepts when called with positional arguments only, if that is a range
    of counts (no keyword-only parameter without a default): ``low`` to ``high`` arguments
    (``high`` None: any number above ``low``)."""

    low: int
    high: int | None


def _shape(signature: inspect.Signature) -> _Shape | None:
    low, high, unbounded = 0, 0, False
    for p in signature.parameters.values():
        if p.kind in _POSITIONAL:
            high += 1
            if p.default is p.empty:
                low = high
        elif p.kind is p.VAR_POSITIONAL:
            unbounded = True
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return None
    return _Shape(low, None if unbounded else high)


_Signatures = tuple[inspect.Signature, inspect.Signature, _Shape | None, _Shape | None] | None
_SIGNATURES: weakref.WeakKeyDictionary[Any, _Signatures] = weakref.WeakKeyDictionary()
_SIGNATURES_LOCK = threading.Lock()
_UNREAD: Any = object()
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _signatures(func: Any) -> _Signatures:
    """The signature of ``func`` as it is, and without its first parameter (for methods whose
    ``self`` or ``cls`` the worker supplies); None when it cannot be read. Cached per function.

    A decorated function is checked as its wrapper (the object the worker calls) accepts.
    """
    try:
        cached = _SIGNATURES.get(func, _UNREAD)  # a read needs no lock
    except TypeError:  # not weakly referenceable: read it every time
        cached = _UNREAD
    if cached is not _UNREAD:
        return cached  # type: ignore[no-any-return]
    try:
        full = inspect.signature(func, follow_wrapped=False)
    except (TypeError, ValueError):
        found: _Signatures = None
    else:
        params = list(full.parameters.values())
        rest = params[1:] if params and params[0].kind in _POSITIONAL else params
        method = full.replace(parameters=rest)
        found = (full, method, _shape(full), _shape(method))
    try:
        with _SIGNATURES_LOCK:
            _SIGNATURES[func] = found
    except TypeError:
        pass
    return found


def check_arguments(
    fn: Callable[..., Any],
    ref: TargetRef,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    what: str = "",
) -> None:
    """Refuse a call that ``fn``'s signature cannot accept (checked at submit, not at run time).

    Skipped when the signature cannot be read. ``what`` prefixes the message (e.g. "batch item
    function").

    :raises InvalidJobArguments: too many or too few positional arguments, a missing or an
        unexpected keyword.
    """
    bound_method = inspect.ismethod(fn)
    found = _signatures(getattr(fn, "__func__", fn) if bound_method else fn)
    if found is None:
        return
    as_method = bound_method or ref.bean
    shape = found[3] if as_method else found[2]
    # Positional arguments only: their count decides.
    if (
        shape is not None
        and not kwargs
        and shape.low <= len(args)
        and (shape.high is None or len(args) <= shape.high)
    ):
        return
    signature = found[1] if as_method else found[0]
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"{len(args)} positional argument{'s' if len(args) != 1 else ''}"
        if kwargs:
            given += f" and the keyword{'s' if len(kwargs) != 1 else ''} {', '.join(kwargs)}"
        plain = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        prefix = f"{what} " if what else ""
        raise InvalidJobArguments(
            f"{prefix}{ref} cannot be called with {given}: {exc}; it takes "
            f"{ref.qualname.rsplit('.', 1)[-1]}{plain}"
        ) from None


def _walk(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_attribute(ref: TargetRef) -> Any:
    """Import the module and walk the qualname.

    :raises UnknownJobTarget: the module or attribute does not exist (any more).
    """
    try:
        module = importlib.import_module(ref.module)
    except ImportError as exc:
        raise UnknownJobTarget(
            f"cannot import module {ref.module!r} of job target {ref}: {exc}"
        ) from exc
    try:
        return _walk(module, ref.qualname)
    except AttributeError:
        raise UnknownJobTarget(f"module {ref.module!r} has no attribute {ref.qualname!r}") from None


def owner_class(ref: TargetRef) -> type:
    """The class that defines a bean method."""
    cls = resolve_attribute(TargetRef(ref.module, ref.qualname.rsplit(".", 1)[0]))
    if not isinstance(cls, type):
        raise UnknownJobTarget(f"{ref} does not name a method of a class")
    return cls
