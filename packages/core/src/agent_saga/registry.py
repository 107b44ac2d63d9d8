"""Named compensators, and the shorthand that pairs a forward function with its inverse.

A closure cannot cross a process boundary; a name can. Registering an inverse under
a stable name (``@compensator("stripe.refund")``) is what lets a recovery daemon in
another process run it after this one has died.
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FunctionType
from typing import Any, TypeVar

from agent_saga.errors import CompensationError, ConfigurationError
from agent_saga.jsonpath import ArgTemplate, Unresolved
from agent_saga.semantics import Compensation

__all__ = [
    "CompensationFactory",
    "call_with",
    "compensator",
    "delete_by",
    "from_recipe",
    "handler_name",
    "inverse_for",
    "inverse_of",
    "reconciler",
    "reconciler_for",
    "recoverable",
    "registered",
    "resolve",
    "unregister",
    "unregister_reconciler",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
CompensationFactory = Callable[[Any], "Compensation | Mapping[str, Any] | None"]

_lock = threading.Lock()
_handlers: dict[str, Callable[..., Any]] = {}
_names: dict[int, str] = {}  # id(fn) -> name, to find a function's handler name
# Pairings live on the forward function itself (attribute _PAIRED), like DBOS keeps its
# registrations: a dict keyed by id() would hand a collected function's undo to whatever
# unrelated function later gets the same id. Callables that take no attribute are kept
# in a weak mapping; the set of paired functions is only for unregister().
_PAIRED = "__saga_inverse__"
_pairings_fallback: weakref.WeakKeyDictionary[Any, CompensationFactory] = weakref.WeakKeyDictionary()
_paired: weakref.WeakSet[Any] = weakref.WeakSet()
_reconcilers: dict[str, Callable[..., Any]] = {}  # tool or compensator name -> observer


def _identity(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def compensator(name: str) -> Callable[[F], F]:
    """Register ``fn`` as the undo handler called ``name``.

    The same name may be registered again only for the same function (a module
    reload); reusing a name for a different function is refused, because the
    daemon would then run whichever was imported last.
    """
    _require_name("compensator", name)

    def register(fn: F) -> F:
        with _lock:
            _claim(_handlers, name, fn, "compensator", "compensation handler",
                   ". Pick a distinct name per inverse (for example 'stripe.refund' and 'stripe.void')")
            _names[id(fn)] = name
        return fn

    return register


def _require_name(decorator: str, name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"@{decorator} needs a non-empty name, got {name!r}")


def _claim(
    table: dict[str, Callable[..., Any]], name: str, fn: Callable[..., Any], decorator: str, kind: str, hint: str
) -> None:
    """Register ``fn`` in ``table`` as ``name`` (the caller holds ``_lock``).

    The same function again is a module reload and is fine; another function under a taken
    name is refused, because whichever module was imported last would silently win.
    """
    if not callable(fn):
        raise ConfigurationError(f"@{decorator}({name!r}) must decorate a callable")
    existing = table.get(name)
    if existing is not None and existing is not fn and _identity(existing) != _identity(fn):
        raise ConfigurationError(
            f"{kind} name {name!r} is already registered to {_identity(existing)}; "
            f"{_identity(fn)} cannot reuse it{hint}"
        )
    table[name] = fn


def registered(name: str) -> bool:
    """Whether a handler of that name is registered in this process."""
    return name in _handlers


def recoverable(comp: Compensation) -> bool:
    """Can another process run this undo after this one is dead?

    Only a named handler with JSON kwargs (checked when the Compensation was built)
    can be; whether the name is registered is asked now, so a handler registered
    after the Compensation was built counts.
    """
    return comp.handler is not None and comp.handler in _handlers


def handler_fn(name: str) -> Callable[..., Any] | None:
    """The function registered under ``name``, or None: the check every undo with a handler gets."""
    return _handlers.get(name)


def resolve(name: str) -> Callable[..., Any]:
    """The function registered under ``name``; a clear KeyError otherwise."""
    return lookup(_handlers, name, "compensation handler", "import the module that declares it with @compensator")


def lookup(table: Mapping[str, T], name: str, kind: str, fix: str) -> T:
    """``table[name]``, from a table of things registered by name in this process; else a
    KeyError that lists what is registered and says ``fix`` (how to register the missing one)."""
    try:
        return table[name]
    except KeyError:
        known = ", ".join(sorted(table)) or "none"
        raise KeyError(f"no {kind} named {name!r} is registered in this process (registered: {known}); {fix}") from None


def handler_name(fn: Callable[..., Any]) -> str | None:
    """The registered name of ``fn``, if it was registered with ``@compensator``."""
    name = _names.get(id(fn))
    if name is None:  # a bound method is a fresh object on every access: compare by equality
        name = next((n for n, registered_fn in _handlers.items() if registered_fn == fn), None)
    return name


def unregister(name: str) -> None:
    """Forget a handler (for tests and reloads), and every pairing that used it."""
    with _lock:
        fn = _handlers.pop(name, None)
        if fn is not None:
            _names.pop(id(fn), None)
        for forward in list(_paired):
            factory = _paired_factory(forward)
            if isinstance(factory, _FieldMap) and factory.handler == name:
                _unpair(forward)


def _require_registered(fn: Callable[..., Any], what: str) -> str:
    name = handler_name(fn)
    if name is None:
        raise CompensationError(
            f"{what}: {_identity(fn)} is not registered with @compensator, so a recovery "
            "daemon could not run it after a crash. Decorate it with @compensator('some.name') "
            "(below the pairing decorator)"
        )
    return name


@dataclass(frozen=True, slots=True)
class _FieldMap:
    """A factory that builds a Compensation from named fields of the forward result."""

    fn: Callable[..., Any]
    handler: str
    maps: Mapping[str, str]
    what: str

    @property
    def known_before_call(self) -> bool:
        """An inverse that takes nothing from the result is known before the forward call."""
        return not self.maps

    @property
    def recipe(self) -> dict[str, Any]:
        """How to build this undo from a result, as data another process can follow."""
        return {"handler": self.handler, "maps": dict(self.maps)}

    def __call__(self, result: Any) -> Compensation | None:
        kwargs: dict[str, Any] = {}
        for param, source in self.maps.items():
            try:
                kwargs[param] = result[source]
            except (KeyError, IndexError, TypeError):
                try:
                    kwargs[param] = getattr(result, source)
                except AttributeError:
                    seen = sorted(result) if isinstance(result, Mapping) else repr(result)[:80]
                    raise CompensationError(
                        f"{self.what} needs field {source!r} of the forward result for argument "
                        f"{param!r} of {self.handler!r}, but the result has {seen}"
                    ) from None
        return Compensation(fn=self.fn, handler=self.handler, kwargs=kwargs)


@dataclass(frozen=True, slots=True)
class _Prebound:
    """A factory whose Compensation is known before the forward call runs.

    It ignores the result, so it stays correct when the outcome is UNKNOWN: this is
    what lets an interrupted effect be undone after a crash.
    """

    fn: Callable[..., Any]
    handler: str
    kwargs: Mapping[str, Any]
    known_before_call = True

    def __call__(self, result: Any) -> Compensation:
        return Compensation(fn=self.fn, handler=self.handler, kwargs=dict(self.kwargs))


def inverse_of(forward: Callable[..., Any], *, maps: Mapping[str, str]) -> Callable[[F], F]:
    """Declare the decorated (registered) function as the undo of ``forward``.

    ``maps`` says where each argument of the inverse comes from in the forward
    result: ``{"charge_id": "id"}`` calls ``refund(charge_id=result["id"])``.
    ``maps={}`` declares an inverse that needs nothing from the result: it is known
    before the call, so it can also undo a step whose outcome is UNKNOWN.
    A tool over ``forward`` declared COMPENSABLE without ``compensate=`` then finds
    this pairing. It raises here, at import time, if the inverse is not registered.
    """
    if not callable(forward):
        raise ConfigurationError(f"inverse_of needs the forward function, got {forward!r}")
    if not isinstance(maps, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in maps.items()
    ):
        raise ConfigurationError(
            "inverse_of needs maps={inverse_arg: result_field, ...} (strings; {} for an inverse that "
            "takes nothing from the result)"
        )

    def pair(fn: F) -> F:
        what = f"@inverse_of({_identity(forward)})"
        name = _require_registered(fn, what)
        params = inspect.signature(fn).parameters
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        unknown = [p for p in maps if p not in params and not accepts_any]
        if unknown:
            raise CompensationError(
                f"{what}: maps names {unknown} but {name!r} takes {list(params)}"
            )
        with _lock:
            _pair(forward, _FieldMap(fn, name, dict(maps), what))
        return fn

    return pair


def _wrapped_chain(fn: Any) -> list[Any]:
    """``fn`` and everything it wraps (``functools.wraps``): a pairing declared on a decorated
    tool must be found whichever layer the engine is handed (it runs the innermost)."""
    chain: list[Any] = []
    while fn is not None and all(fn is not seen for seen in chain):
        chain.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return chain


def _pair(forward: Any, factory: CompensationFactory) -> None:
    for target in _wrapped_chain(forward):
        try:
            setattr(target, _PAIRED, factory)
        except (AttributeError, TypeError):
            _pairings_fallback[target] = factory  # TypeError here: not weakly referenceable
        _paired.add(target)


def _unpair(forward: Any) -> None:
    for target in _wrapped_chain(forward):
        try:
            delattr(target, _PAIRED)
        except (AttributeError, TypeError):
            _pairings_fallback.pop(target, None)
        _paired.discard(target)


def _paired_factory(fn: Any) -> CompensationFactory | None:
    factory = getattr(fn, _PAIRED, None)
    if factory is None:
        try:
            factory = _pairings_fallback.get(fn)
        except TypeError:  # not weakly referenceable: it cannot have been paired
            return None
    return factory if callable(factory) else None


def inverse_for(forward: Callable[..., Any]) -> CompensationFactory | None:
    """The factory paired with ``forward`` by ``@inverse_of``, if any.

    Found on the function itself or on what it wraps (``functools.wraps``'s
    ``__wrapped__``, a ``partial``'s ``func``, a bound method's ``__func__``).
    """
    if type(forward) is FunctionType and not forward.__dict__:
        # A plain function carries its pairing and what it wraps (__wrapped__) as
        # attributes: with none, it has neither. Asked on every step without compensate=.
        return None
    seen: set[int] = set()
    target: Any = forward
    while target is not None and id(target) not in seen:
        seen.add(id(target))
        factory = _paired_factory(target)
        if factory is not None:
            return factory
        if isinstance(target, functools.partial):
            target = target.func
        else:
            target = getattr(target, "__wrapped__", None) or getattr(target, "__func__", None)
    return None


def delete_by(fn: Callable[..., Any], *, field: str = "id") -> CompensationFactory:
    """The commonest inverse: the forward call created something and returned its id.

    The id is the whole result when it is a str or int, else ``result[field]``;
    it is passed as the first parameter of the registered ``fn``.
    """
    name = _require_registered(fn, "delete_by")
    params = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "idempotency_key"
    ]
    if not params:
        raise CompensationError(f"delete_by: {name!r} takes no parameter to receive the id")
    return _DeleteBy(fn, name, params[0], field)


@dataclass(frozen=True, slots=True)
class _DeleteBy:
    fn: Callable[..., Any]
    handler: str
    param: str
    field: str

    @property
    def recipe(self) -> dict[str, Any]:
        return {"handler": self.handler, "delete_by": {"param": self.param, "field": self.field}}

    def __call__(self, result: Any) -> Compensation | None:
        if isinstance(result, (str, int)) and not isinstance(result, bool):
            return Compensation(fn=self.fn, handler=self.handler, kwargs={self.param: result})
        return _FieldMap(self.fn, self.handler, {self.param: self.field}, "delete_by")(result)


def from_recipe(recipe: Mapping[str, Any], result: Any) -> Compensation:
    """Build the undo a logged recipe describes from ``result`` (in any process).

    A recipe is what ``@inverse_of`` / ``delete_by`` / a policy entry write into a
    step's intent record: the handler's name and where its arguments come from. The
    handler must be registered here; a result that lacks a field raises naming it.
    """
    handler = recipe.get("handler")
    if not isinstance(handler, str):
        raise CompensationError(f"not an undo recipe (no handler name): {dict(recipe)!r}")
    fn = resolve(handler)
    if isinstance(recipe.get("maps"), Mapping):
        comp = _FieldMap(fn, handler, dict(recipe["maps"]), f"recipe of {handler!r}")(result)
    elif isinstance(recipe.get("delete_by"), Mapping):
        spec = recipe["delete_by"]
        comp = _DeleteBy(fn, handler, str(spec.get("param")), str(spec.get("field", "id")))(result)
    elif isinstance(recipe.get("paths"), Mapping):
        comp = Compensation(fn=fn, handler=handler, kwargs=_from_paths(recipe, handler, result))
    else:
        raise CompensationError(f"recipe of {handler!r} says neither maps, delete_by nor paths: {dict(recipe)!r}")
    assert comp is not None
    return comp


def _from_paths(recipe: Mapping[str, Any], handler: str, result: Any) -> dict[str, Any]:
    """The kwargs of a policy's recipe: its literals as they are, its paths and templates read from ``result``."""
    kwargs = dict(recipe.get("literals") or {})
    written = {param: str(text) for param, text in recipe["paths"].items()}
    templates = recipe.get("templates")
    if isinstance(templates, Mapping):
        written.update(templates)
    try:
        kwargs.update(ArgTemplate.parse(written).resolve(result))
    except (Unresolved, ValueError) as err:
        raise CompensationError(f"recipe of {handler!r}: {err}") from None
    return kwargs


