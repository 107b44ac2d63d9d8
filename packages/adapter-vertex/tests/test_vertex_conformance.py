"""The shared adapter promises, through google-genai's real automatic function calling.

The model is a local server speaking ``generateContent`` (``gemini_server.py``); the SDK sends
it real requests and runs the Python tools the scripted responses call. Three ways in: the
async client against Vertex AI's endpoint, the blocking client against Vertex AI's endpoint,
and an async chat against the Gemini Developer API's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from agent_saga_vertex import saga_run, saga_run_sync
from gemini_server import GeminiServer
from google.genai import errors, types
from vertex_drive import API_KEY, TOKEN, client, closing, config, function_responses, run_async

import agent_saga
from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call, ledger
from agent_saga.testing._conformance import THREE, apublish, awhereami, publish, reserve
from agent_saga.testing._shared import undo_of


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiServer]:
    with GeminiServer(api_key=API_KEY, token=TOKEN) as server:
        yield server


@dataclass
class Ran:
    """What a run returned, and the model (script) it ran against."""

    response: Any
    model: str


class TestVertexConformance(AdapterConformance):
    """``client.aio.models.generate_content`` on Vertex AI: async tools on the loop, sync ones on
    ``asyncio.to_thread`` (a copied context)."""

    framework = "vertex"
    # The SDK turns a tool's exception into an {"error": ...} function response; the model goes on.
    error_modes = (True,)
    # One response's calls run one after another (a for loop over its parts), in both clients.
    parallel: ClassVar[str | None] = None
    vertex: ClassVar[bool] = True
    sync: ClassVar[bool] = False
    chat: ClassVar[bool] = False

    @pytest.fixture(autouse=True)
    def _server(self, gemini: GeminiServer) -> None:
        self.server = gemini

    def make_tool(self, fn: Callable[..., Any]) -> Any:
        return fn  # AFC takes the plain function

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        declared = types.FunctionDeclaration.from_callable_with_api_option(callable=tool, api_option="VERTEX_AI")
        return str(declared.name), str(declared.description), declared.model_dump(exclude_none=True)

    def _run(self, tools: list[Any], turns: list[list[Call]], saga: dict[str, Any] | None) -> Ran:
        """The model's ``turns`` against ``tools``, inside the run helper (``saga``: its options) or with no saga."""
        model = self.server.script([[(c.tool, c.args) for c in turn] for turn in turns])
        made = client(self.server, vertex=self.vertex)
        if self.sync:
            with closing(made):
                if saga is None:
                    return Ran(made.models.generate_content(model=model, contents="go", config=config(tools)), model)
                return Ran(saga_run_sync(made, model=model, contents="go", config=config(tools), **saga), model)

        async def call(made: Any) -> Any:
            if self.chat:
                chat = made.aio.chats.create(model=model, config=config(tools))
                return await (chat.send_message("go") if saga is None else saga_run(chat, message="go", **saga))
            if saga is None:
                return await made.aio.models.generate_content(model=model, contents="go", config=config(tools))
            return await saga_run(made, model=model, contents="go", config=config(tools), **saga)

        return Ran(run_async(made, call), model)

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return self._run(tools, [[c] for c in calls], {"wal": wal, **saga})

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return self._run(tools, [calls], {"wal": wal, **saga})

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return self._run(tools, [[c] for c in calls], None)

    def tool_results(self, result: Any) -> list[str] | None:
        return function_responses(self.server, result.model)

    def test_the_plainest_scenario_top_level_wrap_tool_inside_one_saga_scope(self) -> None:
        # AFC's tools are plain functions, which belong to no framework: agent_saga.wrap_tool
        # points them at @agent_saga.tool, and that is the plainest thing a user of the SDK
        # writes (no run helper, no adapter import). The SDK's own call inside one saga_scope.
        with pytest.raises(TypeError, match=r"plain function.*@agent_saga\.tool\(semantics=\.\.\.\)"):
            agent_saga.wrap_tool(reserve, semantics="COMPENSABLE", compensate=undo_of)
        tools = [agent_saga.tool(reserve, semantics="COMPENSABLE", compensate=undo_of),
                 agent_saga.tool(publish, semantics="COMPENSABLE", compensate=undo_of)]

        def agent_then_a_failure() -> None:
            with agent_saga.saga_scope(self.wal):
                self.run_plain(tools, THREE[:2])
                raise RuntimeError("the step after the agent failed")

        with pytest.raises(agent_saga.SagaAborted) as caught:
            agent_then_a_failure()
        assert ledger() == ["do:reserve", "do:publish", "undo:publish", "undo:reserve"]
        self.assert_unwound_newest_first(caught.value)
        assert str(caught.value.cause) == "the step after the agent failed"
        assert caught.value.report.clean


class TestVertexBlockingConformance(TestVertexConformance):
    """``client.models.generate_content`` on Vertex AI: sync tools on the caller's thread. The SDK
    refuses an async tool there (its own rule), so the two cases that mix one in check that refusal."""

    sync = True

    def assert_the_sdk_refuses_the_async_tool(self, fn: Callable[..., Any]) -> None:
        with pytest.raises(errors.UnsupportedFunctionError, match="coroutine function"):
            self.run_plain([self.make_tool(fn)], [])
        # Wrapped, it is refused the same way before any request, and the run helper fails the saga.
        err = self.aborted([self.wrapped(reserve), self.wrapped(fn, "REVERSIBLE")], [Call("reserve", {"amount": 1})])
        assert isinstance(err.cause, errors.UnsupportedFunctionError)
        assert ledger() == [] and not self.records("STEP_INTENT") and self.records("SAGA_ROLLED_BACK")

    def test_the_saga_is_visible_on_the_thread_the_framework_uses(self) -> None:
        seen: list[Any] = []

        def where(note: str) -> dict[str, Any]:
            """Report where the tool runs."""
            saga = agent_saga.current_saga()
            seen.append(saga.saga_id if saga else None)
            return {"ref": "where"}

        self.run([self.wrapped(where, "REVERSIBLE")], [Call("where", {"note": "a"})], wal=self.wal)
        assert seen == [self.records("SAGA_STARTED")[0]["saga"]]
        self.assert_the_sdk_refuses_the_async_tool(awhereami)

    def test_sync_and_async_tools_are_both_steps_and_both_undone(self) -> None:
        self.assert_the_sdk_refuses_the_async_tool(apublish)


class TestGeminiChatConformance(TestVertexConformance):
    """``client.aio.chats.create(...).send_message(...)`` on the Gemini Developer API (an API key)."""

    vertex = False
    chat = True
