"""Rollback-safety certificates: was every committed effect accounted for?

An *effect* is a step of a saga whose forward call committed (STEP_COMMITTED) or
may have landed (STEP_UNKNOWN), unless the step was declared REVERSIBLE (nothing
outside the process to repair). A step whose semantics cannot be read (its
records were redacted or are encrypted without a key) counts as an effect.

An effect is accounted for when

* a STEP_COMPENSATED record says its undo ran; or
* its saga ended with SAGA_COMPLETED and the step committed: the effect is kept
  by design (an IRREVERSIBLE step of a completed saga is "explicitly terminal").

A step a resumed repair kept (REPAIR_RESUMED) is judged once, as a step of the saga
that continued it: accounted for when that saga completed or compensated it.

Everything else is named, with the reason:

* the saga has no end record (still running, or its process died mid-way);
* the saga rolled back and the step's compensation failed, or the step was
  orphaned (IRREVERSIBLE, or no undo given) or left unresolved: the rollback
  itself reported that the world was not restored;
* the step's outcome is UNKNOWN and nothing compensated it, even in a completed
  saga: it may have landed (a timed-out charge), and a completed saga whose
  fallback succeeded could have applied the effect twice;
* a tool ran inside the saga with no declared semantics (STEP_UNPROTECTED, from
  ``patch_all()`` in observe mode): whatever it did, nothing could undo it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.inert import inert
from agent_saga.log.chain import Attestations, ChainChecker, ChainUnverified, check_lines
from agent_saga.log.codec import BodyCipher
from agent_saga.log.crypto import open_record
from agent_saga.log.fixture import SyntheticLog, is_synthetic, synthetic_note
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import iter_lines
from agent_saga.log.parts import part_of, spanning_end
from agent_saga.log.records import AUDIT_SAGA, Record, RecordType

__all__ = ["Certificate", "Unaccounted", "certify", "certify_log"]

R = RecordType


@dataclass(frozen=True, slots=True)
class Unaccounted:
    """One effect that no record accounts for."""

    saga: str
    step: int  # 0 for an unprotected call, which never became a step
    tool: str | None
    semantics: str | None
    state: str  # "committed" | "unknown" | "unprotected"
    why: str

    def format_text(self) -> str:
        tool = self.tool or "<tool unknown: record redacted or encrypted>"
        sem = f" [{self.semantics}]" if self.semantics else ""
        where = f"step {self.step}" if self.step else "call"
        return f"saga {inert(self.saga)} {where} {inert(tool)}{inert(sem)} ({self.state}): {inert(self.why)}"


@dataclass(frozen=True, slots=True)
class Certificate:
    """The verdict of :func:`certify`. ``certified`` only when nothing is unaccounted."""

    certified: bool
    sagas: int
    effects: int
    accounted: int
    unaccounted: tuple[Unaccounted, ...] = ()
    chain: str = ""  # the chain verdict, when certified from a file
    head: str | None = None  # the chain head the certificate speaks about
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return self.certified

    def to_dict(self) -> dict[str, Any]:
        return {
            "certified": self.certified, "sagas": self.sagas, "effects": self.effects,
            "accounted": self.accounted, "chain": self.chain, "head": self.head,
            "unaccounted": [
                {"saga": u.saga, "step": u.step, "tool": u.tool, "semantics": u.semantics,
                 "state": u.state, "why": u.why}
                for u in self.unaccounted
            ],
            "notes": list(self.notes),
        }

    def format_text(self) -> str:
        verdict = "CERTIFIED" if self.certified else "NOT CERTIFIED"
        lines = [
            f"{verdict}: {self.accounted} of {self.effects} committed effect(s) accounted for "
            f"across {self.sagas} saga(s)"
        ]
        if self.chain:
            lines.append(f"chain: {self.chain}" + (f" (head {self.head})" if self.head else ""))
        lines.extend(f"  UNACCOUNTED {u.format_text()}" for u in self.unaccounted)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


@dataclass(slots=True)
class _Step:
    tool: str | None = None
    semantics: str | None = None
    committed: bool = False
    unknown: bool = False
    compensated: bool = False
    failed: str | None = None
    orphaned: str | None = None
    unresolved: str | None = None


@dataclass(slots=True)
class _Saga:
    steps: dict[int, _Step] = field(default_factory=dict)
    end: str | None = None  # "completed" | "rolled_back"
    rollback_started: bool = False
    unprotected: list[str] = field(default_factory=list)  # tools that ran with no semantics
    parts: dict[str, str | None] = field(default_factory=dict)  # a mesh log's devices -> their end
    # A resumed repair (REPAIR_RESUMED): the saga that continues this one, and which of this
    # saga's steps it took over; those are accounted for through it (recovery.repair).
    continued_as: str | None = None
    moved: set[int] = field(default_factory=set)


_ENDS = {R.SAGA_COMPLETED.value: "completed", R.SAGA_ROLLED_BACK.value: "rolled_back"}


def _detail(body: Mapping[str, Any] | None, key: str = "detail") -> str:
    value = body.get(key) if body else None
    return str(value) if value else "no detail recorded"


class _Tally:
    """Certify's fold: one pass over the records, state per saga and step."""

    def __init__(self) -> None:
        self.sagas: dict[str, _Saga] = {}
        self.records = 0
        self.synthetic = 0  # records made by synthesize: a fixture, never evidence

    def feed(self, r: Mapping[str, Any]) -> None:
        self.records += 1
        self.synthetic += is_synthetic(r)
        saga_id = r.get("saga")
        rtype = r.get("type")
        if not isinstance(saga_id, str) or saga_id == AUDIT_SAGA:
            return
        saga = self.sagas.setdefault(saga_id, _Saga())
        raw_body = r.get("body")
        body: Mapping[str, Any] | None = raw_body if isinstance(raw_body, Mapping) else None
        part = part_of(r)
        if part or saga.parts:
            # One saga several devices wrote to (a merged mesh log): it ends when every part has.
            if part:
                saga.parts.setdefault(part, None)
            if rtype in (R.SAGA_COMPLETED, R.SAGA_ROLLED_BACK):
                saga.parts[part] = str(rtype)
            saga.end = _ENDS.get(spanning_end(saga.parts) or "")
            if rtype in (R.SAGA_COMPLETED, R.SAGA_ROLLED_BACK):
                return
        elif rtype == R.SAGA_COMPLETED:
            saga.end = "completed"
            return
        elif rtype == R.SAGA_ROLLED_BACK:
            saga.end = "rolled_back"
            return
        if rtype == R.ROLLBACK_STARTED:
            saga.rollback_started = True
            return
        if rtype == R.REPAIR_RESUMED and body is not None and isinstance(body.get("continued_as"), str):
            self._resumed(saga, body)
            return
        if rtype == R.STEP_UNPROTECTED:
            saga.unprotected.append(str(body.get("tool")) if body and body.get("tool") else "?")
            return
        step_no = r.get("step")
        if not isinstance(step_no, int):
            return
        step = saga.steps.setdefault(step_no, _Step())
        if body is not None:
            if isinstance(body.get("tool"), str):
                step.tool = body["tool"]
            if isinstance(body.get("semantics"), str):
                step.semantics = body["semantics"]
        if rtype == R.STEP_COMMITTED:
            step.committed = True
        elif rtype == R.STEP_UNKNOWN:
            step.unknown = True
        elif rtype == R.STEP_COMPENSATED:
            step.compensated = True
        elif rtype == R.COMPENSATION_FAILED:
            step.failed = _detail(body, "error")
        elif rtype == R.STEP_ORPHANED:
            step.orphaned = _detail(body)
        elif rtype == R.STEP_UNRESOLVED:
            step.unresolved = _detail(body)

    def _resumed(self, saga: _Saga, body: Mapping[str, Any]) -> None:
        """The retained steps move to the continuing saga: committed there, and judged by its end."""
        saga.continued_as = str(body["continued_as"])
        continuation = self.sagas.setdefault(saga.continued_as, _Saga())
        retained = body.get("retained")
        for kept in retained if isinstance(retained, list) else ():
            if not (isinstance(kept, Mapping) and isinstance(kept.get("step"), int)
                    and isinstance(kept.get("from_step"), int)):
                continue
            saga.moved.add(kept["from_step"])
            step = continuation.steps.setdefault(kept["step"], _Step())
            step.tool = kept.get("tool") if isinstance(kept.get("tool"), str) else None
            step.semantics = kept.get("semantics") if isinstance(kept.get("semantics"), str) else None
            step.committed = True

    def certificate(self) -> Certificate:
        effects = accounted = 0
        missing: list[Unaccounted] = []
        for saga_id, saga in self.sagas.items():
            for tool in saga.unprotected:
                effects += 1
                missing.append(Unaccounted(
                    saga_id, 0, tool, None, "unprotected",
                    "ran inside the saga with no declared semantics (patch_all observe mode): "
                    "nothing protected it; classify it in the tool policy or wrap it",
                ))
            for index in sorted(saga.steps):
                step = saga.steps[index]
                if not (step.committed or step.unknown) or step.semantics == "REVERSIBLE" or index in saga.moved:
                    continue
                effects += 1
                why = _why(saga, step)
                if why is None:
                    accounted += 1
                else:
                    missing.append(Unaccounted(
                        saga_id, index, step.tool, step.semantics,
                        "committed" if step.committed else "unknown", why,
                    ))
        return Certificate(not missing, len(self.sagas), effects, accounted, tuple(missing))


