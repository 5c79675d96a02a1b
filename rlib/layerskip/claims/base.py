"""What chapter 05's claim checks share (LayerSkip, paper 004): the tables they read, their verdict, and the few
statistics they apply (`rlib.layerskip.claims` judges every claim with them).

    Context      the chapter's tables by name and its three configs; `table(name)` raises `Unmeasured` (why) for a
                 table this run did not write
    Verdict      one claim's held / not held / verdict string, what was measured, and how to diagnose a "not held"
                 (a function, called only then)
    Unmeasured   a claim's numbers are not in the tables (a missing table, recipe or row), with the reason
    diff_ci      a difference of two proportions with its 95 % interval (unpaired normal approximation)
    paired_diff_ci  the same for two readings of the same items, from the discordant counts
    gate         issue 25's decoding gate: greedy output with distinct-2 >= 0.5 (threshold ours) counts

Decoding rows (`rlib.layerskip.decoding` tables): `spec_rows`, `ar_row`, `drafted` (drafted tokens of a row).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from rlib.book.judging import fmt_ci  # the chapter's claim modules read it from here
from rlib.layerskip.config import AdaptConfig, LayerSkipConfig, ParseConfig
from rlib.layerskip.decoding import vocab_rows

__all__ = ["GATE", "LS", "PLAIN", "Z95", "Check", "Context", "Diagnosis", "Unmeasured", "Verdict", "ar_row", "diff_ci",
           "drafted", "decoded", "decoding_kind", "fmt_ci", "gate_fails", "one", "paired_diff_ci", "spec_rows"]

LS, PLAIN = "ld_ee", "baseline"  # the recipes of the LayerSkip model and the plain one the claims compare
GATE = 0.5  # distinct-2 of the greedy output at or above which a decoding claim counts (issue 25; threshold ours)
Z95 = 1.959964  # two-sided 95 % normal quantile

# how the notebook writes each table a claim may need (named in the "not measured" reason when it is missing)
WRITERS = {
    "probe_curves": "tables.probe_curves(results)",
    "train_curves": "tables.train_curves(results)",
    "step_times": "tables.step_times(results)",
}


class Unmeasured(Exception):
    """The numbers a claim reads are not in this run's tables; the message says which and why."""


Diagnosis = tuple[str, str]  # (category, evidence sentence) of a "not held"


@dataclass(frozen=True)
class Verdict:
    held: bool | str  # True / False, or a verdict string ("not testable at this scale")
    measured: str
    diagnosis: Callable[[], Diagnosis] | None = None  # computed only for a "not held" (it may read more tables)

    @property
    def not_held(self) -> bool:
        return not isinstance(self.held, str) and not self.held


@dataclass(frozen=True)
class Context:
    """What every check reads: the tables (name -> DataFrame, as the notebook writes them) and the configs."""

    tables: Mapping[str, pd.DataFrame]
    cfg: LayerSkipConfig
    acfg: AdaptConfig
    pcfg: ParseConfig
    left_out: tuple[str, ...] = ()  # the tables this profile leaves to a longer one (book.toml's skip.<profile>)
    profile: str = ""
    longer: tuple[str, ...] = ()  # recipes and studies that only the longer profile (cpu-long) runs

    def explain(self, why: str, claim_id: str = "") -> str:
        """A not-measured reason, with where it is measured when it (or the claim's id) names a recipe or study that
        only cpu-long runs."""
        text = f"{why} {claim_id}".replace("_", " ")
        names = [re.escape(name.replace("_", " ")) for name in self.longer]
        if "to cpu-long" not in why and any(re.search(rf"(?<![A-Za-z0-9]){n}(?![A-Za-z0-9])", text) for n in names):
            return f"{why}: {self._left_to_longer('it')}"
        return why

    def _left_to_longer(self, what: str) -> str:
        return (f"the {self.profile} profile leaves {what} to cpu-long (`python -m rlib.book run --profile cpu-long "
                "--only 05`)")

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            if name in self.left_out:
                raise Unmeasured(self._left_to_longer(repr(name)))
            writer = f" (written by {WRITERS[name]})" if name in WRITERS else ""
            raise Unmeasured(f"needs table {name!r}{writer}, which this run did not write")
        return self.tables[name]

    def has(self, *names: str) -> bool:
        return all(n in self.tables for n in names)

    def scratch_tokens(self) -> int:
        """Training tokens of every from-scratch run (steps x batch x window)."""
        return self.cfg.steps * self.cfg.batch_size * self.cfg.seq_len


