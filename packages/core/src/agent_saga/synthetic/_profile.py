"""Shareable synthetic traffic: a log's shape without anyone's data.

``WALProfile.fit(records)`` learns what a log looks like: which sagas ran in which
order of records (the record types, step numbers and tool names of each saga, with
how often each sequence occurred), how far apart their records were, and the shape
of every body field. It never keeps a value a person (or an agent) wrote:

* a string becomes its shape: a length range and its character classes (lower,
  upper, digit, space, the punctuation characters seen, other), or ``hex``;
* a number becomes a range of magnitudes (digits of an int, decimal exponent of a
  float) and the signs seen; a bool the share that was true, to one decimal;
* a field named in ``redact`` keeps only that it was present (not even a length);
* record types the engine writes are kept; any other type an application wrote into the
  log is renamed ``OTHER_1``, ``OTHER_2``... (its name could be data);
* the only strings kept are tool names (and compensation handler names, which are
  registered code like tool names), the engine's own enums (semantics, step
  states, outcomes) in the engine's fields, and the values of ``enums`` the caller
  declared for a field (``enums={"currency": ["USD", "EUR"]}``);
* keys of dicts nested inside arguments, results and handler kwargs become ``k1``,
  ``k2``...: a key there can be data too (an email used as a key). Argument names
  themselves (the first level) are kept: they are the tool's parameters.

``synthesize(profile, sagas=50, seed=7)`` draws sagas from the profile and chains
them with the log's own codec (``agent_saga.log.codec``) into records that verify
like a real log. It is deterministic: the same profile and seed give the same bytes
(the salts come from the seed too). Every record is marked (``agent_saga.log.fixture``):
``"__synthetic__": true`` in its body and a ``synthetic-`` saga id in its chained
header, so ``certify`` and ``export`` refuse it as evidence unless told it is a fixture.

What it cannot keep: values that must agree across records (an ``op`` or a
compensation ``key`` is made to agree within one step, nothing else is), anything
inside an encrypted or redacted body (counted, not shaped), and correlations
between fields.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import string
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.log.codec import canonical, chain_hash, content_digest
from agent_saga.log.fixture import SYNTHETIC_MARK, SYNTHETIC_SAGA_PREFIX
from agent_saga.log.records import AUDIT_SAGA, GENESIS, Record, RecordType
from agent_saga.log.source import log_records
from agent_saga.semantics import ActionSemantics, Outcome, StepState

__all__ = ["PROFILE_FORMAT", "ProfileError", "SyntheticRecords", "WALProfile", "synthesize"]

PROFILE_FORMAT = "agent-saga/wal-profile/1"

# Engine vocabulary a body may carry in the engine's own fields: kept as-is.
_ENGINE_ENUMS = frozenset(str(v) for e in (ActionSemantics, StepState, Outcome) for v in e)
_RECORD_TYPES = frozenset(str(t) for t in RecordType)
_ENGINE_ENUM_FIELDS = frozenset({"semantics", "state", "outcome"})
# Body fields that hold what the caller or the world wrote: below their first level, keys are data.
_USER_FIELDS = frozenset({"args", "kwargs", "result", "facts", "policy_args"})
# Fields whose value identifies one step across its records (intent, commit, undo).
_LINKED = frozenset({"op", "key"})
_PUNCT = frozenset(string.punctuation)
_OTHER = "äéßøλж"  # stands in for any non-ASCII character
_HEX = frozenset("0123456789abcdef")
# The first synthetic record's time (2026-01-01T00:00:00Z, µs): a fixed point, not the source's.
_EPOCH_US = 1_767_225_600_000_000


class ProfileError(ValueError):
    """A profile (or the records to fit one) is not usable; the message says why."""


# -- shapes ------------------------------------------------------------------------------
# A shape is a dict kind -> stats, each with "n" (how many values of that kind were seen).


def _classes(text: str) -> dict[str, Any]:
    if len(text) >= 8 and set(text) <= _HEX and not text.isdigit():
        return {"hex": True, "cls": ""}
    found: set[str] = set()
    punct: set[str] = set()
    for ch in text:
        if ch.islower() and ch.isascii():
            found.add("a")
        elif ch.isupper() and ch.isascii():
            found.add("A")
        elif ch.isdigit() and ch.isascii():
            found.add("9")
        elif ch == " ":
            found.add("s")
        elif ch in _PUNCT:
            punct.add(ch)
        else:
            found.add("o")
    return {"hex": False, "cls": "".join(sorted(found)), "punct": sorted(punct)}


def _magnitude(x: float) -> int:
    return 0 if x == 0 else math.floor(math.log10(abs(x)))


def _sign(x: float) -> str:
    return "+" if x > 0 else "-" if x < 0 else "0"


class _Fitter:
    def __init__(self, redact: Iterable[str], enums: Mapping[str, Iterable[str]]) -> None:
        self.redact = {r.lower() for r in redact}
        self.enums = {k: frozenset(v) for k, v in enums.items()}

    def shape(self, value: Any, name: str, into: dict[str, Any], *, user: int | None) -> None:
        """Fold ``value`` (found under key ``name``) into the shape ``into``.

        ``user`` is None in the engine's own fields, else the depth inside a user field.
        """
        if name.lower() in self.redact:
            self._count(into, "redacted")
            return
        if value is None:
            self._count(into, "null")
        elif isinstance(value, bool):
            s = self._count(into, "bool")
            s["true"] = s.get("true", 0) + int(value)
        elif isinstance(value, int):
            s = self._count(into, "int")
            digits = len(str(abs(value)))
            s["digits"] = _span(s.get("digits"), digits)
            s["signs"] = "".join(sorted(set(s.get("signs", "")) | {_sign(value)}))
        elif isinstance(value, float):
            s = self._count(into, "float")
            s["exp"] = _span(s.get("exp"), _magnitude(value))
            s["signs"] = "".join(sorted(set(s.get("signs", "")) | {_sign(value)}))
        elif isinstance(value, str):
            self._string(value, name, into, user=user)
        elif isinstance(value, list | tuple):
            s = self._count(into, "list")
            s["len"] = _span(s.get("len"), len(value))
            item = s.setdefault("item", {})
            for v in value:
                self.shape(v, name, item, user=user)
        elif isinstance(value, Mapping):
            s = self._count(into, "dict")
            keys = s.setdefault("keys", {})
            nested = user is not None and user >= 1
            # Inside a user field, a nested dict's keys are data: numbered, in sorted order.
            names = sorted(value, key=str)
            for i, k in enumerate(names, 1):
                key = f"k{i}" if nested else str(k)
                slot = keys.setdefault(key, {"n": 0, "shape": {}})
                slot["n"] += 1
                child_user = (0 if key in _USER_FIELDS else None) if user is None else user + 1
                # The original key decides redaction and declared enums, even where it is not kept.
                self.shape(value[k], str(k), slot["shape"], user=child_user)
        else:
            self._count(into, "other")

    def _string(self, value: str, name: str, into: dict[str, Any], *, user: int | None) -> None:
        declared = self.enums.get(name)
        engine = user is None and (
            (name in _ENGINE_ENUM_FIELDS and value in _ENGINE_ENUMS) or name in ("tool", "handler")
        )
        if engine or (declared is not None and value in declared):
            s = self._count(into, "enum")
            values = s.setdefault("values", {})
            values[value] = values.get(value, 0) + 1
            return
        s = self._count(into, "str")
        s["len"] = _span(s.get("len"), len(value))
        c = _classes(value)
        s["hex"] = c["hex"] and s.get("hex", True)
        s["cls"] = "".join(sorted(set(s.get("cls", "")) | set(c["cls"])))
        # One character an item: the profile holds no run of characters a person typed.
        s["punct"] = sorted(set(s.get("punct", [])) | set(c.get("punct", [])))

    @staticmethod
    def _count(into: dict[str, Any], kind: str) -> dict[str, Any]:
        s: dict[str, Any] = into.setdefault(kind, {"n": 0})
        s["n"] += 1
        return s


def _span(old: list[int] | None, x: int) -> list[int]:
    return [x, x] if old is None else [min(old[0], x), max(old[1], x)]


# -- the profile --------------------------------------------------------------------------


@dataclass(slots=True)
class WALProfile:
    """What a log looks like, with none of its values (see the module docstring)."""

    #: Saga templates: {"count", "events": [[type, step, tool], ...], "dt": [[lo, hi] µs, ...]}.
    templates: list[dict[str, Any]] = field(default_factory=list)
    #: Body shapes by "TYPE" or "TYPE:tool".
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Deciles of the time between one saga's start and the next's, in µs.
    start_gaps: list[int] = field(default_factory=list)
    sagas: int = 0
    records: int = 0
    #: Records whose body could not be shaped (redacted or encrypted): counted only.
    opaque: int = 0
    redacted_fields: list[str] = field(default_factory=list)
    enum_fields: list[str] = field(default_factory=list)

    @classmethod
    def fit(
        cls,
        records: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
        redact: Iterable[str] = (),
        *,
        enums: Mapping[str, Iterable[str]] | None = None,
    ) -> WALProfile:
        """Learn the profile of ``records``: dicts as ``read_records`` or ``json.loads`` give them, or a log's path.

        ``redact`` names fields (anywhere in a body) whose very shape is dropped;
        ``enums`` declares fields whose values are a fixed vocabulary, kept when a
        value is in it. Records the log writes about itself (compaction, redaction)
        are not traffic and are skipped.
        """
        if isinstance(redact, str):
            raise ProfileError(f"redact must be a list of field names, got the string {redact!r}: use [{redact!r}]")
        fitter = _Fitter(redact, enums or {})
        by_saga: dict[str, list[Mapping[str, Any]]] = {}
        for record in log_records(records, caller="WALProfile.fit"):
            if record["saga"] != AUDIT_SAGA:  # the log's own records are not traffic
                by_saga.setdefault(record["saga"], []).append(record)
        profile = cls(
            redacted_fields=sorted({r.lower() for r in redact}),
            enum_fields=sorted((enums or {}).keys()),
        )
        templates: dict[tuple[tuple[str, int | None, str | None], ...], dict[str, Any]] = {}
        starts: list[int] = []
        others: dict[str, str] = {}  # a record type the engine does not write: a name of its own, numbered
        for saga_records in by_saga.values():
            saga_records.sort(key=lambda r: r.get("seq", 0))
            tools: dict[int, str] = {}
            events: list[tuple[str, int | None, str | None]] = []
            dts: list[int] = []
            prev_ts: int | None = None
            for r in saga_records:
                step = r.get("step") if isinstance(r.get("step"), int) else None
                body = r.get("body")
                if isinstance(body, Mapping) and isinstance(body.get("tool"), str) and step is not None:
                    tools.setdefault(step, body["tool"])
                tool = tools.get(step) if step is not None else None
                rtype = r["type"] if r["type"] in _RECORD_TYPES else others.setdefault(r["type"], f"OTHER_{len(others) + 1}")
                events.append((rtype, step, tool))
                ts = _micros(r.get("ts"))
                dts.append(0 if prev_ts is None else max(0, ts - prev_ts))
                if prev_ts is None:
                    starts.append(ts)
                prev_ts = ts
                profile.records += 1
                if isinstance(body, Mapping):
                    key = rtype if tool is None else f"{rtype}:{tool}"
                    shape = profile.bodies.setdefault(key, {})
                    fitter.shape({k: v for k, v in body.items() if k != SYNTHETIC_MARK}, "", shape, user=None)
                else:
                    profile.opaque += 1
            sig = tuple(events)
            t = templates.get(sig)
            if t is None:
                templates[sig] = {"count": 1, "events": [list(e) for e in events], "dt": [[d, d] for d in dts]}
            else:
                t["count"] += 1
                t["dt"] = [[min(a, d), max(b, d)] for (a, b), d in zip(t["dt"], dts, strict=True)]
        profile.templates = list(templates.values())
        profile.sagas = len(by_saga)
        starts.sort()
        gaps = sorted(b - a for a, b in itertools.pairwise(starts))
        profile.start_gaps = [gaps[min(len(gaps) - 1, (len(gaps) * q) // 10)] for q in range(11)] if gaps else []
        return profile

    # -- persistence -----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROFILE_FORMAT, "sagas": self.sagas, "records": self.records, "opaque": self.opaque,
            "redacted_fields": self.redacted_fields, "enum_fields": self.enum_fields,
            "start_gaps_us": self.start_gaps, "templates": self.templates, "bodies": self.bodies,
        }

    def to_json(self) -> str:
        """The profile as compact JSON text (keys sorted: the same profile, the same bytes)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> WALProfile:
        """Read a profile written by :meth:`to_json`; ProfileError names what is wrong."""
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ProfileError(f"a profile must be JSON written by WALProfile.to_json: {err}") from None
        if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ProfileError(f"not a WAL profile (format {got!r}, expected {PROFILE_FORMAT!r}): fit one with WALProfile.fit")
        try:
            profile = cls(
                templates=list(data["templates"]), bodies=dict(data["bodies"]),
                start_gaps=[int(g) for g in data["start_gaps_us"]], sagas=int(data["sagas"]),
                records=int(data["records"]), opaque=int(data.get("opaque", 0)),
                redacted_fields=list(data.get("redacted_fields", [])), enum_fields=list(data.get("enum_fields", [])),
            )
            for t in profile.templates:
                if int(t["count"]) < 1 or len(t["events"]) != len(t["dt"]):
                    raise ValueError("a template's events and dt differ in length, or its count is < 1")
        except (KeyError, TypeError, ValueError) as err:
            raise ProfileError(f"the profile is incomplete or damaged ({type(err).__name__}: {err}): fit it again") from None
        return profile

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile to ``path`` (UTF-8 JSON)."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WALProfile:
        """Read a profile saved by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def format_text(self) -> str:
        tools = sorted({e[2] for t in self.templates for e in t["events"] if e[2]})
        return (
            f"profile of {self.sagas} saga(s), {self.records} record(s), {len(self.templates)} saga shape(s); "
            f"tools: {', '.join(tools) or 'none'}"
            + (f"; {self.opaque} redacted or encrypted bod(ies) counted, not shaped" if self.opaque else "")
        )


def _micros(ts: Any) -> int:
    # FileWAL and the server logs write integer µs; MemoryWAL writes float seconds.
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return 0
    return int(ts * 1_000_000) if isinstance(ts, float) else ts


# -- synthesis ----------------------------------------------------------------------------


class SyntheticRecords(list[Record]):
    """Chained synthetic records; :meth:`write` makes them a log file."""

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write a new log file at ``path`` (refused if it exists), flushed to disk."""
        p = Path(path)
        with open(p, "xb") as fh:
            for chunk in _lines(self):
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        return p