def certify(records: Iterable[Mapping[str, Any]], *, synthetic_ok: bool = False) -> Certificate:
    """Check that every committed effect in ``records`` is accounted for (see the module doc).

    This judges records as given; it does not verify their chain (``certify_log`` does).
    Records made by ``synthesize`` raise SyntheticLog unless ``synthetic_ok`` (then
    the certificate says it is about a fixture).
    """
    tally = _Tally()
    for r in records:
        tally.feed(r)
    return _fixture_checked(tally, tally.certificate(), "the records", synthetic_ok)


def _fixture_checked(tally: _Tally, cert: Certificate, where: object, synthetic_ok: bool) -> Certificate:
    if not tally.synthetic:
        return cert
    if not synthetic_ok:
        raise SyntheticLog(where, tally.synthetic, tally.records, "certify it",
                           "pass synthetic_ok=True to certify it as a test fixture")
    return Certificate(cert.certified, cert.sagas, cert.effects, cert.accounted, cert.unaccounted,
                       cert.chain, cert.head, (*cert.notes, synthetic_note(tally.synthetic, tally.records)))


def _why(saga: _Saga, step: _Step) -> str | None:
    """Why an effect is not accounted for, or None when it is."""
    if step.compensated:
        return None
    if saga.end == "completed":
        if step.committed:
            return None
        return (
            "outcome UNKNOWN in a completed saga: it may have landed and was never compensated "
            "or reconciled"
        )
    if saga.end == "rolled_back":
        if step.failed is not None:
            return f"the rollback's compensation failed: {step.failed}"
        if step.orphaned is not None:
            return f"orphaned by the rollback (effect left standing): {step.orphaned}"
        if step.unresolved is not None:
            return f"left unresolved by the rollback: {step.unresolved}"
        return "the saga rolled back but no record says this step was compensated"
    if saga.rollback_started:
        return "the rollback started but never finished (the process died mid-rollback); run recovery"
    if saga.continued_as is not None:
        return f"a repair continued the saga as {saga.continued_as} but did not carry this step over"
    return "the saga has no end record (still running, or its process died); run recovery"