Check = Callable[[Context], Verdict]


def one(frame: pd.DataFrame, what: str, **where: object) -> pd.Series:
    """The single row of `frame` whose columns equal `where`; Unmeasured (naming `what`) when there is none."""
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        if column not in frame:
            raise Unmeasured(f"{what} has no column {column!r}")
        mask &= frame[column] == value
    hit = frame[mask]
    if hit.empty:
        raise Unmeasured(f"{what} has no row {where}")
    return hit.iloc[0]


def diff_ci(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float, float]:
    """(p2 - p1, lower, upper): the 95 % interval of a difference of two independent proportions (normal
    approximation; per-item pairs are not in the tables, so the interval is conservative for paired items)."""
    half = Z95 * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return p2 - p1, p2 - p1 - half, p2 - p1 + half


def paired_diff_ci(first_only: int, second_only: int, n: int) -> tuple[float, float, float]:
    """(p2 - p1, lower, upper) for two readings of the same `n` items: `first_only` items right in the first reading
    alone, `second_only` in the second alone (the normal approximation of the paired difference, whose variance the
    concordant items do not add to)."""
    diff = (second_only - first_only) / n
    half = Z95 * math.sqrt(max(0.0, (first_only + second_only) / n - diff ** 2) / n)
    return diff, diff - half, diff + half


# ------------------------------------------------------------------------------------------------ decoding tables
def spec_rows(decoding: pd.DataFrame, recipe: str, reuse: str | None = "kvq", vocab: bool = False) -> pd.DataFrame:
    """A recipe's self-speculative rows with one cache mode (None: every mode), drafting with the whole shared head
    (the paper's) or, vocab=True, over the task vocabulary."""
    rows = decoding[(decoding["method"] == "self_speculative") & (decoding["recipe"] == recipe)]
    rows = rows[vocab_rows(rows) == vocab]
    if reuse is not None:
        rows = rows[rows["reuse"] == reuse]
    if rows.empty:
        raise Unmeasured(f"no self-speculative {recipe} rows (reuse {reuse}, vocab {vocab}) in the decoding table")
    return rows


def ar_row(decoding: pd.DataFrame, recipe: str) -> pd.Series:
    return one(decoding, f"the decoding table's {recipe} rows", recipe=recipe, method="autoregressive")


def _temperature(decoding: pd.DataFrame) -> float:
    """A decoding (or generations) table's sampling temperature: 0 = greedy, also for tables written before the
    column existed."""
    return float(decoding["temperature"].max()) if "temperature" in decoding else 0.0


def decoding_kind(decoding: pd.DataFrame) -> str:
    """"greedy" or "sampled" (coupled sampling, `rlib.layerskip.sampling`)."""
    return "greedy" if _temperature(decoding) == 0 else "sampled"


def decoded(decoding: pd.DataFrame, article: str = "") -> str:
    """What a decoding table's autoregressive rows produced: "greedy output", or "sampled output (T=...)"."""
    temperature = _temperature(decoding)
    kind = "greedy output" if temperature == 0 else f"sampled output (T={temperature:g})"
    return f"{article} {kind}" if article else kind


def gate_fails(decoding: pd.DataFrame, recipe: str) -> float | None:
    """The recipe's distinct-2 (greedy or sampled output) when it fails the gate, else None."""
    value = float(ar_row(decoding, recipe)["distinct_2"])
    return value if value < GATE else None


def drafted(row: pd.Series) -> float:
    """Tokens a self-speculative row drafted in all: rounds (new tokens / tokens per round) x drafts per round."""
    return row["new_tokens"] / row["tokens_per_round"] * row["drafts_per_round"]