def _lines(records: Iterable[Record]) -> Iterator[bytes]:
    # The layout FileWAL writes (agent_saga.log.codec.chain_lines): header, body, salt, hash.
    for r in records:
        header = {k: r[k] for k in ("digest", "prev", "saga", "seq", "step", "ts", "type") if k in r}
        yield f'{canonical(header)[:-1]},"body":{canonical(r["body"])},"salt":"{r["salt"]}","hash":"{r["hash"]}"}}\n'.encode()


class _Maker:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self, shape: Mapping[str, Any], link: tuple[int, int | None, str] | None, name: str) -> Any:
        kinds = sorted(shape)
        if not kinds:
            return None
        kind = self.rng.choices(kinds, weights=[shape[k]["n"] for k in kinds])[0]
        s = shape[kind]
        rng = self.rng
        if kind == "null" or kind == "other":
            return None
        if kind == "redacted":
            return "[redacted]"
        if kind == "bool":
            return rng.random() < s.get("true", 0) / max(1, s["n"])
        if kind == "int":
            d = rng.randint(*s["digits"])
            sign = rng.choice(s["signs"])
            if sign == "0":
                return 0
            x = rng.randint(10 ** (d - 1) if d > 1 else 1, 10**d - 1)
            return -x if sign == "-" else x
        if kind == "float":
            e = rng.randint(*s["exp"])
            sign = rng.choice(s["signs"])
            if sign == "0":
                return 0.0
            f = float(f"{rng.uniform(10.0**e, 10.0 ** (e + 1)):.6g}")
            return -f if sign == "-" else f
        if kind == "enum":
            values = sorted(s["values"])
            return rng.choices(values, weights=[s["values"][v] for v in values])[0]
        if kind == "str":
            if link is not None and name in _LINKED:
                # One step's op (or undo key) is the same in each of its records.
                return _linked(link, name, s["len"][1], bool(s.get("hex")))
            return self._text(s)
        if kind == "list":
            n = rng.randint(*s["len"])
            return [self.value(s.get("item", {}), None, name) for _ in range(n)]
        if kind == "dict":
            out: dict[str, Any] = {}
            for k in sorted(s["keys"]):
                slot = s["keys"][k]
                if slot["n"] >= s["n"] or rng.random() < slot["n"] / s["n"]:
                    out[k] = self.value(slot["shape"], link, k)
            return out
        raise ProfileError(f"the profile has a value of unknown kind {kind!r}: fit it again with this version")

    def _text(self, s: Mapping[str, Any]) -> str:
        n = self.rng.randint(*s["len"])
        if s.get("hex"):
            alphabet = "0123456789abcdef"
        else:
            parts = {"a": string.ascii_lowercase, "A": string.ascii_uppercase, "9": string.digits, "s": " ", "o": _OTHER}
            alphabet = "".join(parts[c] for c in s.get("cls", "") if c in parts) + "".join(s.get("punct", []))
        alphabet = alphabet or string.ascii_lowercase
        return "".join(self.rng.choices(alphabet, k=n))


