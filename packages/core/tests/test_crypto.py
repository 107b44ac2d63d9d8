"""Encryption at rest: bodies unreadable without the key, chain verifiable without it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_saga import FileWAL, SagaAborted, saga_scope
from agent_saga.audit import certify_log, verify_log
from agent_saga.cli.main import main
from agent_saga.log import compact, read_records, redact_where
from agent_saga.log.crypto import (
    AESGCMEncryptor,
    EncryptionKeyMissing,
    EncryptionKeyWrong,
    generate_key,
)


@pytest.fixture
def crypto() -> None:
    # The [encryption] extra. The last two tests run without it and check the error.
    pytest.importorskip("cryptography")


@pytest.fixture
def key(crypto: None) -> AESGCMEncryptor:
    return AESGCMEncryptor.from_base64(generate_key())


def write(path: Path, enc: AESGCMEncryptor | None) -> None:
    with FileWAL(path, encryptor=enc) as wal:
        wal.append("SAGA_STARTED", "s1", {"customer": "ann@example.com"})
        wal.append("STEP_COMMITTED", "s1", {"amount": 4200, "card": "4242"}, 1)
        wal.append("SAGA_COMPLETED", "s1", {})


def test_bodies_are_encrypted_and_the_chain_verifies_without_the_key(wal_path: Path, key: AESGCMEncryptor) -> None:
    write(wal_path, key)
    raw = wal_path.read_text()
    assert "ann@example.com" not in raw
    assert '"amount"' not in raw and '"card"' not in raw  # "4200" alone may turn up inside a hex hash
    assert '"body"' not in raw
    lines = [json.loads(x) for x in raw.splitlines()]
    assert all(x["enc"].startswith(key.key_id + ":") for x in lines)
    assert verify_log(wal_path).ok  # no key needed to check the chain
    bodies = [r["body"] for r in read_records(wal_path, encryptor=key)]
    assert bodies == [{"customer": "ann@example.com"}, {"amount": 4200, "card": "4242"}, {}]
    with FileWAL(wal_path, encryptor=key) as wal:
        assert [r["body"] for r in wal.records()] == bodies


def test_reading_without_the_key_fails_loudly(wal_path: Path, key: AESGCMEncryptor,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_SAGA_WAL_KEY", raising=False)
    write(wal_path, key)
    with pytest.raises(EncryptionKeyMissing, match=r"record seq 1 is encrypted .*AGENT_SAGA_WAL_KEY"):
        list(read_records(wal_path))
    other = AESGCMEncryptor.from_base64(generate_key())
    with pytest.raises(EncryptionKeyWrong, match=f"encrypted with key {key.key_id}"):
        list(read_records(wal_path, encryptor=other))


def test_a_ciphertext_moved_to_another_record_does_not_decrypt(wal_path: Path, key: AESGCMEncryptor) -> None:
    write(wal_path, key)
    records = [json.loads(x) for x in wal_path.read_text().splitlines()]
    records[0]["enc"], records[1]["enc"] = records[1]["enc"], records[0]["enc"]
    wal_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(EncryptionKeyWrong, match="altered or moved"):
        list(read_records(wal_path, encryptor=key))
    assert verify_log(wal_path).bad_seq == 1  # and the chain says so too


def test_the_key_can_come_from_the_environment(wal_path: Path, monkeypatch: pytest.MonkeyPatch, crypto: None) -> None:
    monkeypatch.setenv("AGENT_SAGA_WAL_KEY", generate_key(16))
    write(wal_path, None)
    assert '"enc"' in wal_path.read_text()
    assert list(read_records(wal_path))[1]["body"]["amount"] == 4200
    cert = certify_log(wal_path)
    # A bare STEP_COMMITTED names no semantics: counted as an effect, kept by the completed saga.
    assert cert.certified
    assert (cert.effects, cert.accounted) == (1, 1)
    monkeypatch.delenv("AGENT_SAGA_WAL_KEY")
    assert main(["certify", "--wal-path", str(wal_path)]) == 3


def test_redaction_and_compaction_work_on_an_encrypted_log(
    wal_path: Path, key: AESGCMEncryptor, operator_key: Path
) -> None:
    write(wal_path, key)
    with FileWAL(wal_path, encryptor=key) as wal:
        wal.append("SAGA_STARTED", "s2", {"customer": "bob@example.com"})
    result = redact_where(wal_path, lambda r: "customer" in r["body"], by="dpo", reason="erasure", encryptor=key,
                          signer=operator_key)
    assert result.seqs == (1, 4)
    erased = next(iter(read_records(wal_path, encryptor=key)))
    assert "enc" not in erased
    assert "salt" not in erased
    assert verify_log(wal_path).ok
    # The REDACTION record is written in clear, so a verifier without the key can use it.
    assert '"type":"REDACTION"' in wal_path.read_text()
    assert '"seqs":[1,4]' in wal_path.read_text()
    compact(wal_path, encryptor=key, signer=operator_key)  # s1 completed: its rest goes
    assert {r["saga"] for r in read_records(wal_path, encryptor=key)} == {"s2", ""}
    assert verify_log(wal_path).ok


def test_an_encrypted_log_from_the_engine_certifies_with_the_key(wal_path: Path, key: AESGCMEncryptor,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_saga import ActionSemantics, Compensation

    wal = FileWAL(wal_path, encryptor=key)
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="stripe.charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: 1,
                  compensate=lambda r: Compensation(fn=lambda: None, description="refund"))
        raise RuntimeError("stop")
    wal.close()
    assert certify_log(wal_path, encryptor=key).certified
    monkeypatch.setenv("AGENT_SAGA_WAL_KEY", "not base64!")
    with pytest.raises(ValueError, match=r"AGENT_SAGA_WAL_KEY.*not valid base64"):
        certify_log(wal_path)


def test_plaintext_lines_keep_their_exact_format(wal_path: Path) -> None:
    write(wal_path, None)
    line = wal_path.read_text().splitlines()[1]
    assert list(json.loads(line)) == ["digest", "prev", "saga", "seq", "step", "ts", "type", "body", "salt", "hash"]


def test_bad_keys_are_refused_clearly(crypto: None) -> None:
    with pytest.raises(ValueError, match="16, 24 or 32 raw bytes, got 5 bytes"):
        AESGCMEncryptor(b"short")
    with pytest.raises(ValueError, match="not valid base64"):
        AESGCMEncryptor.from_base64("***")
    with pytest.raises(ValueError, match="16, 24 or 32"):
        generate_key(20)
    assert len(base64.b64decode(generate_key())) == 32


@pytest.mark.slow
def test_importing_the_package_does_not_import_cryptography(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        import agent_saga
        from agent_saga import FileWAL, audit_root
        from agent_saga.audit import certify, verify_log
        with FileWAL({str(tmp_path / 'x.wal')!r}) as wal:
            wal.append("SAGA_STARTED", "a", {{}})
        assert verify_log({str(tmp_path / 'x.wal')!r}).ok
        print(sorted(m for m in sys.modules if m.startswith("cryptography")))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_without_cryptography_the_error_names_the_extra(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "cryptography" or name.startswith("cryptography."):
                    raise ImportError("cryptography is not installed here")
                return None
        sys.meta_path.insert(0, Block())
        from agent_saga.log.crypto import AESGCMEncryptor
        try:
            AESGCMEncryptor(b"k" * 32)
        except ImportError as err:
            print(err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "pip install 'agent-saga[encryption]>=3.0.0'" in out.stdout


def test_an_altered_ciphertext_breaks_the_chain_for_a_verifier_without_the_key(
    wal_path: Path, key: AESGCMEncryptor
) -> None:
    write(wal_path, key)
    lines = wal_path.read_text().splitlines()
    record = json.loads(lines[1])
    token = record["enc"]
    record["enc"] = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    lines[1] = json.dumps(record, separators=(",", ":"))
    wal_path.write_text("".join(x + "\n" for x in lines))
    report = verify_log(wal_path)
    assert report.bad_seq == 2
    assert "does not match its digest" in report.reason
