"""Checks every chapter's claims ledger must pass (`rlib.book.claims`): shared by the tests/test_*_claims.py files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from rlib.book.claims import ClaimSpec, check_ledger, load_tables

FIGURES = Path(__file__).resolve().parents[1] / "figures"


def committed_ledger(judge: Callable, cfg, chapter: str, expected: Mapping[str, str]) -> pd.DataFrame:
    """Judge the committed cpu tables of `chapter`: the verdicts must be `expected`, claim by claim, and the ledger
    must pass `check_ledger` (every claim placed, every "not held" diagnosed with evidence). Returns it by id."""
    table = judge(load_tables(FIGURES / chapter), cfg, "cpu").finish()
    assert dict(zip(table["id"], table["verdict"])) == dict(expected)
    assert check_ledger(table) == []
    return table.set_index("id")


def check_specs(specs: Sequence[ClaimSpec], judge: Callable, cfg, expected: Mapping[str, str]) -> None:
    """Unique ids, one per expected verdict; a place in the paper and an artifact for each; `ours` exactly for the
    ids that say so; and no tables at all give every claim as not measured, without error."""
    ids = [s.id for s in specs]
    assert len(ids) == len(set(ids)) == len(expected)
    assert all(s.where.strip() and s.artifact for s in specs)
    assert all(s.ours == (s.id.endswith(".ours") or s.id.startswith("rrt.ours.")) for s in specs)
    empty = judge({}, cfg, "cpu").finish()
    assert (empty["verdict"] == "not measured").all() and check_ledger(empty) == []
    assert empty["measured"].str.len().gt(0).all()  # each says why


def check_partial_runs(judge: Callable, cfgs: Sequence, chapter: str) -> None:
    """A run that wrote only some tables, or a config of another profile (other corpora, inits, ranks), is judged
    without error: what cannot be read is "not measured" and the ledger still passes `check_ledger`."""
    tables = load_tables(FIGURES / chapter)
    for cfg in cfgs:
        for left_out in [None, *tables]:
            ledger = judge({k: v for k, v in tables.items() if k != left_out}, cfg, "cpu").finish()
            assert check_ledger(ledger) == [], (cfg, left_out)
