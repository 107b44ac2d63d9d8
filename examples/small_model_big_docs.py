"""A host with a 2,000-token window answers questions about a 440,000-character manual, with citations.

    python examples/small_model_big_docs.py

The manual is generated here, deterministically, with a few facts planted in it.
The host is scripted (no network, no model weights): it stands in for a small local
model and is held to its window, so every prompt it is given must fit in 2,000
tokens (counted as one token per four characters). What is real is the machinery:

1. map: the ContextBroker cuts the manual into spans with SHA-256 receipts; batches
   of spans that fit the window go to the host, which writes short notes naming
   the passage each note came from. Each note is offered to the broker as a
   summary of that passage and is admitted only if its numbers and quotes are in
   it; admitted notes must also fit a token budget, so the reduce prompt fits.
2. reduce: the host sees only the questions and the admitted summaries (by id) and
   answers, citing them as [s1], [s2], ...
3. ground: every claim of the answer is checked against the manual, now; the
   verdict is an ANSWER_GROUNDED record in the saga's log
   (./small_model_big_docs.wal; `agent-saga verify` and `agent-saga graph` read it).
"""

from __future__ import annotations

import math
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from agent_saga import FileWAL, ground, saga_scope
from agent_saga.runtime import ContextBroker, Span, SummaryRefused

WINDOW = 2_000  # the host's context window, in tokens
SUMMARY_BUDGET = 600  # tokens all admitted summaries may take together (they all go into one reduce prompt)
DOC_CHARS = 440_000
LOG = Path("small_model_big_docs.wal")

# The facts planted in the manual, and what the questions ask for. Each fact's keywords
# are how the scripted host recognises it; a real model would read the passage.
FACTS = {
    "pressure": ("The pressure limit of the main line is 4200 kPa at the inlet manifold.", ("pressure limit", "main line")),
    "pump": ("Pump B runs at 1,450 rpm under normal load.", ("pump b", "rpm")),
    "valve": ("The emergency shutdown valve was installed in 2019 by the plant crew.", ("shutdown valve", "installed")),
    "venting": ('Before venting, the operator must "close the bypass before venting" and log the time.',
                ("before venting",)),
}
QUESTIONS = [
    "What is the pressure limit of the main line?",
    "How fast does pump B run?",
    "When was the emergency shutdown valve installed?",
    "What must an operator do before venting?",
]
# A decoy the host will misread: the broker refuses the note it writes about it.
DECOY = "The pressure limit of the test rig in hall C is set by the test engineer on duty."


def tokens(text: str) -> int:
    """The host's token count: one token per four characters, as small models roughly do."""
    return max(1, math.ceil(len(text) / 4))


def make_manual() -> str:
    """About 440,000 characters of plausible filler, with the facts planted at fixed places."""
    rng = random.Random(26)
    nouns = ["valve", "gauge", "filter", "seal", "flange", "sensor", "panel", "hose", "bearing", "coupling"]
    verbs = ["inspect", "clean", "record", "tighten", "replace", "check", "calibrate", "label"]
    places = ["hall A", "hall B", "the yard", "the pump room", "the control room", "the roof", "the annex"]
    paragraphs: list[str] = []
    planted = {int(DOC_CHARS * where): fact for where, fact in
               ((0.13, FACTS["pressure"][0]), (0.41, FACTS["pump"][0]), (0.67, FACTS["valve"][0]),
                (0.88, FACTS["venting"][0]), (0.29, DECOY))}
    size, section = 0, 0
    while size < DOC_CHARS:
        section += 1
        sentences = [f"Section {section}."]
        for _ in range(rng.randint(4, 8)):
            sentences.append(f"Crews {rng.choice(verbs)} the {rng.choice(nouns)} in {rng.choice(places)} "
                             f"and {rng.choice(verbs)} each {rng.choice(nouns)} near the {rng.choice(nouns)}.")
        for at in [at for at in planted if at <= size]:
            sentences.insert(rng.randint(1, len(sentences)), planted.pop(at))
        paragraph = " ".join(sentences)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)[:DOC_CHARS]


