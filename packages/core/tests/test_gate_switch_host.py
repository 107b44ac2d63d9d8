"""The kill switch reaches every process on the host: its location, who can change it, who cannot escape it.

The host-wide store is ``/var/lib/agent-saga/switch.json``. The suite moves it under a
temporary root with ``AGENT_SAGA_HOST_ROOT`` (conftest), which every saga records;
one test instead uses the real path inside a private mount namespace.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from gate_support import Clock, req
from host_support import OtherUser, in_namespace, private_var_lib, require_root, shared_dir

from agent_saga import KillSwitch, MemoryWAL, PreFlightGate, StepRefused
from agent_saga.cli.main import main
from agent_saga.gate import DefaultGate, FileSwitchStore, default_switch, set_switch, switch_posture
from agent_saga.gate._switch import DEFAULT_POLL_INTERVAL, default_switch_path
from agent_saga.gate.host import HOST_ROOT_ENV, config_dir, state_dir
from agent_saga.log import read_records

HOST_SWITCH = "/var/lib/agent-saga/switch.json"


pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_switch_is_the_host_store_not_a_home_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    root = os.environ[HOST_ROOT_ENV]
    assert default_switch_path() == Path(root) / HOST_SWITCH.lstrip("/")
    assert state_dir() == Path(root) / "var/lib/agent-saga" and config_dir() == Path(root) / "etc/agent-saga"
    monkeypatch.delenv(HOST_ROOT_ENV)
    assert default_switch_path() == Path(HOST_SWITCH)  # nothing in the environment but the test root moves it
    monkeypatch.setenv("AGENT_SAGA_HOME", "/somewhere/else")
    assert default_switch_path() == Path(HOST_SWITCH)


def test_neither_home_nor_agent_saga_switch_hides_a_host_halt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    operator = KillSwitch(FileSwitchStore(default_switch_path()))
    operator.halt("tool:wire.send", reason="fraud pattern", by="soc@corp")
    # The variable adds a store (a fleet's Redis, say): a halt there applies too.
    KillSwitch(FileSwitchStore(tmp_path / "agent-own-switch.json")).halt("tool:db.*", reason="fleet", by="soc")
    # An agent that points its home and its switch variable somewhere it controls:
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "agent-home"))
    monkeypatch.setenv("AGENT_SAGA_SWITCH", str(tmp_path / "agent-own-switch.json"))
    with pytest.raises(StepRefused, match="fraud pattern"):
        default_switch().check(req("wire.send"))
    with pytest.raises(StepRefused, match="fleet"):
        default_switch().check(req("db.write"))
    # A configured switch reads the host store as well, unless told host=False.
    mine = KillSwitch(FileSwitchStore(tmp_path / "mine.json"), poll_interval=0)
    with pytest.raises(StepRefused, match="fraud pattern"):
        PreFlightGate(switch=mine).check(req("wire.send"))
    KillSwitch(FileSwitchStore(tmp_path / "mine.json"), host=False, poll_interval=0).check(req("wire.send"))


def test_switch_posture_says_which_stores_a_saga_honours_and_whether_that_is_the_host_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = os.environ[HOST_ROOT_ENV]
    monkeypatch.delenv(HOST_ROOT_ENV)
    assert switch_posture(DefaultGate()) == {
        "enforced": True, "stores": [HOST_SWITCH], "host_default": True, "overrides": []}
    monkeypatch.setenv("AGENT_SAGA_SWITCH", "redis://127.0.0.1:6399/0")
    posture = switch_posture(DefaultGate())
    assert posture["host_default"] is True and posture["stores"][1] == HOST_SWITCH
    assert posture["stores"][0].startswith("redis://")
    monkeypatch.delenv("AGENT_SAGA_SWITCH")
    # Every way out is named:
    assert switch_posture(None) == {
        "enforced": False, "stores": [], "host_default": False,
        "overrides": ["no gate: this saga consults no kill switch"]}
    alone = KillSwitch(FileSwitchStore(tmp_path / "s.json"), host=False)
    posture = switch_posture(PreFlightGate(switch=alone))
    assert posture["enforced"] and not posture["host_default"]
    assert posture["stores"] == [str(tmp_path / "s.json")] and posture["overrides"] == ["KillSwitch(host=False)"]

    class OwnGate:
        def admit(self, saga: Any) -> None: ...

    posture = switch_posture(OwnGate())
    assert not posture["enforced"] and "OwnGate has no kill switch" in posture["overrides"][0]
    monkeypatch.setenv(HOST_ROOT_ENV, root)
    posture = switch_posture(DefaultGate())
    assert posture["enforced"] and not posture["host_default"]
    assert posture["stores"] == [str(Path(root) / HOST_SWITCH.lstrip("/"))]
    assert posture["overrides"] == [f"{HOST_ROOT_ENV}={root}"]
    # With no argument: the gate a saga started now would get (the process default).
    assert switch_posture() == posture
    from agent_saga.context import set_default_gate

    set_default_gate(None)
    try:
        assert switch_posture()["enforced"] is False
    finally:
        from agent_saga.gate import install_default_gate

        install_default_gate()


def test_init_host_creates_the_host_locations_readable_by_all_writable_by_operators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["init-host", "--group", "nogroup"]) == 0
    out = capsys.readouterr().out
    state, config = state_dir(), config_dir()
    assert str(state) in out and str(config) in out
    assert mode(state) == 0o2775 and state.stat().st_gid == 65534  # operators in the group may pull levers
    assert mode(config) == 0o755 and mode(config / "approver-keys") == 0o644  # only root trusts a key
    assert main(["halt", "--scope", "global", "--reason", "drill", "--by", "soc@corp"]) == 0
    switch = default_switch_path()
    assert mode(switch) == 0o644  # every user's agent reads it
    assert switch.stat().st_gid == 65534  # the directory's group, for the next operator
    lock = switch.with_name("switch.json.lock")
    assert mode(lock) == 0o660  # writers only: a reader that could lock it could block every operator
    assert main(["init-host"]) == 0  # idempotent


WORKER = textwrap.dedent("""
    import sys
    from agent_saga import MemoryWAL, SagaAborted, StepRefused, saga_scope

    # No configuration at all: the default gate and the default switch.
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            with saga_scope(MemoryWAL()) as s:
                s.execute(tool="wire.send", semantics="REVERSIBLE", forward=lambda: None)
            print("ran", flush=True)
        except SagaAborted as err:
            print("refused:", err.cause, flush=True)
        except StepRefused as err:  # a global halt refuses the saga itself
            print("refused:", err, flush=True)
