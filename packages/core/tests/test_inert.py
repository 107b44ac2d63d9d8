"""What the agent writes is shown, never obeyed: inert() and every surface a person reads (issue 25, item 2).

The attack: an argument holding cursor-up and erase-line sequences followed by
``amount: 80`` makes a terminal show 80 while the signed, sent and logged amount is
80000. Each surface below is fed text carrying ESC sequences, a bidi override and
a zero-width space, and must show them as visible escapes.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import time
import unicodedata
import urllib.parse
from pathlib import Path

import pytest
from approval_support import Hook, trusted_key
from gate_support import req
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_saga import Compensation, FileApprovalStore, FileWAL, SagaAborted, saga_scope
from agent_saga.approvals import ApprovalEntry, Status
from agent_saga.approvals._entry import new_entry
from agent_saga.cli.main import main
from agent_saga.gate import ApprovalRequest
from agent_saga.log import read_records

#: Cursor up, erase line, a right-to-left override, a zero-width space, a C1 CSI, a line separator.
EVIL = "\x1b[1A\x1b[2K\u202eevil\u200b\x9b2J\u2028end"
#: What the approver must see instead (the same characters, escaped and visible).
SHOWN = "\\x1b[1A\\x1b[2K\\u202eevil\\u200b\\x9b2J\\u2028end"
#: Characters that must never reach a person's screen as themselves.
ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
MEMO = "\x1b[1A\x1b[2K amount: 80"


def _acting(text: str) -> list[str]:
    """Every character of ``text`` a terminal or a renderer would act on (newlines between lines allowed)."""
    return [f"U+{ord(c):04X}" for line in text.split("\n") for c in line if ACTING.match(c)]


def _decode(shown: str) -> str:
    """The inverse of inert(): proves it loses nothing (and so is injective)."""
    out, i = [], 0
    named = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
    while i < len(shown):
        c = shown[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        kind = shown[i + 1]
        if kind in named:
            out.append(named[kind])
            i += 2
            continue
        width = {"x": 2, "u": 4, "U": 8}[kind]
        out.append(chr(int(shown[i + 2:i + 2 + width], 16)))
        i += 2 + width
    return "".join(out)


# -- the function ----------------------------------------------------------------------------------------


def test_inert_escapes_what_acts_and_keeps_what_reads() -> None:
    from agent_saga.inert import inert

    assert inert(MEMO) == "\\x1b[1A\\x1b[2K amount: 80"
    assert inert(EVIL) == SHOWN
    for c, shown in {"\r": "\\r", "\b": "\\x08", "\x7f": "\\x7f", "\n": "\\n", "\t": "\\t", "\u061c": "\\u061c",
                     "\u200e": "\\u200e", "\u2066": "\\u2066", "\u2069": "\\u2069", "\ufeff": "\\ufeff",
                     "\u2029": "\\u2029", "\u2060": "\\u2060", "\u2064": "\\u2064", "\U000e0041": "\\U000e0041",
                     "\ufe0f": "\\ufe0f", "\u3164": "\\u3164", "\\": "\\\\"}.items():
        assert inert(f"a{c}b") == f"a{shown}b", repr(c)
    # letters of any script, spaces, emoji and punctuation are text, and stay as they are
    for text in ("wire.send", "Zürich 東京 مرحبا ✓ 🙂", "amount: 80 000 €", "{\"a\": [1, 2]}", ""):
        assert inert(text) == text
    # a backslash is escaped, so no input can spell the escape of another
    assert inert("\\x1b") == "\\\\x1b" != inert("\x1b")
    assert inert(80000) == "80000"


@settings(deadline=None)  # a loaded machine must not fail a property over time
@given(st.text(alphabet=st.characters(codec=None)))
@example("\\x1b")
@example("\x1b")
@example("\ud800")  # a lone surrogate
def test_inert_output_holds_no_character_that_acts_and_loses_nothing(text: str) -> None:
    from agent_saga.inert import inert

    shown = inert(text)
    hidden = [c for c in shown if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Cn")]
    assert hidden == []
    assert _decode(shown) == text  # so distinct inputs render distinctly


# An alphabet built to collide: escapes' own letters beside the characters they stand for.
_TRICKY = st.text(alphabet="\\xu0123456789abefU\x1b\u202e\n n", max_size=12)


@settings(deadline=None)
@given(_TRICKY, _TRICKY)
def test_inert_is_injective(a: str, b: str) -> None:
    from agent_saga.inert import inert

    assert (inert(a) == inert(b)) == (a == b)


def test_inert_tree_walks_keys_values_and_lists() -> None:
    from agent_saga.inert import inert_tree

    class Odd:
        def __str__(self) -> str:
            return EVIL

    tree = {"a" + EVIL: [EVIL, 1, 2.5, None, True, {"b": (EVIL,)}], "n": Odd()}
    shown = inert_tree(tree)
    assert shown["a" + SHOWN] == [SHOWN, 1, 2.5, None, True, {"b": [SHOWN]}] and shown["n"] == SHOWN
    assert _acting(json.dumps(shown, ensure_ascii=False)) == []


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TRICKY | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY | st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(deadline=None)
@given(_JSONISH)
def test_inert_json_is_the_tree_walk_in_one_pass(value: object) -> None:
    from agent_saga.inert import inert_json, inert_tree

    text = inert_json(value)
    assert json.loads(text) == inert_tree(value)
    assert _acting(text) == []


# -- approvals: the attack itself, through the real CLI ----------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", "approvals", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=env)


def _waiting(store: FileApprovalStore, reason: str = "Action cannot be undone", saga: str = "saga-1",
             **args: object) -> ApprovalEntry:
    """A request as the gateway makes it (its own copy, returned), stored as the agent's store holds it."""
    step = req("wire.send", "IRREVERSIBLE", saga=saga, **args)
    entry = new_entry(ApprovalRequest(step, "irreversible", reason), time.time() - 3, 900.0, ((("@oncall",), 0.0),))
    store.create(entry.replace(escalated=(0,), notified=(0,)))
    return entry


