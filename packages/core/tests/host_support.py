"""Running part of a test as another user: an agent that is not the operator.

Permission-based protections only mean something against a process that is not
root, so these tests start the agent (or a CLI) as ``nobody``. That process cannot
read the test's virtual environment (it lives under root's 0700 directories), so
the library and its one dependency are copied into a world-readable directory and
run with a Python interpreter ``nobody`` can execute.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pluggy
import pytest

import agent_saga

NOBODY = "nobody"


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test runs an agent as another user (setuid), which needs root: run the suite as root "
                    "(the CI container does), or in a container where you are root")


def nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(NOBODY)
    except KeyError:
        pytest.fail("no user 'nobody' on this host: create one (useradd -r nobody) to run the cross-user tests")


def as_user(user: pwd.struct_passwd) -> Callable[[], None]:
    def drop() -> None:  # runs in the child between fork and exec
        os.setgroups([])
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return drop


@contextmanager
def shared_dir(prefix: str = "agent-saga-host-") -> Iterator[Path]:
    """A temporary directory every user can read and traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class OtherUser:
    """Runs ``python`` and ``agent-saga`` as ``nobody`` with a copy of this checkout's library."""

    def __init__(self, root: Path) -> None:
        require_root()
        self.user = nobody()
        self.site = root / "site"
        for package in (Path(agent_saga.__file__).parent, Path(pluggy.__file__).parent):
            shutil.copytree(package, self.site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
        for path in [self.site, *self.site.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.python = self._find_python()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(PYTHONPATH=str(self.site), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1",
                   HOME="/nonexistent", **extra)
        return env

    def run(self, *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.python, *argv], env=env or self.env(), cwd=cwd or "/", capture_output=True,
                              text=True, timeout=timeout, preexec_fn=as_user(self.user), check=False)

    def popen(self, *argv: str, env: dict[str, str] | None = None,
              namespace: int | None = None) -> subprocess.Popen[str]:
        """Start ``python argv`` as the other user; in the mount namespace of process ``namespace`` if given."""
        command, drop = [self.python, *argv], as_user(self.user)
        if namespace is not None:
            # nsenter needs root; setpriv then drops to the other user inside the namespace.
            command = ["nsenter", "--mount", f"--target={namespace}", "--", "setpriv",
                       f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups", *command]
            drop = None  # type: ignore[assignment]
        return subprocess.Popen(command, env=env or self.env(), cwd="/", stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=drop)

    def _find_python(self) -> str:
        tried = []
        for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3.11", "/usr/bin/python3"):
            if candidate in tried or not os.path.exists(candidate):
                continue
            tried.append(candidate)
            try:
                probe = subprocess.run(
                    [candidate, "-c", "import sys, agent_saga; assert sys.version_info >= (3, 11)"],
                    env=self.env(), cwd="/", capture_output=True, text=True, timeout=60,
                    preexec_fn=as_user(self.user), check=False,
                )
            except PermissionError:
                continue  # under a directory the other user cannot enter
            if probe.returncode == 0:
                return candidate
        pytest.fail(f"no Python >= 3.11 that the user {NOBODY} can run (tried {tried}): install python3.11 "
                    "system-wide (apt-get install python3.11)")


@contextmanager
def private_var_lib() -> Iterator[int]:
    """A mount namespace whose /var/lib is an empty tmpfs; yields the pid of a process inside it.

    Enter it with ``nsenter --mount --target=PID``. The real /var/lib is never touched,
    so a test can use the library's real host location with no override.
    """
    require_root()
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o mode=755 agent-saga-test /var/lib && echo mounted && exec sleep 3600"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "mounted":
            holder.wait(timeout=30)
            assert holder.stderr is not None
            pytest.fail(f"could not create a private mount namespace ({holder.stderr.read().strip()}): this test "
                        "needs root with CAP_SYS_ADMIN and util-linux's unshare (a privileged container)")
        yield holder.pid
    finally:
        holder.kill()
        holder.communicate()


def in_namespace(pid: int, *argv: str) -> list[str]:
    """``argv`` run (as root) inside the mount namespace of process ``pid``."""
    return ["nsenter", "--mount", f"--target={pid}", "--", *argv]
