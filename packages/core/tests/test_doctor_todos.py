"""`agent-saga doctor`'s TODO findings quote the whole decision, not its first line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_saga.cli.doctor import diagnose
from agent_saga.cli.new import scaffold


def _todos(root: Path) -> dict[str, str]:
    return {f.message.split(":")[0]: f.message.split(": undecided: ", 1)[1]
            for f in diagnose(root, 1, {}) if f.check == "todo"}


def test_every_todo_of_the_scaffold_is_quoted_to_the_end_of_its_sentence(tmp_path: Path) -> None:
    scaffold("myagent", tmp_path / "p")
    todos = _todos(tmp_path / "p")
    assert sorted(todos) == ["compose.yaml", "myagent/app.py", "myagent/tools.py"]
    for text in todos.values():
        assert text.endswith("."), text  # never cut mid-sentence
    assert todos["compose.yaml"].endswith("so `agent-saga halt` reaches one container.")
    assert todos["myagent/tools.py"].endswith("passing idempotency_key through where the API takes one.")
    assert todos["myagent/app.py"].endswith("or each replica enforces its own copy of every limit.")
    assert "#" not in "".join(todos.values())  # the comment leaders are not quoted


def test_the_quote_stops_at_code_a_blank_comment_or_another_marker(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "# TODO(agent-saga): first decision, which goes on\n"
        "x = 1  # and this is code, not its sentence\n"
        "# TODO(agent-saga): second, over\n"
        "#\n"
        "# a paragraph that is not its own.\n"
        "# TODO(agent-saga): third, over\n"
        "# TODO(agent-saga): fourth.\n"
        "# and not this.\n")
    assert [f.message for f in diagnose(tmp_path, 1, {}) if f.check == "todo"] == [
        "a.py:1: undecided: first decision, which goes on",
        "a.py:3: undecided: second, over",
        "a.py:6: undecided: third, over",
        "a.py:7: undecided: fourth.",
    ]


words = st.text(alphabet="abcdefghij ,", min_size=1, max_size=20).map(str.strip).filter(bool)


@given(st.lists(words, min_size=1, max_size=6))
def test_a_sentence_over_any_number_of_comment_lines_is_quoted_whole(
        tmp_path_factory: pytest.TempPathFactory, pieces: list[str]) -> None:
    root = tmp_path_factory.mktemp("todo")
    sentence = " ".join(pieces) + "."
    lines = [f"# TODO(agent-saga): {pieces[0]}", *(f"# {p}" for p in pieces[1:])]
    lines[-1] += "."
    (root / "b.py").write_text("\n".join([*lines, "value = 2", ""]))
    assert _todos(root) == {"b.py": sentence}