def _linked(link: tuple[int, int | None, str], name: str, length: int, hexed: bool) -> str:
    import hashlib

    text = hashlib.sha256(f"{link}|{name}".encode()).hexdigest()
    return text[: max(1, min(length, 64))] if hexed else f"syn{text}"[: max(1, length)]


def synthesize(profile: WALProfile, sagas: int = 50, seed: int = 7) -> SyntheticRecords:
    """``sagas`` synthetic sagas drawn from ``profile``, as chained records (deterministic for ``seed``).

    The records verify like a real log (``agent_saga.log.chain``); ``.write(path)``
    makes them a log file. Every record carries ``"__synthetic__": true`` and a saga
    id starting ``synthetic-``.
    """
    if not isinstance(profile, WALProfile):
        raise ProfileError(f"synthesize needs a WALProfile (WALProfile.fit or .load), got {type(profile).__name__}")
    if isinstance(sagas, bool) or not isinstance(sagas, int) or sagas < 0:
        raise ProfileError(f"sagas must be a whole number >= 0, got {sagas!r}")
    if sagas and not profile.templates:
        raise ProfileError("the profile holds no sagas to draw from: fit it on a log that has some")
    rng = random.Random(seed)
    maker = _Maker(rng)
    weights = [int(t["count"]) for t in profile.templates]
    events: list[tuple[int, int, int, str, str, int | None, dict[str, Any]]] = []
    start = _EPOCH_US
    for n in range(sagas):
        if n:
            start += _gap(rng, profile.start_gaps)
        template = rng.choices(profile.templates, weights=weights)[0] if profile.templates else None
        assert template is not None
        saga_id = f"{SYNTHETIC_SAGA_PREFIX}{rng.getrandbits(96):024x}"
        ts = start
        for i, ((rtype, step, tool), (lo, hi)) in enumerate(zip(template["events"], template["dt"], strict=True)):
            ts += rng.randint(int(lo), int(hi)) if i else 0
            shape = profile.bodies.get(rtype if tool is None else f"{rtype}:{tool}", {})
            body = maker.value(shape, (n, step, saga_id), "") if shape else {}
            if not isinstance(body, dict):
                body = {}
            body[SYNTHETIC_MARK] = True
            events.append((ts, n, i, str(rtype), saga_id, step if isinstance(step, int) else None, body))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    out = SyntheticRecords()
    prev = GENESIS
    for seq, (ts, _n, _i, rtype, saga_id, step, body) in enumerate(events, 1):
        salt = f"{rng.getrandbits(128):032x}"
        record: Record = {
            "digest": content_digest(salt, canonical(body)), "prev": prev, "saga": saga_id, "seq": seq, "ts": ts,
            "type": rtype,
        }
        if step is not None:
            record["step"] = step
        prev = chain_hash(record)
        record.update(body=body, salt=salt, hash=prev)
        out.append(record)
    return out


def _gap(rng: random.Random, deciles: Sequence[int]) -> int:
    if not deciles:
        return 1_000
    # Inverse-CDF sampling between the fitted deciles.
    u = rng.random() * (len(deciles) - 1)
    i = min(int(u), len(deciles) - 2) if len(deciles) > 1 else 0
    lo, hi = deciles[i], deciles[min(i + 1, len(deciles) - 1)]
    return max(1, int(lo + (hi - lo) * (u - i)))