@pytest.mark.slow
def test_the_memo_attack_shows_the_escapes_and_the_signed_amount(tmp_path: Path) -> None:
    key = trusted_key()
    key.save()
    store = FileApprovalStore(tmp_path / "approvals")
    asked = _waiting(store, memo=MEMO, amount=80000)
    out = _cli("list", "--store", str(store.path))
    assert out.returncode == 1, out.stderr
    assert "\x1b" not in out.stdout and _acting(out.stdout) == []
    lines = out.stdout.splitlines()
    assert "        memo: \\x1b[1A\\x1b[2K amount: 80" in lines
    assert "        amount: 80000" in lines
    from agent_saga.approvals import TrustedKeys
    from agent_saga.approvals._authority import action_digest

    # The digest shown is the one the gateway's verifier computes from its own copy of the request ...
    shown = re.search(r"signs action sha256:([0-9a-f]{64}) ", out.stdout)
    assert shown is not None, out.stdout
    assert shown.group(1) == action_digest(asked)

    # ... and the one the approver's signature covers: approve through the CLI, verify as the gateway does.
    approved = _cli("approve", asked.id[:8], "--approver", "risk@corp", "--note", "ok", "--store", str(store.path))
    assert approved.returncode == 0, approved.stderr
    assert f"signed action sha256:{shown.group(1)}" in approved.stdout
    decided = store.get(asked.id)
    assert decided is not None and decided.status is Status.GRANTED
    assert TrustedKeys.load().verify(decided, asked) == key.key_id
    payload = ("agent-saga approval decision v2\n" + json.dumps({
        "action": shown.group(1), "approver": "risk@corp", "decided_at": decided.decided_at, "note": "ok",
        "status": "GRANTED", "via": "cli"}, sort_keys=True, separators=(",", ":"))).encode()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key.public.split("+", 2)[2])[1:])
    public.verify(base64.b64decode(decided.signature or ""), payload)  # raises if the digest were not covered


def test_the_reason_is_under_the_signature(tmp_path: Path) -> None:
    from agent_saga.approvals import ApprovalNotAuthenticated, TrustedKeys, decide
    from agent_saga.approvals._authority import action_digest

    key = trusted_key()
    store = FileApprovalStore(tmp_path / "approvals")
    asked = _waiting(store, amount=80000)
    # The agent rewrites the reason in its store to make the step look routine, and the approver signs that.
    store.update(asked.id, lambda e: e.replace(reason="routine refund, pre-approved"))
    decided = decide(store, asked.id, "approve", approver="risk@corp", key=key)
    assert action_digest(decided) != action_digest(asked)
    with pytest.raises(ApprovalNotAuthenticated, match="does not match this request"):
        TrustedKeys.load().verify(decided, asked)  # the gateway believes its own reason, not the store's
    honest = _waiting(store, saga="saga-2", amount=5)
    signed = decide(store, honest.id, "approve", approver="risk@corp", key=key)
    assert TrustedKeys.load().check(signed, honest) == (key.key_id, True)


