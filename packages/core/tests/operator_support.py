"""An operator's signing key for the tests that compact or redact a log.

Compactions and redactions are signed by an operator key the host trusts
(``agent_saga.log.attestation``); conftest moves the host under the test's
tmp_path, so each test trusts keys of its own, never the machine's.
"""

from __future__ import annotations

from pathlib import Path


def trusted_operator_key(directory: Path, name: str = "ops@example") -> Path:
    """A fresh operator key saved under ``directory``, trusted on this test's host; its file's path."""
    from agent_saga.approvals import SigningKey, trust_key
    from agent_saga.log.attestation import operator_keys_path

    key = SigningKey.generate(name)
    path = key.save(directory / f"{name}.key")
    trust_key(key.public, operator_keys_path())
    return path


def untrusted_operator_key(directory: Path, name: str = "agent@example") -> Path:
    """A fresh key nobody trusted (what an agent could make for itself); its file's path."""
    from agent_saga.approvals import SigningKey

    return SigningKey.generate(name).save(directory / f"{name}.key")
