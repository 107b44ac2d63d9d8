"""Corpus.to_parquet / to_dataset with the ``corpus`` extra (pyarrow, datasets): ``tox -e learning``.

Without the extra these tests skip; test_corpus.py checks the install hint in that case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli

from agent_saga import FileWAL, SagaAborted, build_corpus, saga_scope
from agent_saga.learning import Corpus
from agent_saga.log import read_records

# The export needs the `corpus` extra: this module runs in the `learning` env, which installs it;
# where it is absent (core, core-fast) test_corpus.py checks the install hint instead.
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")


def shop_log(path: Path) -> Corpus:
    wal = FileWAL(path)
    for amount, fails in ((5, False), (9, True), (7, False)):
        try:
            with saga_scope(wal, name="shop") as s:
                def charge(fails: bool = fails) -> int:
                    if fails:
                        raise ValueError("declined")
                    return 1
                s.execute(tool="pay.charge", semantics="IRREVERSIBLE", forward=charge, args={"amount": amount})
        except SagaAborted:
            pass
    wal.close()
    return build_corpus(read_records(path))


def test_parquet_holds_the_same_rows_as_jsonl(tmp_path: Path) -> None:
    corpus = shop_log(tmp_path / "a.wal")
    assert corpus.to_parquet(tmp_path / "c.parquet") == 3
    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    back = [{**r, "args": json.loads(r["args"]), "result": json.loads(r["result"]),
             "context": json.loads(r["context"])} for r in rows]
    assert back == [e.to_dict() for e in corpus]
    assert [r["label"] for r in rows] == ["KEPT", "UNDONE", "KEPT"]


def test_an_empty_corpus_still_writes_every_column(tmp_path: Path) -> None:
    Corpus(()).to_parquet(tmp_path / "e.parquet")
    assert "label" in pq.read_table(tmp_path / "e.parquet").column_names


def test_dataset_of_pairs_is_dpo_shaped(tmp_path: Path) -> None:
    corpus = shop_log(tmp_path / "a.wal")
    ds = corpus.to_dataset(pairs=True)
    assert ds.num_rows == 2
    assert {"prompt", "chosen", "rejected"} <= set(ds.column_names)
    assert [json.loads(r) for r in ds["rejected"]] == [{"amount": 9}, {"amount": 9}]
    assert sorted(json.loads(c)["amount"] for c in ds["chosen"]) == [5, 7]


def test_the_verb_writes_parquet(tmp_path: Path) -> None:
    shop_log(tmp_path / "a.wal")
    ran = run_cli("corpus", "--wal", str(tmp_path / "a.wal"), "--out", str(tmp_path / "c.parquet"))
    assert ran.returncode == 0, ran.stderr
    assert pq.read_table(tmp_path / "c.parquet").num_rows == 3