@pytest.mark.slow
def test_a_signature_made_before_the_digest_still_counts_and_its_reason_shows_unsigned(tmp_path: Path) -> None:
    from agent_saga.approvals import _authority as authority

    key = trusted_key()
    store = FileApprovalStore(tmp_path / "approvals")
    asked = _waiting(store, amount=80000)

    def sign_v1(e: ApprovalEntry) -> ApprovalEntry:  # what an earlier CLI wrote
        decided = e.replace(status=Status.GRANTED, approver="risk@corp", note="ok", decided_at=time.time())
        signature = key._private.sign(authority._payload_v1(decided, decided))
        return decided.replace(signer=key.key_id, signature=base64.b64encode(signature).decode())

    decided = store.update(asked.id, sign_v1)
    assert authority.TrustedKeys.load().check(decided, asked) == (key.key_id, False)
    out = _cli("list", "--all", "--store", str(store.path))
    head = next(line for line in out.stdout.splitlines() if "[GRANTED]" in line)
    assert "-- Action cannot be undone (unsigned) (rule irreversible" in head
    assert f"risk@corp (signed by {key.key_id}): ok" in out.stdout


def test_notifications_show_the_escapes_and_the_digest(tmp_path: Path) -> None:
    from agent_saga.approvals import ConsoleNotifier, Notification, WebhookNotifier

    store = FileApprovalStore(tmp_path / "approvals")
    entry = _waiting(store, reason="why" + EVIL, memo=MEMO, amount=80000, **{"k" + EVIL: [EVIL]})
    notice = Notification(entry, 0, ("@oncall" + EVIL,))
    console = io.StringIO()
    ConsoleNotifier(console).notify(notice)
    hook = Hook()
    try:
        WebhookNotifier(hook.url).notify(notice)
    finally:
        hook.close()
    for text in (console.getvalue(), hook.bodies[0]["text"]):
        assert _acting(text) == [], text
        assert "memo: \\x1b[1A\\x1b[2K amount: 80" in text and "amount: 80000" in text
        assert "why" + SHOWN in text and "@oncall" + SHOWN in text and f"k{SHOWN}: [" in text
    from agent_saga.approvals._authority import action_digest

    for text in (console.getvalue(), hook.bodies[0]["text"]):
        assert f"signs action sha256:{action_digest(entry)}" in text
    # the structured part stays data (raw, so a program can recompute the digest), and names the digest
    assert hook.bodies[0]["agent_saga"]["args"]["memo"] == MEMO
    assert hook.bodies[0]["agent_saga"]["action"] == action_digest(entry)


# -- the log's readers --------------------------------------------------------------------------------------


