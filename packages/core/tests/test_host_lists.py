"""A host's trust lists count only while group and others cannot write them.

Whoever can add a line to the approver keys, the operator keys or the registered
passkeys is trusted by every reader of that list: an agent that can write one grants
its own approvals or signs its own compactions. All three lists are read by one
reader (``notekeys.read_host_list``), which refuses a list that group or others may
write, or whose directory they may write (a sticky directory excepted).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_saga.approvals import SigningKey, TrustedKeys, trust_key
from agent_saga.approvals._authority import default_trust_path
from agent_saga.errors import ConfigurationError
from agent_saga.log.attestation import OperatorKeys, operator_keys_path


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


LISTS = {"approver keys": approver_keys, "operator keys": operator_keys}


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
    """In a sticky directory (like /tmp) others may add files but cannot replace this one."""
    path, load = made()
    os.chmod(path.parent, 0o1777)
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
