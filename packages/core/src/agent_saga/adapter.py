"""The adapter kit: what a framework adapter needs from the core, in one public module.

An adapter distribution (``agent-saga-<framework>``) imports this module, the top-level
``agent_saga`` API and its framework, nothing else of the core. The shape follows
OpenTelemetry's ``BaseInstrumentor``: one base class carries the plumbing, so an
adapter says only what is particular to its framework::

    # agent_saga_gadgets/__init__.py
    from agent_saga.adapter import require_framework
    require_framework("agent-saga-gadgets", "gadgets")   # before the framework is imported
    from agent_saga_gadgets._adapter import adapter, saga_run   # noqa: E402
    wrap_tool = adapter.wrap_tool

    # agent_saga_gadgets/_adapter.py
    class Gadgets(Adapter):
        framework = "gadgets"                    # the entry point's name and the extra's
        distribution = "agent-saga-gadgets"
        tool_types = (gadgets.Tool,)

        def function_of(self, tool):             # the Python function behind a tool
            return tool.fn

        def wrap_with_spec(self, tool, spec):    # same type, name, description, schema
            return tool.copy(fn=self.step(spec, tool.fn))

    adapter = Gadgets()                          # entry point: "agent_saga_gadgets._adapter:adapter"

From that the base class gives: the public ``wrap_tool(tool, *, semantics=None,
name=None, options=None, **options)`` taking every step option; the pluggy hooks
``agent_saga_wrap_tool`` (for :func:`agent_saga.wrap_tool`), ``agent_saga_patch`` and
``agent_saga_unpatch`` (for :func:`agent_saga.patch_all`); "already wrapped" and
"already patched" bookkeeping; the calls a patched runtime makes
(:meth:`Adapter.patched_sync` / :meth:`Adapter.patched_async`); and the boundary behind
every run helper (:meth:`Adapter.boundary`), which takes every saga option. A run helper
passes its caller's saga options through whole::

    async def saga_run(agent, *, options=None, **run):    # options: a SagaOptions, or keywords
        saga, run = split_saga_options(run)               # name=, wal=, gate=, tags=, ...
        async with adapter.boundary(options=options, **saga):
            return await agent.run(**run)

A framework that knows a model response's tool calls before it runs them hands them to
:meth:`Adapter.planned` (one line: ``adapter.planned((c.name, c.args) for c in calls)``), so a
:class:`~agent_saga.Speculator` attached to the saga runs the REVERSIBLE ones ahead;
:meth:`Adapter.steps` gives a Speculator the step functions behind wrapped tools.

Also here: :func:`carry` (the saga onto a framework's own threads),
:func:`require_framework` and :class:`FrameworkUnsupported` (the version check an
adapter makes on itself, and what its ``_compat`` module raises when the framework
moved), :func:`check_compat` (that ``_compat`` check), :func:`signature_of`,
:func:`split_saga_options` and :class:`Patches`.
"""

from __future__ import annotations

import abc
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar, TypeVar, Unpack, cast

from agent_saga.context import Boundary, current_saga
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions, positional_wal, split_saga_options
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.log.base import WAL
from agent_saga.plugins import support
from agent_saga.plugins.arguments import refusing_unbound
from agent_saga.plugins.config import PatchConfig
from agent_saga.plugins.discovery import FrameworkUnsupported, require_framework
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.patching import Patches
from agent_saga.plugins.propagation import carry
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import SPEC_ATTR, ToolSpec, signature_of

__all__ = [
    "SPEC_ATTR",
    "Adapter",
    "FrameworkUnsupported",
    "Patches",
    "SagaKwargs",
    "SagaOptions",
    "StepKwargs",
    "StepOptions",
    "ToolSpec",
    "carry",
    "check_compat",
    "require_framework",
    "signature_of",
    "split_saga_options",
]

T = TypeVar("T")