def call_with(fn: Callable[..., Any], **kwargs: Any) -> CompensationFactory:
    """An inverse whose arguments are known before the forward call.

    Because it does not depend on the result, it is recorded with the step's
    intent and can undo a step whose outcome is UNKNOWN, even after a crash.
    """
    name = _require_registered(fn, "call_with")
    Compensation(fn=fn, handler=name, kwargs=kwargs)  # validate (JSON kwargs) now
    return _Prebound(fn, name, dict(kwargs))


def is_prebound(factory: object) -> bool:
    """Whether ``factory`` is declared to build its Compensation without the result."""
    return bool(getattr(factory, "known_before_call", False))


def reconciler(name: str) -> Callable[[F], F]:
    """Register ``fn`` as the way to ask the outside system what ``name`` really did.

    ``name`` is a forward tool's name (then ``fn`` is called with the step's logged
    arguments and its ``idempotency_key`` and answers whether that effect landed)
    or a compensator's name, the same as its ``@compensator`` (then it is called
    with the compensation's kwargs and answers whether the undo is in effect).
    ``fn`` may be sync or async and returns an :class:`~agent_saga.Observation`.
    One reconciler per name, for the same reason as compensators.
    """
    _require_name("reconciler", name)

    def register(fn: F) -> F:
        with _lock:
            _claim(_reconcilers, name, fn, "reconciler", "reconciler", "")
        return fn

    return register


def reconciler_for(name: str) -> Callable[..., Any] | None:
    """The reconciler registered under ``name`` (a tool's or a compensator's), if any."""
    return _reconcilers.get(name)


def unregister_reconciler(name: str) -> None:
    """Forget a reconciler (for tests and reloads)."""
    with _lock:
        _reconcilers.pop(name, None)