@dataclass
class ScriptedHost:
    """A stand-in for a small model: refuses any prompt over its window and counts what it spends."""

    window: int
    used: dict[str, int] = field(default_factory=dict)

    def _spend(self, phase: str, prompt: str, reply: str) -> None:
        if tokens(prompt) > self.window:
            raise ValueError(f"prompt of {tokens(prompt)} tokens does not fit a {self.window}-token window")
        self.used[phase] = self.used.get(phase, 0) + tokens(prompt) + tokens(reply)

    def map(self, prompt: str) -> str:
        """Notes on the passages of ``prompt``, one a line: ``P<n>: <note>``."""
        notes = []
        for number, passage in re.findall(r"^P(\d+): (.*)$", prompt, flags=re.M):
            for sentence in re.split(r"(?<=[.!?\"])\s+", passage):
                low = sentence.lower()
                if any(all(k in low for k in keys) for _, keys in FACTS.values()):
                    notes.append(f"P{number}: {sentence}")
                elif "test rig" in low:  # the small model's mistake: it reads a limit where there is none
                    notes.append(f"P{number}: The pressure limit of the test rig is 4300 kPa.")
        reply = "\n".join(notes)
        self._spend("map", prompt, reply)
        return reply

    def reduce(self, prompt: str) -> str:
        """An answer to the questions of ``prompt`` from its summaries, citing them by id."""
        notes = dict(re.findall(r"^\[(s\d+)\] (.*)$", prompt, flags=re.M))

        def cite(*keys: str) -> str:
            return next(sid for sid, text in notes.items() if all(k in text.lower() for k in keys))

        answer = (
            f"The main line's pressure limit is 4200 kPa [{cite('pressure limit', 'main line')}]. "
            f"Pump B runs at 1,450 rpm [{cite('pump b')}]. "
            f"The emergency shutdown valve was installed in 2019 [{cite('shutdown valve')}]. "
            f'Before venting, an operator must "close the bypass before venting" [{cite("before venting")}].'
        )
        self._spend("reduce", prompt, answer)
        return answer


def batches(spans: list[Span], room: int) -> list[list[tuple[int, Span]]]:
    """Consecutive spans, numbered, grouped so that each group's text fits in ``room`` tokens."""
    out: list[list[tuple[int, Span]]] = [[]]
    used = 0
    for n, span in enumerate(spans):
        cost = tokens(span.text) + 3
        if out[-1] and used + cost > room:
            out.append([])
            used = 0
        out[-1].append((n, span))
        used += cost
    return out


def main() -> int:
    manual = make_manual()
    broker = ContextBroker()
    spans = broker.add_document("plant-manual", manual)
    host = ScriptedHost(WINDOW)
    print(f"manual: {len(manual):,} characters (~{tokens(manual):,} tokens) in {len(spans)} spans with receipts; "
          f"host window: {WINDOW:,} tokens")

    # map: every batch of spans that fits the window, leaving room for the instruction and the notes
    instruction = "Note every sentence that answers one of these questions, as P<n>: <sentence>.\n" + "\n".join(QUESTIONS)
    admitted: dict[str, str] = {}
    budget_used, refused = 0, []
    groups = batches(spans, WINDOW - tokens(instruction) - 300)
    for group in groups:
        prompt = instruction + "\n\n" + "\n".join(f"P{n}: {span.text}" for n, span in group)
        for number, note in re.findall(r"^P(\d+): (.*)$", host.map(prompt), flags=re.M):
            if budget_used + tokens(note) > SUMMARY_BUDGET:
                refused.append(f"over the {SUMMARY_BUDGET}-token summary budget: {note[:40]}...")
                continue
            try:
                sid = broker.admit_summary(note, [spans[int(number)]])
            except SummaryRefused as why:
                refused.append(str(why))
                continue
            admitted[sid] = note
            budget_used += tokens(note)
    print(f"map:    {len(groups)} host calls, {host.used['map']:,} tokens; admitted {len(admitted)} summaries "
          f"({budget_used} of {SUMMARY_BUDGET} budget tokens); refused {len(refused)}:")
    for why in refused:
        print(f"          - {why}")

    # reduce: only the questions and the admitted summaries, which now fit one window
    prompt = "Answer, citing the summaries by id.\n" + "\n".join(QUESTIONS) + "\n\n" + "\n".join(
        f"[{sid}] {note}" for sid, note in admitted.items())
    answer = host.reduce(prompt)
    print(f"reduce: 1 host call, {host.used['reduce']:,} tokens (prompt {tokens(prompt)} of {WINDOW:,})")
    print(f"total:  {sum(host.used.values()):,} tokens\n")

    wal = FileWAL(LOG)
    try:
        with saga_scope(wal, name="small-model-big-docs"):
            report = ground(answer, broker)
    finally:
        wal.close()
    print(report.format_annotated())
    print(f"\nfully grounded: {report.fully_grounded}")
    print(f"log: {LOG.resolve()} (ANSWER_GROUNDED; try `agent-saga verify --wal {LOG}` and `agent-saga graph --wal {LOG}`)")
    return 0 if report.fully_grounded else 1


if __name__ == "__main__":
    sys.exit(main())
