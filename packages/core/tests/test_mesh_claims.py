"""A mesh merge believes a device only by its key, names all it leaves out, and a view is recovered once (issue 40).

The attacks are run as the attacker or the operator would run them: device logs written by
FileWAL through the engine, the attacker's forgery written as lines into a log file, the
merge run as ``agent-saga mesh merge`` in a subprocess.

* Item 1: device B rebuilds device A's chain from a merged log (a device is named by the hash
  of its first record, and the merged log carries every device record's origin) and appends a
  correctly chained SAGA_COMPLETED at A's next seq. Before device keys the merge took it (exit
  0), ``verify`` said intact, ``certify`` CERTIFIED, and recovery refunded nothing.
* Item 10: a torn final write was left out of the merge silently (exit 0, ``ok``).
* Item 11: the merged log was recovered, the devices merged again "for a fresh view", and the
  fresh view recovered: every undo ran twice with the same keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_saga import ActionSemantics, FileWAL, call_with, compensator
from agent_saga.audit import certify_log
from agent_saga.engine.saga import Saga
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.chain import verify_file
from agent_saga.log.codec import canonical, chain_hash, content_digest
from agent_saga.log.file import read_records
from agent_saga.mesh import device_keys_path, enrol, merge, sign_head
from agent_saga.recovery import RecoveryDaemon, fold
from agent_saga.recovery.lease import lease_keeper
from agent_saga.recovery.mesh_register import register_dir

# Each device runs the real CLI (enrol, sign, merge) in a process of its own.
pytestmark = pytest.mark.slow

C = ActionSemantics.COMPENSABLE
CANCELLED: list[tuple[str, str | None]] = []


@compensator("test.mesh_claims.cancel")
def cancel(ref: str, idempotency_key: str | None = None) -> None:
    CANCELLED.append((ref, idempotency_key))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    CANCELLED.clear()
    yield
    CANCELLED.clear()


def device_key(directory: Path, name: str, *, trusted: bool = True) -> Path:
    """A fresh device key saved under ``directory`` (trusted by this test's hub unless told not); its path."""
    from agent_saga.approvals import SigningKey, trust_key

    key = SigningKey.generate(name)
    path = key.save(directory / f"{name}.key")
    if trusted:
        trust_key(key.public, device_keys_path())
    return path


def device(path: Path, key: Path | None, tool: str, refs: list[str], *, completes: bool) -> Path:
    """A device's own log: enrolled with ``key`` (None: an unsigned log, as written before device keys),
    saga ``trip-42`` booking each ref, completed or left open (the process died), then its head signed
    as the device's sync does before the log leaves it."""
    if key is not None:
        enrol(path, key)
    wal = FileWAL(path)
    saga = Saga(wal, name="trip", saga_id="trip-42")
    saga.start()
    for ref in refs:
        saga.execute_sync(tool=tool, semantics=C, forward=lambda ref=ref: {"ref": ref},
                          compensate=call_with(cancel, ref=ref))
    if completes:
        saga.complete_sync()
    wal.barrier()
    lease_keeper().release(wal.path, saga.saga_id)
    wal.close()
    if key is not None:
        sign_head(path, key)
    return path


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``agent-saga *args`` in its own process, with this test's host (its trusted device keys)."""
    return subprocess.run([sys.executable, "-m", "agent_saga", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120, check=False)


def rebuilt(merged: Path, dev: str) -> list[dict[str, Any]]:
    """What any holder of a merged log can do: rebuild a device's own chain from the origins it carries."""
    chain = []
    for r in read_records(merged):
        origin = r.get("mesh")
        if isinstance(origin, dict) and origin["device"] == dev:
            own = {k: v for k, v in r.items() if k not in ("mesh", "step")}
            own.update({k: origin[k] for k in ("seq", "prev", "hash", "step") if k in origin})
            chain.append(own)
    return chain


def forged(chain: list[dict[str, Any]], rtype: str, saga: str, body: dict[str, Any]) -> dict[str, Any]:
    """A record correctly chained after ``chain``'s last, as the attacker writes it."""
    last, salt = chain[-1], os.urandom(16).hex()
    record = {"digest": content_digest(salt, canonical(body)), "prev": last["hash"], "saga": saga,
              "seq": last["seq"] + 1, "ts": last["ts"] + 1, "type": rtype}
    record["hash"] = chain_hash(record)
    return {**record, "body": body, "salt": salt}


def write_log(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(canonical(r) + "\n" for r in records))
    return path


def first_hash(log: Path) -> str:
    return str(next(iter(read_records(log)))["hash"])


@pytest.fixture
def trip(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A books a hotel in trip-42 and dies (its sync signed what it wrote); B completes its part; merged."""
    a = device(tmp_path / "A.wal", device_key(tmp_path, "phone-a"), "A.book_hotel", ["HT-7"], completes=False)
    b = device(tmp_path / "B.wal", device_key(tmp_path, "phone-b"), "B.book_flight", ["FL-1"], completes=True)
    merged = tmp_path / "merged.wal"
    ran = cli("mesh", "merge", a, b, "--out", merged)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "signed by phone-a+" in ran.stdout and "signed by phone-b+" in ran.stdout
    return a, b, merged


def as_b_sees_a(trip: tuple[Path, Path, Path]) -> tuple[str, list[dict[str, Any]], Path]:
    """A's device id and chain, rebuilt by B from the merged log, and B's own log."""
    a, b, merged = trip
    dev_a = first_hash(a)
    return dev_a, rebuilt(merged, dev_a), b


# -- item 1: one device cannot write another device's history -----------------------------------


@pytest.mark.parametrize("end", ["SAGA_COMPLETED", "SAGA_ROLLED_BACK"])
def test_a_device_cannot_end_another_devices_part_of_a_saga(
    tmp_path: Path, trip: tuple[Path, Path, Path], end: str
) -> None:
    dev_a, chain, b = as_b_sees_a(trip)
    assert chain == list(read_records(trip[0]))  # the merged log gives any holder A's exact chain
    body = {"clean": True} if end == "SAGA_ROLLED_BACK" else {}
    attack = write_log(tmp_path / "A-by-B.wal", [*chain, forged(chain, end, "trip-42", body)])
    out = tmp_path / "attacked.wal"
    ran = cli("mesh", "merge", attack, b, "--out", out)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert (f"EXCLUDED device {dev_a[:16]} seq {len(chain) + 1}" in ran.stdout
            and "beyond the device's last signed head" in ran.stdout), ran.stdout
    assert verify_file(out).status == "intact"
    assert all(r.get("type") != end or r["mesh"]["device"] != dev_a for r in read_records(out))
    (view,) = (v for v in fold(list(read_records(out))).values() if v.saga_id == "trip-42")
    assert view.open  # A's part never ended: recovery must cancel the hotel
    assert not certify_log(out).certified
    with RecoveryDaemon(out, clock=lambda: 4e9, lease_grace=0) as daemon:
        assert daemon.sweep().recovered == ["trip-42"]
    assert [ref for ref, _ in CANCELLED] == ["FL-1", "HT-7"]  # newest first: A's hotel is cancelled


@pytest.mark.parametrize("as_whom", ["b's own key", "b's key under a's key id"])
def test_a_head_signed_by_another_devices_key_is_refused_and_named(
    tmp_path: Path, trip: tuple[Path, Path, Path], as_whom: str
) -> None:
    dev_a, chain, b = as_b_sees_a(trip)
    ended = [*chain, forged(chain, "SAGA_ROLLED_BACK", "trip-42", {"clean": True})]
    b_key = OperatorKey.load(tmp_path / "phone-b.key")
    body: dict[str, Any] = {"device": dev_a}
    head = forged(ended, "DEVICE_HEAD", "", body)
    signed = b_key.sign("DEVICE_HEAD", head["seq"], head["prev"], body)
    if as_whom != "b's own key":
        a_id = OperatorKey.load(tmp_path / "phone-a.key").key_id
        signed["signature"]["key"] = a_id  # B's signature, claiming to be A's key
    head = forged(ended, "DEVICE_HEAD", "", signed)
    attack = write_log(tmp_path / "A-by-B.wal", [*ended, head])
    ran = cli("mesh", "merge", attack, b, "--out", tmp_path / "attacked.wal", "--json")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    (refused,) = [x for x in json.loads(ran.stdout)["excluded"] if x["device"] == dev_a]
    assert (refused["seq"], refused["through"], refused["held"]) == (len(chain) + 1, len(chain) + 2, 2)
    assert f"seq {len(chain) + 2} is a DEVICE_HEAD not signed by the device's own key" in refused["why"]
    assert "phone-a+" in refused["why"]


def test_an_untrusted_or_unsigned_device_is_refused_and_named(tmp_path: Path, trip: tuple[Path, Path, Path]) -> None:
    a, b, _ = trip
    # A device the hub never trusted ends trip-42 on its part: a part rolled back would end the saga.
    rogue_key = device_key(tmp_path, "rogue", trusted=False)
    rogue = device(tmp_path / "C.wal", rogue_key, "C.x", [], completes=False)
    wal = FileWAL(rogue)
    wal.append("SAGA_ROLLED_BACK", "trip-42", {"clean": True})
    wal.barrier()
    wal.close()
    sign_head(rogue, rogue_key)
    old = device(tmp_path / "D.wal", None, "D.book", ["OLD-1"], completes=True)  # written before device keys
    ran = cli("mesh", "merge", a, b, rogue, old, "--out", tmp_path / "m.wal")
    assert ran.returncode == 1
    assert f"EXCLUDED device {first_hash(rogue)[:16]} seq 1..5" in ran.stdout
    assert "its key rogue+" in ran.stdout and "is not a trusted device key on this hub" in ran.stdout
    assert f"EXCLUDED device {first_hash(old)[:16]} seq 1..4" in ran.stdout and "it is unsigned" in ran.stdout
    claims = cli("mesh", "merge", a, b, old, "--out", tmp_path / "m2.wal", "--allow-unsigned")
    assert claims.returncode == 0, claims.stdout
    assert f"device {first_hash(old)[:16]}: 4 record(s), seq 1..4" in claims.stdout
    assert "UNSIGNED: a claim, not a proof" in claims.stdout


def test_records_past_the_last_signed_head_wait_in_the_merged_log_for_the_next_one(tmp_path: Path) -> None:
    key = device_key(tmp_path, "phone-a")
    a = device(tmp_path / "A.wal", key, "A.book", ["HT-1"], completes=False)
    wal = FileWAL(a)  # the device writes on after its last sync, and has not signed since
    wal.append("SAGA_COMPLETED", "trip-42", {})
    wal.barrier()
    wal.close()
    first = merge([a])
    (wait,) = first.excluded
    assert "beyond the device's last signed head" in wait.why and wait.held == 1
    assert first.records[0]["body"]["held"][0]["record"]["type"] == "SAGA_COMPLETED"
    sign_head(a, key)  # the next sync
    later = merge([list(first.records), a])
    assert later.ok and later.data == merge([a]).data
    with pytest.raises(Exception, match="only the device's own key signs its heads"):
        sign_head(a, device_key(tmp_path, "phone-b"))


# -- item 10: the merge names everything it leaves out, and says so in its exit code ---------------


def test_cli_merge_names_a_torn_tail_and_every_record_after_an_altered_one(
    tmp_path: Path, trip: tuple[Path, Path, Path]
) -> None:
    a, b, _ = trip
    torn = tmp_path / "torn.wal"
    torn.write_bytes(a.read_bytes() + b'{"digest":"5f3a","prev":"')  # a writer died mid-line
    ran = cli("mesh", "merge", torn, b, "--out", tmp_path / "m.wal")
    assert ran.returncode == 1, ran.stdout
    lines = len(a.read_text().splitlines())
    assert f"in {torn}: line {lines + 1} is a torn final write" in ran.stdout
    altered = tmp_path / "altered.wal"
    rows = a.read_text().splitlines()
    record = json.loads(rows[2])
    record["body"]["amount"] = 1
    rows[2] = json.dumps(record)
    altered.write_text("\n".join(rows) + "\n")
    ran = cli("mesh", "merge", altered, b, "--out", tmp_path / "m2.wal", "--json")
    assert ran.returncode == 1
    payload = json.loads(ran.stdout)
    assert payload["ok"] is False
    (x,) = [x for x in payload["excluded"] if x["source"] == str(altered)]
    assert (x["seq"], x["through"], x["held"]) == (3, lines, lines - 2)
    refused = cli("mesh", "merge", tmp_path / "missing.wal", "--out", tmp_path / "m3.wal")
    assert refused.returncode == 3  # could not merge at all: distinct from "merged, but left out"
    assert "exit codes: 0 merged" in cli("mesh", "merge", "--help").stdout


# -- item 11: a fresh merged view is not recovered again -----------------------------------------


def test_a_fresh_merged_view_of_recovered_devices_is_refused(tmp_path: Path, trip: tuple[Path, Path, Path]) -> None:
    a, b, merged = trip
    with RecoveryDaemon(merged, clock=lambda: 4e9, lease_grace=0) as daemon:
        assert daemon.sweep().recovered == ["trip-42"]
    undone = list(CANCELLED)
    assert sorted(ref for ref, _ in undone) == ["FL-1", "HT-7"]
    (tmp_path / "views").mkdir()
    fresh = merge([a, b]).write(tmp_path / "views" / "fresh.wal")  # "merge the device logs again for a fresh view"
    with RecoveryDaemon(fresh, clock=lambda: 4e9, lease_grace=0) as daemon:
        dry = daemon.sweep(dry_run=True)
        report = daemon.sweep()
    assert undone == CANCELLED  # no undo ran twice
    assert report.recovered == [] and report.skipped == ["trip-42"]
    (escalation,) = report.new_escalations
    assert escalation.kind == "mesh-recovered-elsewhere" and str(merged) in escalation.detail
    assert [a.kind for a in dry.actions] == ["escalate"] and "mesh-recovered-elsewhere" in dry.actions[0].detail
    assert all(r.get("mesh") for r in list(read_records(fresh))[1:])  # nothing was written to the fresh view
    with RecoveryDaemon(merged, clock=lambda: 4e9, lease_grace=0) as daemon:
        assert daemon.sweep().skipped == []  # the log of record is still its own
    assert len(list(register_dir().iterdir())) == 2  # one entry per device part of trip-42
