"""Merge devices' logs into one log: a G-Set of records keyed by (device, seq, hash).

The state is the set of every device record any input holds (after each input's
own check, ``agent_saga.mesh._inputs``). Union is commutative, associative and
idempotent, and everything below is a function of that set alone, so any order
of syncs, any repetition and any grouping yields the same merged log, byte for
byte:

* **Device chains.** For each device, seq 1, 2, ... is accepted while exactly one
  record claims the seq and it links to the one accepted before (64 zeros for
  seq 1). Where two different records claim one seq (the device's log forked: a
  copy was edited and re-hashed, or one log was cloned onto two devices), or the
  one there does not link, that record and every later one of the device are
  *held out*: named (device, seq, why), never merged, and kept verbatim in the
  merged log's MESH_MERGED record, so that a later merge of the merged log reaches
  the same verdict (the set is never shrunk by a merge).
* **Device keys.** Of that chain, only what the device's own key vouches for is taken
  (``agent_saga.mesh._keys.signed_prefix``): up to its last signed DEVICE_HEAD, and
  nothing of a device whose key the hub does not trust. The rest is held out the same
  way, so it comes in once a later copy brings a head that covers it.
* **Canonical order.** The accepted records of all devices, merged by
  ``(ts, device, seq)``: each device's records stay in their own order, the rest
  is decided by the clock each record states, then the device id.
* **One saga across devices.** Records under one saga id written by several
  devices are one saga's. Their step numbers are renumbered 1, 2, ... in
  canonical order of each (device, step)'s first record, so two devices' step 1
  stay two steps; the device's own step is kept in the origin. Readers end such a
  saga only when every device's part has ended (``recovery.fold``, ``certify``).

The merged log is an ordinary chained log (``agent-saga verify`` checks it):
MESH_MERGED at seq 1 (each device's record count and head hash, what was held out
and why), then the accepted records, each keeping its body, salt and digest, with
a new seq, prev and hash, and its origin under ``"mesh"`` (device, seq, prev, hash,
step). The origin is not under the merged chain's hash; it is what every merge
checks instead: re-reading a merged log rebuilds each device record from it and
verifies it on the device's own chain, so an edited origin is caught there.
"""

from __future__ import annotations

import hashlib
import heapq
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga.inert import inert
from agent_saga.log.attestation import OperatorKeys
from agent_saga.log.codec import canonical, chain_hash, content_digest
from agent_saga.log.fs import fsync_dir, write_new
from agent_saga.log.records import AUDIT_SAGA, GENESIS, Record, RecordType
from agent_saga.mesh._inputs import FORMAT, MESH_FIELD, Exclusion, take
from agent_saga.mesh._keys import device_keys as trusted_device_keys
from agent_saga.mesh._keys import signed_prefix

__all__ = ["DeviceHead", "MeshResult", "merge", "short"]

_SALT_DOMAIN = b"agent-saga mesh salt v1\n"


def short(device: str) -> str:
    """A device id as people read it: the first 16 hex characters of its first record's hash, inert."""
    return inert(device[:16])


@dataclass(frozen=True, slots=True)
class DeviceHead:
    """One device in the merged log: how many of its records, its last seq and that record's hash.

    ``key`` is the id of the key that signed them ('' for an unsigned device, taken as a claim).
    """

    device: str
    records: int
    last_seq: int
    head: str
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "records": self.records, "last_seq": self.last_seq, "head": self.head,
                "key": self.key}