class Adapter(abc.ABC):
    """The base of every framework adapter; one instance per adapter, its entry point's target.

    A subclass sets :attr:`framework`, :attr:`distribution` and :attr:`tool_types`,
    implements :meth:`wrap_with_spec`, and overrides what differs from the defaults:
    :meth:`function_of`, :meth:`framework_params`, :meth:`tool_name`, :meth:`spec_of`
    and :meth:`patch`.
    """

    #: The entry point's name in ``agent_saga_adapters``, which is also the name of the
    #: adapter distribution's extra that declares the supported framework range.
    framework: ClassVar[str]
    #: The adapter's own distribution (``agent-saga-<framework>``).
    distribution: ClassVar[str]
    #: The tool types ``wrap_tool`` takes.
    tool_types: ClassVar[tuple[type[Any], ...]]
    #: Said after "wrap_tool takes ..." when given anything else: how to make a tool it takes.
    hint: ClassVar[str] = ""
    #: The name of a run's saga when the caller gives none (None: :attr:`framework`).
    saga_name: ClassVar[str | None] = None

    def __init__(self) -> None:
        #: What :meth:`patch` replaced, so that ``unpatch`` restores exactly that.
        self.patches = Patches()

    # -- what a subclass says about its framework --------------------------------------

    @abc.abstractmethod
    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        """A copy of ``tool`` whose every call runs through ``spec`` (see :meth:`step`).

        Same type, name, description and argument schema as ``tool``. Called only with a
        tool of :attr:`tool_types` that is not wrapped yet.
        """

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        """The Python function behind ``tool`` (its signature names the logged arguments)."""
        return None

    def framework_params(self, fn: Callable[..., Any]) -> Collection[str]:
        """Parameters of ``fn`` that the framework fills (a run context, a token, callbacks).

        They reach ``fn`` but are never logged (:meth:`step`) nor named in the spec.
        """
        return ()

    def tool_name(self, tool: Any) -> str:
        """The name the model calls ``tool`` by (the step's default name)."""
        return str(tool.name)

    def spec_of(self, tool: Any) -> ToolSpec | None:
        """The spec a tool from :meth:`wrap_tool` runs under; None for any other tool."""
        return cast(ToolSpec | None, getattr(self.function_of(tool), SPEC_ATTR, None))

    def patch(self) -> None:  # noqa: B027 - optional: an adapter may have nothing to patch
        """Patch the framework's runtime with ``self.patches.apply(...)`` (see ``patch_all``).

        Replacements call :meth:`patched_sync` / :meth:`patched_async`. The default
        patches nothing.
        """

    # -- what the base class does with that ----------------------------------------------

    def recognises(self, tool: Any) -> bool:
        return isinstance(tool, self.tool_types)

    def refusal(self, tool: Any) -> str:
        """Why ``wrap_tool`` does not take ``tool`` (a tool of another type)."""
        takes = ", ".join(f"{t.__module__}.{t.__qualname__}" for t in self.tool_types)
        hint = f"; {self.hint}" if self.hint else ""
        return f"{self.distribution}'s wrap_tool takes {takes}, got {_qualname(tool)}{hint}"

    def is_wrapped(self, tool: Any) -> bool:
        """Whether ``tool`` came out of :meth:`wrap_tool` (its calls are steps already)."""
        return self.spec_of(tool) is not None

    def step(self, spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a saga step of ``spec``: same shape (sync or async), marked as wrapped.

        Inside a saga each call is a step; outside one it calls straight through (or
        refuses, with ``require_boundary``). :meth:`framework_params` reach ``fn``
        but are not logged. A call whose arguments ``fn`` cannot take raises
        ``NotApplied`` without calling it (``agent_saga.plugins.arguments``).
        """
        # A call the function's parameters cannot take never reaches it: not applied, not UNKNOWN.
        return spec.wrap(refusing_unbound(fn, spec.name), hidden=self.framework_params(fn))

    def wrap_tool(
        self,
        tool: T,
        *,
        semantics: ActionSemantics | str | None = None,
        name: str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> T:
        """``tool`` made a saga step: same type, name, description and argument schema.

        Takes every step option (``semantics`` is required, ``compensate`` maps the tool
        function's own return value to a ``Compensation``, ...; see
        :class:`~agent_saga.StepOptions`), or a ready ``options=``. ``name`` is the step's
        name in the log and the tool policy (default: the tool's own); the model still
        sees the tool's own name. Outside a saga the tool calls straight through.
        """
        if not self.recognises(tool):
            raise TypeError(self.refusal(tool))
        if self.is_wrapped(tool):
            raise ValueError(f"tool {self.tool_name(tool)!r} is already wrapped; wrap the original tool once")
        if "origin" not in more and (options is None or options.origin is None):
            more["origin"] = self.framework
        fn = self.function_of(tool)
        signature = None if fn is None else signature_of(fn, without=self.framework_params(fn))
        spec = ToolSpec.of(
            name or self.tool_name(tool), semantics=semantics, options=options, signature=signature, **more
        )
        return cast(T, self.wrap_with_spec(tool, spec))

    def patched_sync(
        self,
        tool: Any,
        call: Callable[[], Any],
        args: Mapping[str, Any],
        *,
        raw: Callable[[Any], Any] | None = None,
    ) -> Any:
        """What a patched runtime does with one call ``call()`` of ``tool``.

        A tool from :meth:`wrap_tool` is a step already and calls through; otherwise the
        tool policy of ``patch_all`` decides (a step, an unclassified call, a refusal).
        ``args`` are the call's arguments as logged; ``raw`` extracts the function's own
        result from what ``call()`` returns, for the undo.
        """
        if self.is_wrapped(tool):
            return call()
        return support.patched_sync(self.tool_name(tool), self.framework, id(tool), call, args, raw)

    async def patched_async(
        self,
        tool: Any,
        call: Callable[[], Awaitable[Any]],
        args: Mapping[str, Any],
        *,
        raw: Callable[[Any], Any] | None = None,
    ) -> Any:
        """The awaiting form of :meth:`patched_sync`."""
        if self.is_wrapped(tool):
            return await call()
        return await support.patched_async(self.tool_name(tool), self.framework, id(tool), call, args, raw)

    #: Set on what :meth:`policed_by_keyword` returns: the function it polices (a framework
    #: that copies a tool's function may copy the policed one; this finds the original).
    POLICED_ATTR: ClassVar[str] = "__saga_policed__"

    def policed_by_keyword(self, tool: Any, fn: Callable[..., Any], hidden: Collection[str]) -> Callable[..., Any]:
        """``fn``, for a framework that calls tools with keywords only (AG2, Agno), through the tool policy.

        Each call goes through :meth:`patched_sync` or :meth:`patched_async`, as ``fn`` is;
        ``hidden`` are the parameters the framework fills in itself: they reach ``fn``, never the log.
        """

        def logged(kwargs: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in kwargs.items() if k not in hidden}

        async def policed_async(**kwargs: Any) -> Any:
            return await self.patched_async(tool, lambda: fn(**kwargs), logged(kwargs))

        def policed_sync(**kwargs: Any) -> Any:
            return self.patched_sync(tool, lambda: fn(**kwargs), logged(kwargs))

        policed = functools.update_wrapper(policed_async if inspect.iscoroutinefunction(fn) else policed_sync, fn)
        setattr(policed, self.POLICED_ATTR, fn)
        return policed

    def boundary(
        self, wal: WAL | None = None, /, *, options: SagaOptions | None = None, **more: Unpack[SagaKwargs]
    ) -> Boundary:
        """The saga of one framework run: what every run helper enters (``with`` / ``async with``).

        Takes every saga option (see :class:`~agent_saga.SagaOptions`), as ``options=`` and/or
        keywords; the name defaults to :attr:`saga_name`. A run helper passes its caller's
        options through whole (see :func:`split_saga_options`). Inside an open saga the run
        joins it; a run that returns although a tool failed inside it (the framework turned
        the exception into a message) is unwound with :class:`~agent_saga.ToolFailed`.
        """
        if wal is not None:
            more = positional_wal(wal, more)
        saga_options = SagaOptions.build(options, more, name=self.saga_name or self.framework)
        return Boundary(options=saga_options, join=True, fail_on_swallowed=True)

    # -- predictive pre-execution (see docs/SPECULATION.md) ------------------------------

    def speculating(self) -> bool:
        """Whether the current saga has a Speculator attached: when a run helper adds its planned-calls hook."""
        saga = current_saga()
        return saga is not None and saga.speculation is not None

    def planned(self, calls: Iterable[tuple[str, Any]]) -> list[Any]:
        """The tool calls of one model response, named before the framework runs them.

        ``calls``: ``(tool name, arguments)`` pairs, the arguments as the framework holds
        them: a mapping, or the model's JSON text of an object (a call whose text is not
        one is skipped: there is no call to guess). With a Speculator attached to the
        current saga, the REVERSIBLE ones it was given and the gate allows run ahead now
        (:func:`~agent_saga.planned_calls`); the leases of those that started
        (``agent_saga.runtime.SpeculationLease``) are returned. With none attached it
        returns ``[]`` without reading ``calls``. The speculator is reached through the
        saga's ``SpeculationPort``, so the kit imports nothing of the runtime.
        """
        saga = current_saga()
        speculator = saga.speculation if saga is not None else None
        if speculator is None:  # the only cost when nothing speculates
            return []
        named = [(name, args) for name, raw in calls if (args := _planned_args(raw)) is not None]
        return speculator.plan(named)

    def steps(self, tools: Iterable[Any]) -> list[Callable[..., Any]]:
        """The step functions behind tools from :meth:`wrap_tool`: what a Speculator is given.

        ``Speculator(adapter.steps(tools), intent=...)`` may run those tools ahead. A tool
        this adapter did not wrap, or one with no Python function behind it, is refused.
        """
        found = []
        for tool in tools:
            fn = self.function_of(tool) if self.recognises(tool) else None
            if fn is None or getattr(fn, SPEC_ATTR, None) is None:
                raise TypeError(
                    f"{self.distribution}'s steps() takes tools from its wrap_tool with a Python function "
                    f"behind them, got {_qualname(tool)}: wrap it first with wrap_tool(tool, semantics=...)"
                )
            found.append(fn)
        return found

    # -- the pluggy hooks (see agent_saga.plugins.hookspecs) ---------------------------------

    @hookimpl
    def agent_saga_wrap_tool(self, tool: Any, options: StepOptions, name: str | None) -> Any | None:
        return self.wrap_tool(tool, options=options, name=name) if self.recognises(tool) else None

    @hookimpl
    def agent_saga_patch(self, config: PatchConfig) -> list[str]:
        self.patch()
        return self.patches.targets()

    @hookimpl
    def agent_saga_unpatch(self) -> list[str]:
        return self.patches.revert()


def check_compat(distribution: str, extra: str, fits: Callable[[], bool], problem: str) -> None:
    """What an adapter's ``_compat`` module runs at import: :class:`FrameworkUnsupported` unless ``fits()``.

    ``fits`` exercises the framework internals the adapter relies on and says whether
    they still behave so; an AttributeError, TypeError or ValueError from it (a renamed
    attribute, a changed signature) counts as no. ``problem`` says what moved; the
    error adds the supported range, what is installed and the install command.
    """
    try:
        ok = fits()
    except (AttributeError, TypeError, ValueError):
        ok = False
    if not ok:
        raise FrameworkUnsupported(distribution, extra, problem)


def _planned_args(raw: Any) -> Mapping[str, Any] | None:
    """A planned call's arguments as a mapping: as given, or parsed from the model's JSON text."""
    if isinstance(raw, Mapping):
        return raw
    if isinstance(raw, (str, bytes)):
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _qualname(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"

