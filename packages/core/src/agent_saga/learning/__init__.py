"""What the log makes possible: learning from whether the world kept each effect.

The log records one fact other agent logs do not: whether each effect stood or had to be
undone. The modules here turn that into tools, each honest about what it cannot know:

* ``_corpus`` — one labelled example per executed step (KEPT, UNDONE, COLLATERAL, UNKNOWN)
* ``_replay`` — a candidate agent run against the recorded world; nothing forward runs
* ``_failures`` — which call shapes had to be undone, as lift over the base rate, advisory only

(Synthetic traffic, which a bug report can share, is ``agent_saga.synthetic``.)
"""

from __future__ import annotations

from agent_saga.learning._corpus import Corpus, Example, Label, PreferencePair, build_corpus
from agent_saga.learning._failures import Explanation, FailureModel, Feature, Finding, Silence
from agent_saga.learning._replay import ReplayReport, counterfactual_replay

__all__ = [
    "Corpus", "Example", "Explanation", "FailureModel", "Feature", "Finding", "Label", "PreferencePair",
    "ReplayReport", "Silence", "build_corpus", "counterfactual_replay",
]
