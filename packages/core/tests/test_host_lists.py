"""A host's trust lists count only while nobody but root or their reader can change them.

Whoever can add a line to the approver keys, the operator keys or the registered
passkeys is trusted by every reader of that list: an agent that can write one grants
its own approvals or signs its own compactions. All three lists (and the MCP server
list, tested with its adapter) are read by one reader (``notekeys.read_host_list``), with
one rule: the list, its directory and every directory above are owned by root or by the
reading user; the list and its directory are writable by nobody else (a sticky directory
is no exception); a symlink counts as where it leads, checked the same way.

The agent is played by ``nobody`` (uid 65534): only root can give it a file, so the tests
that need one run as root (as the project's CI does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_saga.approvals import (
    PasskeyCredential,
    PasskeyCredentials,
    SigningKey,
    TrustedKeys,
    trust_key,
    trust_passkey,
)
from agent_saga.approvals._authority import default_trust_path
from agent_saga.approvals._passkey import default_passkeys_path
from agent_saga.errors import ConfigurationError
from agent_saga.log.attestation import OperatorKeys, operator_keys_path
from agent_saga.notekeys import read_host_list


def approver_keys() -> tuple[Path, Callable[[], object]]:
    trust_key(SigningKey.generate("risk@corp").public)
    return default_trust_path(), TrustedKeys.load


def operator_keys() -> tuple[Path, Callable[[], object]]:
    trust_key(SigningKey.generate("ops@corp").public, operator_keys_path())

    def load() -> object:
        keys = OperatorKeys.load()  # never raises: a list it cannot believe trusts no key and says why
        if keys.error:
            raise ConfigurationError(keys.error)
        return keys

    return operator_keys_path(), load


def passkeys() -> tuple[Path, Callable[[], object]]:
    trust_passkey(PasskeyCredential("AAAA", "risk@corp", "AAAA", -8, 0, "localhost", "http://localhost").to_line())
    return default_passkeys_path(), PasskeyCredentials.load


LISTS = {"approver keys": approver_keys, "operator keys": operator_keys, "passkeys": passkeys}
#: The agent, as another user of the host.
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user (os.chown)")


@pytest.mark.parametrize("made", LISTS.values(), ids=list(LISTS))
def test_a_list_that_group_or_others_may_write_trusts_no_one(made: Callable[[], tuple[Path, Callable[[], object]]]) -> None:
    path, load = made()
    load()  # 0644 in a 0755 directory: read
    for place, mode in ((path, 0o664), (path, 0o646), (path.parent, 0o775), (path.parent, 0o777)):
        before = place.stat().st_mode
        os.chmod(place, mode)
        try:
            with pytest.raises(ConfigurationError, match=rf"writable by group or others \(mode {mode:o}\).*chmod go-w"):
                load()
        finally:
            os.chmod(place, before)
    load()


@pytest.mark.parametrize("made", LISTS.values(), ids=list(LISTS))
def test_a_sticky_directory_is_not_a_way_in(made: Callable[[], tuple[Path, Callable[[], object]]]) -> None:
    """In a sticky world-writable directory (like /tmp) the agent adds the list when it is absent."""
    path, load = made()
    os.chmod(path.parent, 0o1777)
    with pytest.raises(ConfigurationError, match=r"writable by group or others \(mode 1777\).*chmod go-w"):
        load()


def test_the_one_reader_raises_the_configuration_error_each_loader_passes_on(tmp_path: Path) -> None:
    """Every loader lets the reader's refusal through as it is: none rewraps it in its own way."""
    listed = tmp_path / "keys"
    listed.write_text("")
    listed.chmod(0o666)
    with pytest.raises(ConfigurationError, match=r"the trusted approver keys .* writable by group or others"):
        read_host_list(listed, "the trusted approver keys")


@as_root
@pytest.mark.parametrize("made", LISTS.values(), ids=list(LISTS))
def test_a_list_the_agent_owns_trusts_no_one(made: Callable[[], tuple[Path, Callable[[], object]]]) -> None:
    """0644 is not enough: the list's owner (or its directory's) can add a line whenever it likes."""
    path, load = made()
    for place in (path, path.parent, path.parent.parent):
        os.chown(place, NOBODY, -1)
        try:
            with pytest.raises(ConfigurationError, match=rf"{place} is owned by uid {NOBODY}, not by root or by "
                                                         rf"this user \(uid 0\).*chown root {place}"):
                load()
        finally:
            os.chown(place, 0, -1)
    load()


@as_root
@pytest.mark.parametrize("made", LISTS.values(), ids=list(LISTS))
def test_a_root_symlink_to_the_agents_file_trusts_no_one(
    made: Callable[[], tuple[Path, Callable[[], object]]], tmp_path: Path,
) -> None:
    """The list is a root-owned link; where it leads, and every directory on the way, are checked."""
    path, load = made()
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o755)
    kept = agent / "list"
    kept.write_bytes(path.read_bytes())
    kept.chmod(0o644)
    path.unlink()
    path.symlink_to(kept)
    load()  # everything root's: a link is no reason to refuse
    # The agent's file behind root's link; then root's file in the agent's directory (it can replace it).
    for owned in (kept, agent):
        os.chown(owned, NOBODY, -1)
        try:
            with pytest.raises(ConfigurationError, match=rf"{owned} is owned by uid {NOBODY}.*\(where {path} leads\)"):
                load()
        finally:
            os.chown(owned, 0, -1)
    # A link to a link: the second one's directory is checked too.
    hop = agent / "hop"
    hop.symlink_to(kept)
    path.unlink()
    path.symlink_to(hop)
    load()
    os.chown(agent, NOBODY, -1)
    with pytest.raises(ConfigurationError, match=rf"{agent} is owned by uid {NOBODY}"):
        load()


def test_an_untrusted_operator_list_makes_a_signed_compaction_a_break(tmp_path: Path) -> None:
    from operator_support import trusted_operator_key

    from agent_saga import ActionSemantics, FileWAL, saga_scope
    from agent_saga.audit import verify_log
    from agent_saga.log import compact

    log = tmp_path / "log.wal"
    wal = FileWAL(log)
    with saga_scope(wal, name="settled") as s:
        s.execute(tool="db.read", semantics=ActionSemantics.REVERSIBLE, forward=lambda: 1, compensate=lambda r: None)
    wal.close()
    compact(log, signer=trusted_operator_key(tmp_path))
    assert verify_log(log).status == "intact"
    os.chmod(operator_keys_path(), 0o666)  # now the agent could have trusted a key of its own
    report = verify_log(log)
    assert report.status == "broken"
    assert "writable by group or others" in report.reason
