"""The pictures mark the steps a resumed run took from the log apart from those it ran (issue 41 part 8).

A served step runs nothing; the engine says so in the log (``STEP_SERVED``, under the recorded
step's number), the fold carries it, and ``graph`` (Mermaid and DOT) and the flight recorder's
JSON (the run and its replay frames) show "served from the log" on exactly those steps. A city
named like markup is in the served steps' arguments: the pictures keep it text.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from cli_support import run_cli
from resumed_log import resumed_run

from agent_saga.log.file import read_records
from agent_saga.recovery import fold
from agent_saga.ui import FileSource, UiServer, make_server

CITIES = ["paris", '<img src=x onerror="alert(1)">', "oslo"]
MARK = "served from the log"


def _marked_nodes(text: str, node: str) -> dict[int, bool]:
    """Each forward step node of the picture: whether its label carries the mark."""
    return {int(m.group(1)): MARK in m.group(2) for m in re.finditer(node, text)}


def _get(server: UiServer, path: str) -> Any:
    request = urllib.request.Request(server.url + path)
    request.add_header("Authorization", f"Bearer {server.token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_log_says_which_steps_a_resume_served(tmp_path: Path) -> None:
    wal = tmp_path / "m.wal"
    served, live = resumed_run(wal, CITIES)
    records = list(read_records(wal))
    types = [r["type"] for r in records]
    after = types[types.index("SAGA_RESUMED"):]
    assert after[:5] == ["SAGA_RESUMED", *["STEP_SERVED"] * 4]  # nothing ran for them
    assert {r["step"] for r in records if r["type"] == "STEP_SERVED"} == served
    view = fold(records)["m-1"]
    assert {i for i, s in view.steps.items() if s.served} == served
    assert {i for i, s in view.steps.items() if not s.served} == live
    assert view.ended == "SAGA_COMPLETED"


def test_graph_marks_exactly_the_served_steps_in_both_formats(tmp_path: Path) -> None:
    wal = tmp_path / "m.wal"
    served, live = resumed_run(wal, CITIES)
    mermaid = run_cli("graph", "--wal", str(wal)).stdout
    assert _marked_nodes(mermaid, r'    s0_f(\d+)\["([^"]*)"\]') == {**dict.fromkeys(served, True),
                                                                    **dict.fromkeys(live, False)}
    dot = run_cli("graph", "--wal", str(wal), "--format", "dot").stdout
    assert _marked_nodes(dot, r'    s0_f(\d+) \[label="((?:[^"\\]|\\.)*)"') == {**dict.fromkeys(served, True),
                                                                                **dict.fromkeys(live, False)}
    assert "<img" not in mermaid and "<img" not in dot  # the served step's text from the log stays inert


def test_the_flight_recorder_marks_exactly_the_served_steps_in_the_run_and_its_replay(tmp_path: Path) -> None:
    wal = tmp_path / "m.wal"
    served, live = resumed_run(wal, CITIES)
    server = make_server(FileSource(wal), port=0)
    server.serve_in_thread()
    try:
        detail = _get(server, "api/runs/m-1")
        frames = _get(server, "api/runs/m-1/replay?from=0")["frames"]
    finally:
        server.shutdown()
        server.server_close()
    assert {s["index"]: s.get("served", False) for s in detail["steps"]} == {**dict.fromkeys(served, True),
                                                                  **dict.fromkeys(live, False)}
    assert json.dumps(detail).count('"served": true') == len(served)
    # The replay: a step turns served at its own STEP_SERVED record (never before, and no live one ever).
    turned: dict[int, tuple[str, int | None]] = {}
    for frame in frames:
        for step in frame["changed"]:
            if step.get("served"):
                turned.setdefault(step["index"], (frame["type"], frame["step"]))
    assert turned == {i: ("STEP_SERVED", i) for i in served}