def certify_log(
    path: str | os.PathLike[str],
    *,
    encryptor: BodyCipher | None = None,
    allow_unverified: bool = False,
    synthetic_ok: bool = False,
) -> Certificate:
    """Verify the chain of the log at ``path`` and certify its records, in one streaming pass.

    A log whose chain does not verify (broken, unchained or partial) proves nothing
    about what the agent did: ChainUnverified is raised, naming the first bad record,
    unless ``allow_unverified``. Then the certificate carries the chain verdict, and a
    broken chain is never CERTIFIED. Raises OSError when the file cannot be read,
    and an EncryptionError when its records need a key. A log holding records made by
    ``synthesize`` raises SyntheticLog unless ``synthetic_ok`` (see ``certify``).
    """
    tally = _Tally()

    def feed(record: Record) -> None:
        tally.feed(open_record(record, encryptor, Path(path)) if "enc" in record else record)

    with open_regular(path) as fh:
        size = fh.seek(0, 2)
        checker = ChainChecker(Attestations.scan(iter_lines(fh, 0, size)))
        notes = check_lines(iter_lines(fh, 0, size), checker, on_record=feed)
    report = checker.report(notes)
    if not report.ok and not allow_unverified:
        raise ChainUnverified.refusing(
            Path(path).absolute(), report, "certify it",
            "pass allow_unverified=True to list its effects anyway (never certified over a broken chain)",
        )
    cert = tally.certificate()
    extra: list[str] = []
    if report.status == "broken":
        extra.append("the chain is broken, so the log may have been altered: no certificate is possible")
    elif not report.ok:
        extra.append(f"the chain is {report.status}: this certificate does not prove the log was not altered")
    return _fixture_checked(tally, Certificate(
        cert.certified and report.status != "broken", cert.sagas, cert.effects,
        cert.accounted, cert.unaccounted, report.label, report.head, tuple(extra),
    ), Path(path).absolute(), synthetic_ok)
