"""Judging a chapter's claims from its tables (the claims ledger's rules, `rlib.book.claims`).

A chapter declares one rule per measurable claim: a function of the chapter's tables (and its config) that returns an
`Outcome`, registered with the tables it reads. `Rules.judge` runs every rule into a `Ledger`; a table that the run
did not write, or rows or columns a rule needs that are not in it (`Missing`, or any lookup error), make the claim
"not measured" with the reason, never an error. Claims the book cannot measure yet are declared with the measurement
that would decide them.

    rules = Rules()

    @rules("rrt.tab1.params_shrink_by_b", "size_quality")
    def _params(tables, cfg):
        size = tables["size_quality"]
        ...
        return Outcome(held, measured="...", diagnosis=("setup", "..."))

    ledger = rules.judge(Ledger(chapter, profile, SPECS), tables, cfg, not_measured={...})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from rlib.book.claims import Ledger
from rlib.config import ConfigError

__all__ = ["Missing", "Outcome", "Rules", "chain", "fmt_ci", "mean_interval", "nats", "rows", "strictly_falling",
           "value", "values"]


class Missing(LookupError):
    """The numbers a claim needs are not in this run's tables (the message says which, and what would add them)."""


@dataclass(frozen=True)
class Outcome:
    """A rule's result: held (True / False / a verdict string / None = not measured), the measured numbers as a
    sentence, and for a "not held" its diagnosis (category, evidence sentence with the numbers behind it)."""

    held: bool | str | None
    measured: str
    diagnosis: tuple[str, str] | None = None


@dataclass(frozen=True)
class _Rule:
    tables: tuple[str, ...]
    judge: Callable[..., Outcome]


class Rules:
    """The rules of one chapter's claims, by claim id."""

    def __init__(self) -> None:
        self.rules: dict[str, _Rule] = {}

    def __call__(self, claim_id: str, *tables: str) -> Callable[[Callable[..., Outcome]], Callable[..., Outcome]]:
        """Decorator: register `fn(tables, *args) -> Outcome` as the rule of `claim_id`, reading `tables`."""

        def register(fn: Callable[..., Outcome]) -> Callable[..., Outcome]:
            if claim_id in self.rules:
                raise ConfigError(f"claim {claim_id!r} has two rules; keep one")
            self.rules[claim_id] = _Rule(tuple(tables), fn)
            return fn

        return register

    def not_testable(self, claim_id: str, why: str, *tables: str) -> None:
        """A claim the book's models cannot test (`why` names what would): so recorded once the run wrote `tables`
        (the claim's artifact), "not measured" before."""
        self(claim_id, *tables)(lambda _tables, *_args: Outcome("not testable at this scale", why))

    def judge(self, ledger: Ledger, tables: Mapping[str, pd.DataFrame], *args,
              not_measured: Mapping[str, str] = ()) -> Ledger:
        """Judge every declared claim of `ledger` from `tables` by its rule, or as "not measured" with the reason
        `not_measured` gives (a measurement the book does not make yet: "needs: ..."). A declared claim with
        neither is an error of the chapter."""
        not_measured = dict(not_measured)
        for claim_id in ledger.specs:
            if claim_id in not_measured:
                ledger.not_measured(claim_id, not_measured[claim_id])
            elif claim_id in self.rules:
                out = self._outcome(self.rules[claim_id], tables, args)
                ledger.judge(claim_id, out.held, out.measured, diagnosis=out.diagnosis)
            else:
                raise ConfigError(f"claim {claim_id!r} of {ledger.chapter} has no rule and no reason it is not "
                                  "measured; add one")
        unknown = sorted((set(self.rules) | set(not_measured)) - set(ledger.specs))
        if unknown:
            raise ConfigError(f"rules or reasons for undeclared claims {unknown} in {ledger.chapter}; add a ClaimSpec")
        return ledger

    @staticmethod
    def _outcome(rule: _Rule, tables: Mapping[str, pd.DataFrame], args: tuple) -> Outcome:
        absent = [name for name in rule.tables if name not in tables or len(tables[name]) == 0]
        if absent:
            return Outcome(None, f"this run wrote no {' / '.join(f'{n}.csv' for n in absent)}")
        try:
            return rule.judge(tables, *args)
        except Missing as missing:
            return Outcome(None, str(missing))
        except LookupError as error:  # a column or row of another profile's grid: not measured here, never a crash
            return Outcome(None, f"the tables lack {error}")


def rows(df: pd.DataFrame, **equal) -> pd.DataFrame:
    """The rows of `df` whose columns equal the given values (a column that is absent raises `Missing`)."""
    absent = [c for c in equal if c not in df.columns]
    if absent:
        raise Missing(f"the table has no column(s) {absent}")
    keep = pd.Series(True, index=df.index)
    for column, wanted in equal.items():
        keep &= df[column] == wanted
    return df[keep]


def values(df: pd.DataFrame, column: str, **equal) -> list[float]:
    """`column` of the rows matching `equal`, in table order; `Missing` names the rows when there are none."""
    found = rows(df, **equal)
    if column not in df.columns:
        raise Missing(f"the table has no column {column!r}")
    out = [float(v) for v in found[column] if not pd.isna(v)]
    if not out:
        where = ", ".join(f"{k}={v!r}" for k, v in equal.items())
        raise Missing(f"no row with {where} has {column!r}")
    return out


def value(df: pd.DataFrame, column: str, **equal) -> float:
    """The mean of `column` over the rows matching `equal` (the seed mean where a row has several seeds)."""
    found = values(df, column, **equal)
    return sum(found) / len(found)


def mean_interval(sample: Iterable[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of `sample` (e.g. one paired difference per seed) and its Student-t interval at
    `confidence`; `Missing` below two values, where no spread can be estimated."""
    from scipy import stats

    sample = [float(v) for v in sample]
    if len(sample) < 2:
        raise Missing(f"an interval needs >= 2 values (seeds); got {len(sample)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: give a probability in (0, 1), e.g. 0.95")
    mean = sum(sample) / len(sample)
    sd = math.sqrt(sum((v - mean) ** 2 for v in sample) / (len(sample) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(sample) - 1)) * sd / math.sqrt(len(sample))
    return mean, mean - half, mean + half


def fmt_ci(diff: float, lo: float, hi: float, scale: float = 1.0, digits: int = 3) -> str:
    """An estimate and its interval as '+d [+lo, +hi]' (each times `scale`, e.g. 100 for points)."""
    return f"{scale * diff:+.{digits}f} [{scale * lo:+.{digits}f}, {scale * hi:+.{digits}f}]"


def nats(ppl_worse: float, ppl_better: float) -> float:
    """A perplexity gap in nats per token, ln(worse / better): how the paper's perplexity deltas become thresholds
    on the book's held-out NLL."""
    return math.log(ppl_worse / ppl_better)


def strictly_falling(seq: Iterable[float]) -> bool:
    seq = list(seq)
    return all(a > b for a, b in zip(seq, seq[1:]))


def chain(pairs: Iterable[tuple[object, float]], sep: str = ", ", digits: int = 3) -> str:
    """'label value' pairs as one phrase, e.g. 'r0 7.474, r16 7.353'."""
    return sep.join(f"{label} {v:.{digits}f}" for label, v in pairs)
