"""The claims ledger: every finding the book tests, tied to the paper's own words and location.

A claim is a record, not a sentence with a threshold of our choosing:

    id          stable key, e.g. "rrt.fig6.relaxation_improves" (prefix: rrt, mor, rt, ls, or the chapter's)
    paper       the paper's seed file in `shared/papers/` ("000", "001", "002", "004")
    where       the paper's section / table / figure the finding comes from
    paper_says  what the paper reports, with its numbers
    test        what the book computes and the threshold it applies (the paper's own where it gives one)
    measured    the book's numbers
    verdict     held / not held / not testable at this scale / not measured
    diagnosis   for every "not held": scale, budget, setup or disagrees with the paper ...
    evidence    ... with one sentence naming the measurement that backs it
    ours        True for the book's own tests beyond the paper (they stand beside the paper's, never instead)
    profile     the profile whose run measured it
    artifact    the chapter's table or figure that holds the numbers

Each chapter declares its claims' fixed text once (`ClaimSpec`, in `rlib/<chapter>/claims.py`) and judges them
from its tables into a `Ledger`; `run.ledger(ledger)` writes `claims.csv` / `claims.md` and one metric per claim,
and the report gathers every chapter's ledger into one book-wide page.

    ledger = Ledger("02_relaxed_recursion", profile, SPECS)
    ledger.judge("rrt.fig6.relaxation_improves", held, measured="...",
                 diagnosis=("budget", "the gap shrinks from 0.12 at 48 steps to 0.05 at 96"))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rlib.config import ConfigError

__all__ = ["COLUMNS", "DIAGNOSES", "PAPERS", "VERDICTS", "Claim", "ClaimSpec", "Ledger", "check_ledger", "load_tables",
           "verdict_counts"]

PAPERS = {
    "000": "Relaxed Recursive Transformers",
    "001": "Mixture-of-Recursions",
    "002": "The Recurrent Transformer",
    "004": "LayerSkip",
}
VERDICTS = ("held", "not held", "not testable at this scale", "not measured")
DIAGNOSES = ("scale", "budget", "setup", "disagrees with the paper")
COLUMNS = ("id", "paper", "where", "paper_says", "test", "measured", "verdict", "diagnosis", "evidence", "ours",
           "profile", "artifact", "chapter")
SMOKE_EVIDENCE = "the smoke profile checks the plumbing only (a few steps on a few windows); see the cpu run"


@dataclass(frozen=True)
class ClaimSpec:
    """The fixed text of one claim: where the paper says what, and how the book tests it."""

    id: str
    paper: str
    where: str
    paper_says: str
    test: str
    artifact: str = ""
    ours: bool = False

    def __post_init__(self) -> None:
        for name in ("id", "where", "paper_says", "test"):
            if not str(getattr(self, name)).strip():
                raise ConfigError(f"claim {self.id!r}: `{name}` is empty; every claim names it")
        if self.paper not in PAPERS:
            raise ConfigError(f"claim {self.id!r}: paper {self.paper!r} unknown; use one of {sorted(PAPERS)}")


@dataclass(frozen=True)
class Claim(ClaimSpec):
    """A judged claim: the spec plus what was measured and the verdict."""

    measured: str = ""
    verdict: str = "not measured"
    diagnosis: str = ""
    evidence: str = ""
    profile: str = ""
    chapter: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.verdict not in VERDICTS:
            raise ConfigError(f"claim {self.id!r}: verdict {self.verdict!r} unknown; use one of {VERDICTS}")
        if self.diagnosis and self.diagnosis not in DIAGNOSES:
            raise ConfigError(f"claim {self.id!r}: diagnosis {self.diagnosis!r} unknown; use one of {DIAGNOSES}")

    def row(self) -> dict[str, object]:
        return {c: getattr(self, c) for c in COLUMNS}


def _verdict(held: bool | str | None) -> str:
    if held is None:
        return "not measured"
    if isinstance(held, str):
        return held
    return "held" if held else "not held"


class Ledger:
    """The judged claims of one chapter run, in the order they were judged."""

    def __init__(self, chapter: str, profile: str, specs: Iterable[ClaimSpec]):
        self.chapter, self.profile = chapter, profile
        self.specs: dict[str, ClaimSpec] = {}
        for spec in specs:
            if spec.id in self.specs:
                raise ConfigError(f"claim id {spec.id!r} is declared twice in {chapter}")
            self.specs[spec.id] = spec
        self.claims: dict[str, Claim] = {}

    def judge(self, claim_id: str, held: bool | str | None, measured: str,
              diagnosis: tuple[str, str] | None = None, profile: str | None = None) -> Claim:
        """Record the verdict of a declared claim: `held` True / False, None (not measured) or a verdict string.

        `diagnosis` = (category, evidence sentence) explains a "not held"; it is ignored for other verdicts. In the
        smoke profile a missing diagnosis becomes ("scale", the smoke profile's note)."""
        if claim_id not in self.specs:
            raise ConfigError(f"claim {claim_id!r} is not declared in {self.chapter}'s specs; add a ClaimSpec")
        verdict = _verdict(held)
        category, evidence = diagnosis if (diagnosis and verdict == "not held") else ("", "")
        if verdict == "not held" and not category and self.profile == "smoke":
            category, evidence = "scale", SMOKE_EVIDENCE
        spec = self.specs[claim_id]
        claim = Claim(**dataclasses.asdict(spec), measured=measured, verdict=verdict, diagnosis=category,
                      evidence=evidence, profile=profile or self.profile, chapter=self.chapter)
        self.claims[claim_id] = claim
        return claim

    def not_measured(self, claim_id: str, why: str) -> Claim:
        """A declared claim this run could not measure (no GPU, a study outside the profile ...), and why."""
        return self.judge(claim_id, None, measured=why)

    def finish(self) -> pd.DataFrame:
        """Every declared claim in declaration order; ones never judged are recorded as not measured."""
        for claim_id in self.specs:
            if claim_id not in self.claims:
                self.not_measured(claim_id, "not judged in this run")
        return self.table()

    def table(self) -> pd.DataFrame:
        ordered = [self.claims[i] for i in self.specs if i in self.claims]
        return pd.DataFrame([c.row() for c in ordered], columns=list(COLUMNS))


def check_ledger(table: pd.DataFrame) -> list[str]:
    """Problems with a ledger table (empty list = fine): a missing `where`, an unknown verdict, or a "not held"
    without a diagnosis and its evidence."""
    problems = []
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        return [f"columns {missing} missing"]
    for row in table.itertuples():
        if not str(row.where).strip() or str(row.where) == "nan":
            problems.append(f"{row.id}: no `where` in the paper")
        if row.verdict not in VERDICTS:
            problems.append(f"{row.id}: verdict {row.verdict!r} unknown")
        if row.verdict == "not held":
            if row.diagnosis not in DIAGNOSES:
                problems.append(f"{row.id}: not held without a diagnosis (one of {DIAGNOSES})")
            if not str(row.evidence).strip() or str(row.evidence) == "nan":
                problems.append(f"{row.id}: not held without evidence for its diagnosis")
    return problems


def verdict_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Counts per paper (ours apart) and verdict: the book-wide ledger's summary."""
    source = table.assign(source=[f"{p} ({'ours' if o else 'paper'})" for p, o in zip(table["paper"], table["ours"])])
    counts = source.pivot_table(index="source", columns="verdict", values="id", aggfunc="count", fill_value=0)
    return counts.reindex(columns=[v for v in VERDICTS if v in counts.columns]).reset_index()


def load_tables(folder: str | Path) -> dict[str, pd.DataFrame]:
    """Every table a chapter run wrote (`<name>.csv` in its output folder, or its promoted folder in `figures/`), by
    name: a ledger can be judged again from a finished run without re-running it."""
    return {path.stem: pd.read_csv(path) for path in sorted(Path(folder).glob("*.csv"))}
