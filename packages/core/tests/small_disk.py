"""Run Python on a tiny disk of its own: a real full disk (ENOSPC) for the tests that need one.

The disk is a tmpfs mounted in a private user and mount namespace (``unshare --user
--map-root-user --mount``): no privilege is needed, nothing outside the child sees it,
and it vanishes with the child. The code runs with the mount point as ``DISK`` and
``fill(DISK)`` at hand, which writes a filler file until the disk is full.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["run_on_small_disk"]

HERE = Path(__file__).parent

_PRELUDE = '''
import errno, os, sys
from pathlib import Path
sys.path.insert(0, {here!r})
DISK = Path(sys.argv[1])

def fill(directory, name="filler"):
    """Write zeros into directory/name until the disk refuses (ENOSPC)."""
    fd = os.open(Path(directory) / name, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, bytes(4096))
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                try:
                    os.write(fd, b"x")  # the last few bytes of the last block
                except OSError:
                    return
    finally:
        os.close(fd)
'''


def _check_unshare() -> None:
    hint = (
        "these tests mount a tiny tmpfs in a private user+mount namespace to get a real full disk; "
        "install util-linux's unshare and allow unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
    )
    assert shutil.which("unshare"), f"unshare not found: {hint}"
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0, f"unshare failed ({probe.stderr.strip()}): {hint}"


def run_on_small_disk(
    workdir: Path, code: str, *, size: str = "64k", inodes: int | None = None,
    env: dict[str, str] | None = None, timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (after the prelude above) with a fresh tmpfs of ``size`` mounted at ``DISK``."""
    _check_unshare()
    mount = workdir / "small-disk"
    mount.mkdir()
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    script = 'mount -t tmpfs -o "$1" tmpfs "$2" && shift 2 && exec "$@"'
    program = _PRELUDE.format(here=str(HERE)) + textwrap.dedent(code)
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", options,
         str(mount), sys.executable, "-c", program, str(mount)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
