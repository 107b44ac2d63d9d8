"""`agent-saga ui`: where it listens, who may read it, and what its JSON says (no browser here;
the page itself is driven in Chromium by tests/browser)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
from viz_logs import DEMO_TOOLS

from agent_saga import FileWAL, MemoryWAL, saga_scope
from agent_saga.ui import FileSource, UiServer, WALSource, make_server


def get(url: str, token: str | None = None, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def api(server: UiServer, path: str) -> Any:
    status, _, body = get(server.url + path.lstrip("/"), server.token)
    assert status == 200, body
    return json.loads(body)


@contextmanager
def serving(source: Any, **kw: Any) -> Iterator[UiServer]:
    server = make_server(source, port=0, **kw)
    server.serve_in_thread()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def ui_process(*args: str, env: dict[str, str] | None = None, module: bool = False,
               stop: signal.Signals = signal.SIGTERM) -> Iterator[str]:
    """`agent-saga ui ...` (or `python -m agent_saga.ui ...`) as a real process; yields the URL it prints.

    Stopped with ``stop`` (SIGTERM by default: a process started from a background shell inherits
    SIGINT ignored, so SIGINT alone would leave it running); either way it must exit 0.
    """
    cmd = [sys.executable, "-m", "agent_saga.ui", *args] if module else [
        sys.executable, "-m", "agent_saga", "ui", *args]
    with served(cmd, env=env, stop=stop) as url:
        yield url


@contextmanager
def served(cmd: list[str], *, env: dict[str, str] | None = None, stop: signal.Signals = signal.SIGTERM,
           startup: float = 60, grace: float = 20) -> Iterator[str]:
    """Run a server that prints "... at http://..." first; yield its URL; stop it with ``stop``.

    Every wait has a bound: a server that prints no URL, prints something else, or ignores
    ``stop`` is killed and the test fails saying which, instead of hanging the run (an
    unbounded readline, a read of a live process's stderr, or Popen's own exit would).
    """
    # SIGINT back to its default in the child, so that Python turns it into KeyboardInterrupt
    # even when this test runs with SIGINT ignored.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def killed(why: str) -> NoReturn:
        proc.kill()
        _, err = proc.communicate(timeout=grace)
        pytest.fail(f"{why}; killed it. Its stderr: {err.strip()[-2000:]}")

    try:
        lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()  # type: ignore[union-attr]
        try:
            line = lines.get(timeout=startup)
        except queue.Empty:
            killed(f"`{' '.join(cmd[1:4])}` printed no line in {startup:g} s")
        if " at http://" not in line:
            killed(f"`{' '.join(cmd[1:4])}` printed {line!r}, not the URL it serves at")
        yield line.split(" at ")[1].split()[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(stop)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                killed(f"`{' '.join(cmd[1:4])}` was still running {grace:g} s after {stop.name}")
    _, err = proc.communicate(timeout=grace)  # it has exited: this only collects what it wrote
    assert proc.returncode == 0, f"`agent-saga ui` exited {proc.returncode} on {stop.name}: {err}"


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port``, from the kernel's own tables."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


@pytest.mark.slow
def test_agent_saga_ui_listens_on_127_0_0_1_only(demo_log: Path) -> None:
    with ui_process("--wal-path", str(demo_log), "--port", "0") as url:
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else
        status, _, body = get(url + "api/runs")
        assert status == 200 and {r["name"] for r in json.loads(body)["runs"]} == {
            "onboard-acme", "pay-supplier", "runaway-agent", "checkout-worker"}


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_server_stops_cleanly_on_sigterm_as_on_ctrl_c(demo_log: Path, stop: signal.Signals) -> None:
    # Supervisors and test harnesses send SIGTERM; an exit 0 (not -15) means serve_forever returned
    # and the socket was closed by the server itself.
    with ui_process("--wal-path", str(demo_log), "--port", "0", stop=stop) as url:
        assert get(url + "api/runs")[0] == 200


@pytest.mark.slow
def test_python_dash_m_agent_saga_ui_serves_the_same(demo_log: Path) -> None:
    with ui_process("--wal-path", str(demo_log), "--port", "0", module=True) as url:
        status, headers, body = get(url)
        assert status == 200 and b"flight recorder" in body
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert b"<script>" not in body and b"style=" not in body  # nothing inline: the policy forbids it


@pytest.mark.slow
def test_binding_elsewhere_needs_a_token(demo_log: Path) -> None:
    refused = subprocess.run([sys.executable, "-m", "agent_saga", "ui", "--wal-path", str(demo_log), "--host",
                              "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in os.environ.items() if k != "AGENT_SAGA_UI_TOKEN"}, check=False)
    assert refused.returncode == 2 and "refusing to serve the log on 0.0.0.0" in refused.stderr
    assert "token" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(ValueError, match="refusing"):
        make_server(FileSource(demo_log), host="::", port=0)
    with pytest.raises(ValueError, match="empty"):
        make_server(FileSource(demo_log), port=0, token=" ")

    token = "t0ken-" + "x" * 24
    with ui_process("--wal-path", str(demo_log), "--host", "0.0.0.0", "--port", "0",
                    env={"AGENT_SAGA_UI_TOKEN": token}) as url:
        assert url.endswith(f"#token={token}")
        base = url.split("#")[0]
        assert get(base + "api/runs")[0] == 401
        assert get(base + "api/runs", token="wrong")[0] == 401
        status, headers, _ = get(base + "api/runs", token="")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        status, _, body = get(base + "api/runs", token=token)
        assert status == 200 and json.loads(body)["runs"]
        assert get(base)[0] == 200  # the page holds no data; its API calls carry the token


def test_a_foreign_host_header_is_refused_on_loopback(demo_log: Path) -> None:
    with serving(FileSource(demo_log)) as server:
        port = server.server_address[1]
        assert get(server.url + "api/runs", host=f"attacker.example:{port}")[0] == 421
        assert get(server.url + "api/runs", host=f"localhost:{port}")[0] == 200


def test_runs_steps_and_replay_come_from_the_one_reconstruction(demo_log: Path) -> None:
    with serving(FileSource(demo_log)) as server:
        runs = api(server, "api/runs")
        assert runs["chain"]["status"] == "intact" and runs["chain"]["records"] == 53
        assert runs["runs"][0]["name"] == "checkout-worker"  # newest first
        assert set().union(*(r["tools"] for r in runs["runs"])) == set(DEMO_TOOLS)
        act1 = next(r for r in runs["runs"] if r["name"] == "onboard-acme")
        detail = api(server, f"api/runs/{act1['id']}")
        assert [(s["index"], s["tool"], s["final"]) for s in detail["steps"]] == [
            (1, "aws.run_instances", "compensated"), (2, "pinecone.create_namespace", "compensated"),
            (3, "jira.create_issue", "compensated"), (4, "aws.configure_region", "not applied")]
        assert detail["unwound"] == [3, 2, 1]
        third = detail["steps"][2]
        assert third["compensation"]["handler"] == "demo.undo"
        assert third["compensation"]["kwargs"] == [{"name": "target", "value": "ticket ONB-7", "kind": "value"}]
        assert [r["type"] for r in third["undo_records"]] == ["COMPENSATION_STARTED", "STEP_COMPENSATED"]
        assert third["undo_records"][0]["key"] == third["compensation"]["key"]
        assert "region 'eu-cantral-1' does not exist" in detail["steps"][3]["error"]

        page = api(server, f"api/runs/{act1['id']}/replay")
        frames = page["frames"]
        assert page["start"] == 0 and page["next"] is None and page["truncated"] is None
        assert len(frames) == page["total"] == len(detail["records"]) == 17
        assert frames[0]["status"] == "open" and frames[0]["changed"] == []
        assert frames[-1]["verdict"] == detail["verdict"] == "rollback clean"
        # the unwind, frame by frame: step 3 is compensated before 2, and 2 before 1
        done = [next((n for n, f in enumerate(frames) if any(
            s["index"] == i and s["outcome"] == "compensated" for s in f["changed"])), None) for i in (3, 2, 1)]
        assert None not in done and done == sorted(done)
        # the changes, applied in order, end as the run's own steps
        final: dict[int, Any] = {}
        for f in frames:
            final.update((s["index"], s) for s in f["changed"])
        assert [final[i] for i in sorted(final)] == [
            {k: s[k] for k in ("index", "tool", "semantics", "state", "outcome", "final", "label", "note")}
            for s in detail["steps"]]
        later = api(server, f"api/runs/{act1['id']}/replay?from=15")
        assert later["start"] == 15 and later["frames"] == frames[15:] and later["next"] is None
        assert get(server.url + f"api/runs/{act1['id']}/replay?from=-1")[0] == 400

        refused = next(r for r in runs["runs"] if r["name"] == "pay-supplier")
        wire = api(server, f"api/runs/{refused['id']}")["steps"][0]
        assert wire["final"] == "refused" and wire["refusal"]["rule"] == "irreversible"
        assert {"name": "amount", "value": 2000, "kind": "value"} in wire["args"]

        assert get(server.url + "api/runs/nope")[0] == 404
        assert get(server.url + "api/runs/nope/replay")[0] == 404
        assert get(server.url + f"api/runs/{act1['id']}/else")[0] == 404
        assert get(server.url + "api/else")[0] == 404 and get(server.url + "else")[0] == 404


def test_secrets_never_leave_the_server_and_references_are_marked(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "s.wal")
    args = {"amount": 5, "api_key": "sk-live-SECRET1", "credential_ref": "vault://stripe/prod",
            "headers": {"Authorization": "Bearer SECRET2", "accept": "json"}}
    with saga_scope(wal, name="with-secrets") as s:
        s.execute(tool="pay.charge", semantics="IRREVERSIBLE", args=args, forward=lambda: 1)
    wal.close()
    with serving(FileSource(tmp_path / "s.wal")) as server:
        run = api(server, "api/runs")["runs"][0]
        raw = get(server.url + f"api/runs/{run['id']}")[2] + get(server.url + f"api/runs/{run['id']}/replay")[2]
        assert b"SECRET1" not in raw and b"SECRET2" not in raw
        shown = {a["name"]: a for a in json.loads(get(server.url + f"api/runs/{run['id']}")[2])["steps"][0]["args"]}
        assert shown["api_key"]["kind"] == "redacted"
        assert shown["credential_ref"] == {"name": "credential_ref", "value": "vault://stripe/prod", "kind": "reference"}
        assert shown["amount"]["kind"] == "value"
        assert shown["headers"]["value"]["accept"] == "json"


def test_the_runs_follow_the_log_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "live.wal"
    wal = FileWAL(path)
    with saga_scope(wal, name="first") as s:
        s.execute(tool="a.read", semantics="REVERSIBLE", forward=lambda: 1)
    wal.barrier()
    with serving(FileSource(path)) as server:
        before = api(server, "api/runs")
        assert [r["name"] for r in before["runs"]] == ["first"]
        assert api(server, f"api/runs?since={before['version']}") == {"version": before["version"],
                                                                      "unchanged": True}
        with saga_scope(wal, name="second") as s:
            s.execute(tool="b.read", semantics="REVERSIBLE", forward=lambda: 1)
        wal.barrier()
        after = api(server, f"api/runs?since={before['version']}")
        assert after["version"] > before["version"] and [r["name"] for r in after["runs"]] == ["second", "first"]
        wal.close()
        # a line still being written (no newline yet) is left for later, never half-read
        with open(path, "ab") as fh:
            fh.write(b'{"saga":"x","seq":99,')
        assert api(server, f"api/runs?since={after['version']}")["unchanged"] is True
        # a line that is not a record: the API says so and keeps serving
        with open(path, "ab") as fh:
            fh.write(b"garbage\n")
        status, _, body = get(server.url + "api/runs")
        assert status == 503 and b"not a record" in body
        assert get(server.url)[0] == 200


def test_a_replaced_log_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "r.wal"
    for name in ("old", "new"):
        wal = FileWAL(tmp_path / f"{name}.wal")
        with saga_scope(wal, name=name) as s:
            s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 1)
        wal.close()
    shutil.copy(tmp_path / "old.wal", path)
    source = FileSource(path)
    first = source.poll()
    assert not first.reset and first.records
    os.replace(tmp_path / "new.wal", path)  # what compaction does: a new file renamed in
    again = source.poll()
    assert again.reset and {r["body"].get("name") for r in again.records if r["type"] == "SAGA_STARTED"} == {"new"}


def test_a_log_replaced_under_the_same_inode_is_read_again_from_the_start(tmp_path: Path) -> None:
    # Two rewrites between two polls can leave the inode unchanged (ext4 reuses a freed inode);
    # made certain here by rewriting the file in place with a longer log.
    path = tmp_path / "r.wal"
    for name, steps in (("old", 1), ("new", 4)):
        wal = FileWAL(tmp_path / f"{name}.wal")
        with saga_scope(wal, name=name) as s:
            for _ in range(steps):
                s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 1)
        wal.close()
    shutil.copy(tmp_path / "old.wal", path)
    source = FileSource(path)
    assert source.poll().records
    inode = path.stat().st_ino
    path.write_bytes((tmp_path / "new.wal").read_bytes())
    assert path.stat().st_ino == inode and path.stat().st_size > (tmp_path / "old.wal").stat().st_size
    again = source.poll()
    assert again.reset and {r["body"].get("name") for r in again.records if r["type"] == "SAGA_STARTED"} == {"new"}


def test_any_wal_plugs_in_through_its_records(tmp_path: Path) -> None:
    mem = MemoryWAL("ui")
    with saga_scope(mem, name="in-memory") as s:
        s.execute(tool="m.read", semantics="REVERSIBLE", forward=lambda: 1)
    source = WALSource(mem)
    assert source.location == "memory:ui"
    assert len(source.poll().records) == len(list(mem.records()))
    assert source.poll().records == []
    with serving(WALSource(mem)) as server:
        assert [r["name"] for r in api(server, "api/runs")["runs"]] == ["in-memory"]
        with saga_scope(mem, name="later") as s:
            s.execute(tool="m.read", semantics="REVERSIBLE", forward=lambda: 1)
        assert [r["name"] for r in api(server, "api/runs")["runs"]] == ["later", "in-memory"]


@pytest.mark.parametrize(("name", "kind"), [
    ("credential_ref", "reference"), ("apiKeyRef", "reference"), ("vault-reference", "reference"),
    ("REF", "reference"), ("href", "value"), ("prefix", "value"), ("refund_id", "value"),
    ("password", "redacted"), ("X-Api-Key", "redacted"),
])
def test_argument_kinds(name: str, kind: str) -> None:
    from agent_saga.ui._runs import _arguments

    assert _arguments({name: "v"})[0]["kind"] == kind


@pytest.mark.slow
def test_ui_bad_input_is_one_line(tmp_path: Path, demo_log: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent_saga", "ui", *args], capture_output=True, text=True,
                              timeout=60, check=False)

    out = run("--wal-path", str(tmp_path / "nope.wal"))
    assert out.returncode == 3 and "no log at" in out.stderr and "Traceback" not in out.stderr
    out = run("--wal-path", str(tmp_path))
    assert out.returncode == 3 and "directory" in out.stderr
    out = run("--wal-path", str(demo_log), "--port", "70000")
    assert out.returncode == 2 and "not a port" in out.stderr
    bad = tmp_path / "bad.wal"
    bad.write_bytes(b"not json\n")
    out = run("--wal-path", str(bad), "--port", "0")
    assert out.returncode == 3 and "cannot read" in out.stderr and "Traceback" not in out.stderr


# -- the harness itself: a server that misbehaves fails the test, never hangs it ------------------

_STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
print({first!r}, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("first", "expected"), [
    ("serving at http://127.0.0.1:1/", "was still running 2 s after SIGTERM"),  # ignores the stop signal
    ("a warning before the URL", "printed 'a warning before the URL\\n', not the URL"),
])
def test_a_server_that_misbehaves_is_killed_and_fails_the_test(first: str, expected: str) -> None:
    cmd = [sys.executable, "-c", _STUBBORN.format(first=first)]
    with pytest.raises(pytest.fail.Exception, match=re.escape(expected)):
        with served(cmd, startup=30, grace=2):
            pass


@pytest.mark.slow
def test_a_server_that_prints_nothing_is_killed_and_fails_the_test() -> None:
    cmd = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    with pytest.raises(pytest.fail.Exception, match="printed no line in 2 s"):
        with served(cmd, startup=2, grace=2):
            pass