""")


class Worker:
    """An agent process (another user) that runs one step per line it is sent."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first == "ready", first + (proc.stderr.read() if proc.stderr else "")

    def step(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        time.sleep(DEFAULT_POLL_INTERVAL)  # the documented propagation delay since its last read
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate()


def operator(*argv: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "agent_saga", *argv], env=env, cwd="/",
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.slow
def test_a_halt_reaches_an_agent_running_as_another_user_who_can_neither_lift_nor_dodge_it() -> None:
    with shared_dir() as root:
        agent = OtherUser(root)
        host = root / "host"
        env = {**os.environ, HOST_ROOT_ENV: str(host)}
        assert operator("init-host", env=env).returncode == 0
        # The agent tries both old ways out: its own home, and a switch file of its own.
        agent_env = agent.env(**{HOST_ROOT_ENV: str(host), "AGENT_SAGA_HOME": str(root / "agent-home"),
                                 "AGENT_SAGA_SWITCH": str(root / "agent-switch.json")})
        worker = Worker(agent.popen("-c", WORKER, env=agent_env))
        try:
            assert worker.step() == "ran"
            halted = operator("halt", "--scope", "tool:wire.*", "--reason", "fraud pattern", "--by", "soc@corp",
                              env=env)
            assert halted.returncode == 0, halted.stderr
            answer = worker.step()
            assert answer.startswith("refused:") and "fraud pattern" in answer and "soc@corp" in answer
            # As itself, the agent cannot lift the halt or rewrite the file...
            lift = agent.run("-m", "agent_saga", "resume", "--scope", "tool:wire.*", "--by", "agent", env=agent_env)
            assert lift.returncode == 3 and "Permission denied" in lift.stderr and "Traceback" not in lift.stderr
            overwrite = agent.run("-c", f"open({str(default_switch_path_under(host))!r}, 'w')", env=agent_env)
            assert overwrite.returncode != 0 and "PermissionError" in overwrite.stderr
            assert worker.step().startswith("refused:")
            resumed = operator("resume", "--scope", "tool:wire.*", "--by", "soc@corp", env=env)
            assert resumed.returncode == 0, resumed.stderr
            assert worker.step() == "ran"
        finally:
            worker.close()


def default_switch_path_under(host: Path) -> Path:
    return host / HOST_SWITCH.lstrip("/")


def host_state(where: Path = Path("/var/lib/agent-saga")) -> dict[str, bytes] | None:
    """What the host holds at its real switch location: None if nothing, else every file's bytes."""
    if not where.exists():
        return None
    return {str(p.relative_to(where)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(where.rglob("*"))}


@pytest.mark.slow
def test_the_real_host_location_reaches_another_user_with_no_override_at_all() -> None:
    """The same, at /var/lib/agent-saga itself: in a private mount namespace, so the host is untouched.

    The host may hold that location already (any machine where the switch was ever used):
    what is asserted is that the test changed nothing there, not that it is absent.
    """
    before = host_state()
    with shared_dir() as root, private_var_lib() as namespace:
        agent = OtherUser(root)
        env = {k: v for k, v in os.environ.items() if k not in (HOST_ROOT_ENV, "AGENT_SAGA_SWITCH")}
        agent_env = {k: v for k, v in agent.env().items() if k != HOST_ROOT_ENV}
        worker = Worker(agent.popen("-c", WORKER, env=agent_env, namespace=namespace))
        inside = tuple(in_namespace(namespace))
        try:
            assert worker.step() == "ran"  # no switch file yet: nobody has pulled a lever
            # No init-host: an operator's first halt creates the location, readable by everyone.
            halted = operator("halt", "--scope", "global", "--reason", "incident 42", "--by", "soc@corp",
                              env=env, prefix=inside)
            assert halted.returncode == 0, halted.stderr
            assert HOST_SWITCH in halted.stdout
            assert "incident 42" in worker.step()
        finally:
            worker.close()
    assert host_state() == before  # the real host never saw it


@pytest.mark.slow
def test_the_host_location_test_holds_on_a_host_that_already_has_a_switch(tmp_path: Path) -> None:
    """Run it where /var/lib/agent-saga exists and holds a halt (a host where the switch was used).

    That host is made in a mount namespace of its own (a tmpfs over /var/lib), so this
    machine's real /var/lib is left alone here too.
    """
    require_root()
    switch = json.dumps({"version": 1, "halts": [], "by": "an operator, long ago"})
    script = (
        "mount -t tmpfs -o mode=755 agent-saga-used-host /var/lib && mkdir -m 755 /var/lib/agent-saga && "
        f"echo {shlex.quote(switch)} > /var/lib/agent-saga/switch.json && "
        f"exec {shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider "
        f"{shlex.quote(__file__)}::test_the_real_host_location_reaches_another_user_with_no_override_at_all"
    )
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout


@pytest.mark.slow
def test_a_non_utf8_switch_file_is_an_unreadable_store_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "switch.json"
    KillSwitch(FileSwitchStore(path)).halt("tool:wire.send", reason="fraud", by="soc")
    clock = Clock()
    agent = KillSwitch(FileSwitchStore(path), grace=30, poll_interval=0, clock=clock)
    agent.check(req("db.read"))  # read once, while the file was fine
    path.write_bytes(b'{"version": 1, "halts": [], "by": "\xff\xfe"}\n')
    result = subprocess.run([sys.executable, "-m", "agent_saga", "status", "--store", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3  # not 1, which would say "something is halted"
    assert len(result.stderr.strip().splitlines()) == 1 and "UTF-8" in result.stderr
    assert "Traceback" not in result.stderr
    # The agent's side: the last state it read holds for the grace window, then everything is refused.
    clock.advance(10)
    with pytest.raises(StepRefused, match="fraud"):
        agent.check(req("wire.send"))
    agent.check(req("db.read"))
    clock.advance(25)
    with pytest.raises(StepRefused, match=r"unreadable for 35\.0s.*UTF-8"):
        agent.check(req("db.read"))


def test_a_halt_without_wal_path_creates_no_log_and_uses_an_existing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "sw.json")
    assert main(["halt", "--scope", "tool:a", "--reason", "r", "--by", "soc", "--store", store]) == 0
    assert not Path("agent-saga.wal").exists()  # the working directory is the test's own
    err = capsys.readouterr().err
    assert "not logged" in err and "--wal-path" in err
    from agent_saga import FileWAL

    FileWAL("agent-saga.wal").close()  # a log that exists is the user's: the change is recorded there
    assert main(["halt", "--scope", "tool:b", "--reason", "r", "--by", "soc", "--store", store]) == 0
    assert [r["body"]["scope"] for r in read_records("agent-saga.wal")] == ["tool:b"]
    explicit = tmp_path / "ops" / "switch.wal"
    explicit.parent.mkdir()
    assert main(["halt", "--scope", "tool:c", "--reason", "r", "--by", "soc", "--store", store,
                 "--wal-path", str(explicit)]) == 0  # named on the command line: created
    assert [r["type"] for r in read_records(explicit)] == ["SWITCH_HALTED"]


def test_set_switch_without_the_host_store_is_recorded_as_an_opt_out(tmp_path: Path) -> None:
    set_switch(KillSwitch(FileSwitchStore(tmp_path / "x.json"), host=False, wal=MemoryWAL()))
    posture = switch_posture(DefaultGate())
    assert posture["overrides"][-1] == "KillSwitch(host=False)" and not posture["host_default"]


def test_every_saga_records_which_switch_it_obeys_so_an_opt_out_is_visible() -> None:
    from agent_saga import MemoryWAL, PreFlightGate, saga_scope, set_default_gate
    from agent_saga.gate import install_default_gate

    def started(**scope: object) -> object:
        wal = MemoryWAL()
        with saga_scope(wal, **scope):  # type: ignore[arg-type]
            pass
        return next(r for r in wal.records() if r["type"] == "SAGA_STARTED")["body"]["gate"]

    default = started()
    assert isinstance(default, dict) and default["enforced"] is True
    assert started(gate=PreFlightGate())["enforced"] is True
    set_default_gate(None)
    try:
        assert started() is None  # no gate at all: not even the kill switch, and the log says so
    finally:
        install_default_gate()