def _evil_log(path: Path) -> Path:
    """A log whose saga id, name, tool, arguments, cause and undo all carry EVIL (written by the real engine)."""
    wal = FileWAL(path)
    try:
        with saga_scope(wal, name="n" + EVIL, saga_id="saga" + EVIL) as s:
            s.execute(tool="pay" + EVIL, semantics="COMPENSABLE", args={"memo": EVIL}, forward=lambda: 1,
                      compensate=lambda r: Compensation(handler="no.such" + EVIL, kwargs={"memo": EVIL}))
            raise RuntimeError("cause" + EVIL)
    except SagaAborted:
        pass
    wal.close()
    return path


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_graph_labels_are_inert(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    log = _evil_log(tmp_path / "e.wal")
    assert main(["graph", "--wal-path", str(log), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert _acting(out) == []
    shown = SHOWN.replace("\\", "\\\\") if fmt == "dot" else SHOWN  # DOT doubles a backslash; graphviz halves it
    assert f"pay{shown}" in out and f"cause{shown}" in out


@pytest.mark.slow
def test_graphviz_draws_the_escapes_as_written(tmp_path: Path) -> None:
    import html

    from agent_saga.ui import reconstruct, to_dot

    dot = to_dot(reconstruct(read_records(_evil_log(tmp_path / "e.wal"))))
    drawn = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True, timeout=60, check=True)
    text = html.unescape(drawn.stdout)
    assert f"1. pay{SHOWN}" in text  # DOT's \\ is drawn as one backslash; no \n became a line break
    assert _acting(text) == []


def test_svgs_draw_the_escapes(tmp_path: Path) -> None:
    from agent_saga.ui import reconstruct, render_animation, render_fleet

    sagas = reconstruct(read_records(_evil_log(tmp_path / "e.wal")))
    for svg in (render_animation(sagas[0]), render_fleet(sagas)):
        assert _acting(svg) == [], svg
        assert SHOWN[:20] in svg
    assert "pay" + SHOWN[:16] in render_animation(sagas[0])


def test_the_flight_recorder_serves_inert_text_and_finds_the_run_by_its_served_id(tmp_path: Path) -> None:
    from test_ui_server import api, get, serving

    from agent_saga.ui import FileSource

    log = _evil_log(tmp_path / "e.wal")
    with serving(FileSource(log)) as server:
        runs = api(server, "api/runs")
        run = runs["runs"][0]
        assert run["id"] == "saga" + SHOWN and run["name"] == "n" + SHOWN
        quoted = urllib.parse.quote(run["id"], safe="")
        raw = get(server.url + f"api/runs/{quoted}", server.token)[2]
        replay = get(server.url + f"api/runs/{quoted}/replay", server.token)[2]
        for body in (json.dumps(runs, ensure_ascii=False).encode(), raw, replay):
            assert _acting(body.decode()) == [], body[:300]
        detail = json.loads(raw)
        assert detail["steps"][0]["tool"] == "pay" + SHOWN
        assert detail["steps"][0]["args"][0]["value"] == SHOWN
        assert detail["cause"].endswith("cause" + SHOWN) or ("cause" + SHOWN) in detail["cause"]
        # the raw id (the characters themselves) names no run: the page only ever holds the served one
        assert get(server.url + "api/runs/" + urllib.parse.quote("saga" + EVIL, safe=""), server.token)[0] == 404


def test_reconcile_lines_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _evil_log(tmp_path / "e.wal")
    main(["reconcile", "--wal-path", str(log)])
    out = capsys.readouterr().out
    assert "pay" + SHOWN in out and "saga" + SHOWN in out
    assert _acting(out) == []


def test_doctor_findings_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line, shown = EVIL.replace("\u2028", ""), SHOWN.replace("\\u2028", "")  # U+2028 would end the line read
    (tmp_path / "app.py").write_text(f"# TODO(agent-saga): decide {line} later\n", encoding="utf-8")
    main(["doctor", "--root", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"undecided: decide {shown} later" in out
    assert _acting(out) == []


def test_quarantine_and_status_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, wal = str(tmp_path / "sw.json"), tmp_path / "ops.wal"
    log = FileWAL(wal)
    log.append("SAGA_STARTED", "saga" + EVIL, {"name": "n"})
    log.close()
    assert main(["quarantine", "saga", "--reason", "r" + EVIL, "--by", "soc@corp", "--store", store,
                 "--wal-path", str(wal)]) == 0
    assert main(["status", "--store", store]) == 1
    out = capsys.readouterr().out
    assert f"quarantined saga saga{SHOWN}" in out and f"[QUARANTINE] saga saga{SHOWN} by soc@corp" in out
    assert f": r{SHOWN}" in out
    assert _acting(out) == []


_CRASH = """
import os, sys
from agent_saga import Compensation, FileWAL, saga_scope
EVIL = {evil!r}
wal = FileWAL(sys.argv[1])
with saga_scope(wal, name="n" + EVIL, saga_id="saga" + EVIL) as s:
    s.execute(tool="pay" + EVIL, semantics="COMPENSABLE", args={{"memo": EVIL}}, forward=lambda: 1,
              compensate=lambda r: Compensation(handler="no.such" + EVIL, kwargs={{"memo": EVIL}}))
    wal.barrier()
    os._exit(137)  # the worker dies with its saga open
"""


@pytest.mark.slow
def test_recover_and_escalations_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "e.wal"
    env = dict(os.environ, AGENT_SAGA_LEASE_TTL="0.3")
    crashed = subprocess.run([sys.executable, "-c", _CRASH.format(evil=EVIL), str(log)], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert crashed.returncode == 137, crashed.stderr
    time.sleep(0.4)  # the dead worker's lease runs out by itself (LEASE_TTL 0.3)
    monkeypatch.setenv("AGENT_SAGA_LEASE_TTL", "0.3")
    assert main(["recover", "--wal-path", str(log), "--lease-grace", "0"]) == 1
    assert main(["escalations", "--wal-path", str(log)]) == 1
    out = capsys.readouterr().out
    assert f"escalate             saga{SHOWN} step 1: [" in out  # what the sweep did
    assert re.search(f"OPEN      saga saga{re.escape(SHOWN)} step 1  \\[[a-z-]+\\] ", out)  # the queue's line
    assert _acting(out) == []


def test_certify_lines_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _evil_log(tmp_path / "e.wal")
    assert main(["certify", "--wal-path", str(log)]) == 1  # the failed undo leaves the charge unaccounted
    out = capsys.readouterr().out
    assert f"UNACCOUNTED saga saga{SHOWN} step 1 pay{SHOWN} [COMPENSABLE]" in out
    assert _acting(out) == []