@dataclass(frozen=True, slots=True)
class MeshResult:
    """What ``merge`` made: the merged log's records (``data`` is its bytes) and what it left out."""

    records: tuple[Record, ...]
    devices: tuple[DeviceHead, ...]
    excluded: tuple[Exclusion, ...]
    inputs: tuple[str, ...]
    #: Steps of one saga, on different devices, that share an idempotency key (see ``_clashes``).
    clashes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when nothing was left out and no two devices' steps of one saga share a key."""
        return not self.excluded and not self.clashes

    def __bool__(self) -> bool:
        return self.ok

    @property
    def data(self) -> bytes:
        """The merged log, one canonical JSON record per line (the same set always gives the same bytes)."""
        return "".join(canonical(r) + "\n" for r in self.records).encode()

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the merged log to ``path`` atomically (replacing what is there) and sync it."""
        out = Path(path).absolute()
        tmp = out.with_name(f".{out.name}.mesh-{os.getpid()}")
        tmp.unlink(missing_ok=True)
        write_new(tmp, [self.data])
        os.replace(tmp, out)
        fsync_dir(out.parent)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "records": len(self.records), "inputs": list(self.inputs),
            "devices": [d.to_dict() for d in self.devices], "excluded": [x.to_dict() for x in self.excluded],
            "clashes": list(self.clashes),
        }

    def format_text(self) -> str:
        """The human view: device ids and everything taken from a log shown inert."""
        lines = [f"merged {len(self.records) - 1 if self.records else 0} record(s) from "
                 f"{len(self.devices)} device(s) and {len(self.inputs)} input(s)"]
        lines.extend(f"  device {short(d.device)}: {d.records} record(s), seq 1..{d.last_seq}, head {inert(d.head[:16])}, "
                     + (f"signed by {inert(d.key)}" if d.key else "UNSIGNED: a claim, not a proof")
                     for d in self.devices)
        for x in self.excluded:
            where = f" in {inert(x.source)}" if x.source else ""
            held = f" ({x.held} record(s) left out)" if x.held > 1 else ""
            lines.append(f"  EXCLUDED device {short(x.device)} {x.where}{where}{held}: {inert(x.why)}")
        lines.extend(f"  KEY CLASH {inert(c)}" for c in self.clashes)
        return "\n".join(lines)


def merge(
    logs: Iterable[Any], *, device_keys: str | os.PathLike[str] | OperatorKeys | None = None,
    allow_unsigned: bool = False,
) -> MeshResult:
    """Merge device logs (paths, FileWALs, records, or merged logs) into one (see the module docstring).

    Each device's records are taken only up to its last head signed by its own key, and only
    when ``device_keys`` (default: the host's list, ``mesh._keys.device_keys_path``) trusts that
    key. ``allow_unsigned`` takes the logs of devices with no key (written before device keys)
    as claims. Raises ``MeshError`` (one line, nothing merged) for an input that cannot be used
    at all; a record that does not verify, or that no trusted key vouches for, is named in
    ``excluded`` instead.
    """
    trusted = trusted_device_keys(device_keys)
    inputs = [take(log, _name(log, i)) for i, log in enumerate(logs, start=1)]
    pool: dict[str, dict[int, dict[str, Record]]] = {}
    for taken in inputs:
        for device, records in taken.devices.items():
            for r in records:
                pool.setdefault(device, {}).setdefault(r["seq"], {})[r["hash"]] = r
        for device, r in taken.held:
            if isinstance(r.get("seq"), int) and isinstance(r.get("hash"), str):
                pool.setdefault(device, {}).setdefault(r["seq"], {})[r["hash"]] = r
    chains: dict[str, list[Record]] = {}
    held: list[tuple[str, Record]] = []
    verdicts: list[Exclusion] = []
    keys: dict[str, str] = {}
    for device in sorted(pool):
        accepted, out, verdict = _walk(device, pool[device])
        if accepted:
            signed = signed_prefix(device, accepted, trusted, allow_unsigned)
            keys[device] = signed.key
            if signed.why:
                refused = accepted[signed.taken:]
                verdicts.append(Exclusion(
                    device, refused[0]["seq"],
                    f"{signed.why}; {len(refused)} record(s) from seq {refused[0]['seq']} on are refused", "",
                    len(refused), refused[-1]["seq"],
                ))
                accepted, out = accepted[: signed.taken], [*refused, *out]
        if accepted:
            chains[device] = accepted
        held.extend((device, r) for r in out)
        if verdict is not None:
            verdicts.append(verdict)
    per_input = [x for taken in inputs for x in taken.excluded]
    return _assemble(chains, keys, held, verdicts, per_input, tuple(t.source for t in inputs))


def _name(log: Any, i: int) -> str:
    if isinstance(log, (str, os.PathLike)):
        return str(log)
    path = getattr(log, "path", None)
    return str(path) if path is not None else f"input {i}"


def _walk(device: str, seqs: dict[int, dict[str, Record]]) -> tuple[list[Record], list[Record], Exclusion | None]:
    """The device's accepted chain, the records held out, and why (None when nothing was)."""
    accepted: list[Record] = []
    prev, n = GENESIS, 1
    why = ""
    while n in seqs:
        claims = seqs[n]
        if len(claims) > 1:
            hashes = ", ".join(h[:16] for h in sorted(claims))
            why = (f"{len(claims)} different records claim seq {n} (hashes {hashes}): the device's log forked "
                   "(a copy edited and re-hashed, or one log cloned onto two devices), so no branch is merged")
            break
        (record,) = claims.values()
        if record.get("prev") != prev:
            why = f"its prev does not link to seq {n - 1} of the device's chain: it belongs to another history"
            break
        accepted.append(record)
        prev, n = record["hash"], n + 1
    out = [seqs[s][h] for s in sorted(seqs) if s >= n for h in sorted(seqs[s])]
    if not out:
        return accepted, [], None
    if not why:
        why = f"seq {n} is missing from every input: the records after it wait until a log holding it is merged"
    where = min(r["seq"] for r in out)
    return accepted, out, Exclusion(device, where, f"{why}; {len(out)} record(s) from seq {where} on are held out",
                                    "", len(out), max(r["seq"] for r in out))


def _assemble(
    chains: dict[str, list[Record]], keys: dict[str, str], held: list[tuple[str, Record]], verdicts: list[Exclusion],
    per_input: list[Exclusion], inputs: tuple[str, ...],
) -> MeshResult:
    ordered = list(heapq.merge(
        *([(r["ts"], device, r["seq"], r) for r in records] for device, records in sorted(chains.items())),
        key=lambda item: item[:3],
    ))
    steps = _renumbered(ordered)
    clashes = _clashes(ordered, steps)
    heads = tuple(
        DeviceHead(device, len(records), records[-1]["seq"], records[-1]["hash"], keys.get(device, ""))
        for device, records in sorted(chains.items())
    )
    body = {
        "format": FORMAT,
        "devices": [h.to_dict() for h in heads],
        "held": [{"device": d, "record": r} for d, r in sorted(held, key=lambda x: (x[0], x[1]["seq"], x[1]["hash"]))],
        "excluded": [{"device": x.device, "seq": x.seq, "why": x.why} for x in verdicts],
        "clashes": clashes,
    }
    body_json = canonical(body)
    # Derived, not random: the same set must give the same bytes. The salt hides nothing here (the body
    # is the devices' heads and what was held out, never erased on its own).
    salt = hashlib.sha256(_SALT_DOMAIN + body_json.encode()).hexdigest()[:32]
    head: Record = {
        "digest": content_digest(salt, body_json), "prev": GENESIS, "saga": AUDIT_SAGA, "seq": 1,
        "ts": max((item[0] for item in ordered), default=0), "type": RecordType.MESH_MERGED.value,
    }
    head["hash"] = chain_hash(head)
    head.update(body=body, salt=salt)
    records: list[Record] = [head]
    prev = head["hash"]
    for seq, (_, device, _, r) in enumerate(ordered, start=2):
        new: Record = {k: r[k] for k in ("digest", "saga", "ts", "type") if k in r}
        new.update(prev=prev, seq=seq)
        origin: dict[str, Any] = {"device": device, "seq": r["seq"], "prev": r["prev"], "hash": r["hash"]}
        if "step" in r:
            new["step"] = steps.get((r["saga"], device, r["step"]), r["step"])
            origin["step"] = r["step"]
        new["hash"] = prev = chain_hash(new)
        new.update({k: r[k] for k in ("body", "salt") if k in r})
        new[MESH_FIELD] = origin
        records.append(new)
    return MeshResult(tuple(records), heads, (*per_input, *verdicts), inputs, tuple(clashes))


def _clashes(ordered: list[tuple[int, str, int, Record]], steps: dict[tuple[str, str, int], int]) -> list[str]:
    """Where two devices' steps of one saga share an idempotency key (their op or their undo's key).

    The engine derives a step's keys from (saga, step, tool): two devices that run the same tool
    as the same step number of one saga make the same key, and a service (and the recovery
    daemon's ledger) would take the second effect, or its undo, for a replay of the first.
    """
    first: dict[str, tuple[str, str, int]] = {}  # key -> (saga, device, step)
    out: list[str] = []
    for _, device, _, r in ordered:
        body, step = r.get("body"), r.get("step")
        if not isinstance(body, dict) or not isinstance(step, int) or (r["saga"], device, step) not in steps:
            continue
        comp = body.get("compensation")
        for key in (body.get("op"), comp.get("key") if isinstance(comp, dict) else None):
            if not isinstance(key, str):
                continue
            seen = first.setdefault(key, (r["saga"], device, step))
            if seen[1] != device:
                clash = (
                    f"saga {r['saga']}: step {steps[seen]} (device {seen[1][:16]} step {seen[2]}) and step "
                    f"{steps[(r['saga'], device, step)]} (device {device[:16]} step {step}) share the idempotency "
                    f"key {key}: a service and the recovery daemon's ledger take the second for a replay of the "
                    "first; give each device's part its own tool names, or its own saga id"
                )
                if clash not in out:
                    out.append(clash)
    return out


def _renumbered(ordered: list[tuple[int, str, int, Record]]) -> dict[tuple[str, str, int], int]:
    """New step numbers for the sagas several devices wrote to: 1, 2, ... by first appearance."""
    devices: dict[str, set[str]] = {}
    for _, device, _, r in ordered:
        if r.get("saga") != AUDIT_SAGA:
            devices.setdefault(r["saga"], set()).add(device)
    shared = {saga for saga, ds in devices.items() if len(ds) > 1}
    mapping: dict[tuple[str, str, int], int] = {}
    counts: dict[str, int] = {}
    for _, device, _, r in ordered:
        saga, step = r.get("saga"), r.get("step")
        if saga in shared and isinstance(step, int) and (saga, device, step) not in mapping:
            counts[saga] = counts.get(saga, 0) + 1
            mapping[(saga, device, step)] = counts[saga]
    return mapping
