"""``agent_saga.wrap_tool``: any framework's tool made a saga step, by whichever adapter knows it.

The call goes through the ``agent_saga_wrap_tool`` hook to the adapters already
registered; when none recognises the tool, every installed adapter whose framework is
present in range is loaded (as ``patch_all`` does, one failure at a time) and asked
again. When still none does, the error says which distribution to install, or why the
installed one did not load. Pluggy is imported only when this is called.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar, Unpack

from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.install import pip_install
from agent_saga.semantics import ActionSemantics

__all__ = ["FRAMEWORK_ADAPTERS", "wrap_tool"]

T = TypeVar("T")

#: The framework a tool type's top-level module belongs to -> (adapter distribution, its extra).
#: A new adapter adds its framework's module names here, so that a user without it is told
#: what to install. A namespace package's framework is named by its first two parts
#: (``google.adk``: ``google`` alone is also protobuf, genai, ...).
FRAMEWORK_ADAPTERS: dict[str, tuple[str, str]] = {
    "langchain_core": ("agent-saga-langgraph", "langgraph"),
    "langchain": ("agent-saga-langgraph", "langgraph"),
    "langgraph": ("agent-saga-langgraph", "langgraph"),
    "agents": ("agent-saga-openai-agents", "openai_agents"),
    "llama_index": ("agent-saga-llamaindex", "llamaindex"),
    "crewai": ("agent-saga-crewai", "crewai"),
    "autogen_core": ("agent-saga-autogen", "autogen"),
    "autogen_agentchat": ("agent-saga-autogen", "autogen"),
    "autogen_ext": ("agent-saga-autogen", "autogen"),
    "semantic_kernel": ("agent-saga-semantic-kernel", "semantic_kernel"),
    # AG2, the fork that keeps ConversableAgent; Microsoft's line is autogen_core / autogen_agentchat above.
    "autogen": ("agent-saga-ag2", "ag2"),
    "google.adk": ("agent-saga-google-adk", "google_adk"),
    "agno": ("agent-saga-agno", "agno"),
    "pydantic_ai": ("agent-saga-pydantic-ai", "pydantic_ai"),
    "strands": ("agent-saga-strands", "strands"),
}


def wrap_tool(
    tool: T,
    *,
    semantics: ActionSemantics | str | None = None,
    name: str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> T:
    """``tool`` (a LangChain, OpenAI Agents, ... tool) made a saga step by its framework's adapter.

    The same as ``agent_saga.adapters.<framework>.wrap_tool``: a tool of the same type,
    name, description and argument schema; every step option is accepted (``semantics``
    required, ``compensate`` maps the tool function's own result to a ``Compensation``).
    Raises TypeError naming the adapter distribution to install when no installed
    adapter recognises the tool.
    """
    from agent_saga.plugins.loader import load_adapters
    from agent_saga.plugins.manager import plugins

    step = StepOptions.build(options, semantics, more)  # bad options fail before any adapter loads
    manager = plugins()
    wrapped = manager.wrap_tool(tool, step, name)
    if wrapped is None:
        loaded = load_adapters(manager)
        wrapped = manager.wrap_tool(tool, step, name)
        if wrapped is None:
            raise TypeError(_no_adapter(tool, loaded.skipped, loaded.failed, manager.names()))
    return wrapped  # type: ignore[no-any-return]


def _modules(tool: Any) -> list[str]:
    """The top-level modules of ``tool``'s type and its bases (a user's subclass of a framework type).

    Each type gives its first two module parts, then its first (a namespace package's framework).
    """
    seen: list[str] = []
    for kind in type(tool).__mro__:
        parts = kind.__module__.split(".")
        for top in (".".join(parts[:2]), parts[0]) if len(parts) > 1 else (parts[0],):
            if top not in seen and top != "builtins":
                seen.append(top)
    return seen


def _no_adapter(tool: Any, skipped: dict[str, str], failed: dict[str, str], registered: list[str]) -> str:
    kind = type(tool)
    what = f"{kind.__module__}.{kind.__qualname__}"
    for module in _modules(tool):
        if module not in FRAMEWORK_ADAPTERS:
            continue
        distribution, key = FRAMEWORK_ADAPTERS[module]
        if key in failed:
            return f"{distribution} is installed but failed to load ({failed[key]}), so it cannot wrap {what}"
        if key in skipped:
            return f"{distribution} is installed but not loaded ({skipped[key]}), so it cannot wrap {what}"
        if key in registered:
            from agent_saga.plugins.manager import plugins

            adapter = plugins().plugin(key)
            refusal = getattr(adapter, "refusal", None)
            return refusal(tool) if callable(refusal) else f"{distribution} does not wrap {what}"
        return f"{what} is a {module} tool: install its adapter with: {pip_install(distribution, key)}"
    if inspect.isfunction(tool) or inspect.ismethod(tool):
        return (
            f"{what} is a plain function, not a framework tool: make it a step with "
            "@agent_saga.tool(semantics=...), or wrap the framework tool made from it"
        )
    distributions = sorted({d for d, _ in FRAMEWORK_ADAPTERS.values()})
    loaded = ", ".join(registered) or "none"
    return (
        f"no installed adapter recognises {what} (adapters loaded: {loaded}); "
        f"the framework adapters are the distributions {', '.join(distributions)}"
        + "".join(f"; {k} did not load: {why}" for k, why in sorted({**skipped, **failed}.items()))
    )
