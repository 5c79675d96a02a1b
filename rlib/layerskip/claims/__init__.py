"""Chapter 05's claims ledger (LayerSkip, Elhoushi et al. 2024, paper 004): every finding of the paper the chapter's
tables hold numbers for, judged from those tables only.

    SPECS   the claims' fixed text (`rlib.layerskip.claims.specs`): the paper's findings with their section, table or
            figure, the book's earlier claims posed differently beside them (`<id>.ours`) and its own findings
            beyond the paper (`ls.ours.*`)
    judge   tables (name -> DataFrame, as the notebook writes them, or `rlib.book.claims.load_tables` of a finished
            run) and the chapter's three configs -> a `rlib.book.claims.Ledger` with every claim's verdict

The checks, by the paper's sections:
    training         Sec. 2.1 (Fig. 2), Sec. 4.1.2 (curricula), Sec. 6.1 (Fig. 8), Sec. 7 (Fig. 11), Sec. 9,
                     Sec. 10.3 (Fig. 12): the from-scratch grid and the layers-needed probe
    adapt            Sec. 6.1 (Table 1, Figs. 6 and 10a): continual pretraining and code fine-tuning of SmolLM2
    parse            Sec. 6.1 (Fig. 10b), Tables 5 and 10's early-exit rows: the parsing study's exits
    decoding         Sec. 4.3, 6.2 and 8 (Tables 2-6, 10): exactness, acceptance, the recipe, cache reuse, speedups
    quality          Sec. 6.2 (Tables 2-4's ROUGE-2): early exit's generation quality and self-speculation's
    costs            Tables 2, 5, 10 (early-exit speed) and, beyond the paper, the measured cost model

A claim whose numbers are not in the tables (a table this run did not write, a recipe outside the profile) is
recorded as not measured with the reason; one that needs a measurement the book does not make yet says what would
measure it ("needs: ...").
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from rlib.book.claims import Ledger
from rlib.config import PROFILES, ConfigError
from rlib.layerskip.claims import adapt, costs, decoding, parse, quality, training
from rlib.layerskip.claims.base import GATE, LS, Check, Context, Diagnosis, Unmeasured, Verdict, decoded, decoding_kind
from rlib.layerskip.claims.specs import DECODED_FROM, NEEDS, SAMPLED, SPECS
from rlib.layerskip.config import AdaptConfig, LayerSkipConfig, ParseConfig
from rlib.layerskip.tables import RECIPE_LABELS

__all__ = ["CHAPTER", "CHECKS", "SPECS", "judge"]

CHAPTER = "05_layerskip"
CHECKS: dict[str, Check] = {**training.CHECKS, **adapt.CHECKS, **parse.CHECKS,
                            **decoding.CHECKS, **quality.CHECKS, **costs.CHECKS}
CHECKS.update({spec.id: CHECKS[spec.id.removesuffix(SAMPLED)] for spec in SPECS if spec.id.endswith(SAMPLED)})


def judge(tables: Mapping[str, pd.DataFrame], cfg: LayerSkipConfig, acfg: AdaptConfig, pcfg: ParseConfig,
          profile: str) -> Ledger:
    """Every claim of `SPECS` judged from the chapter's tables; the ledger keeps SPECS' order."""
    from rlib.book import manifest

    ledger = Ledger(CHAPTER, profile, SPECS)
    (chapter,) = [c for c in manifest.load().chapters if c.id == CHAPTER]
    context = Context(dict(tables), cfg, acfg, pcfg, chapter.skipped(profile), profile, _longer(cfg, acfg, profile))
    for spec in SPECS:
        if spec.id in NEEDS:
            ledger.not_measured(spec.id, NEEDS[spec.id])
        else:
            _judge_one(ledger, spec.id, context)
    return ledger


def _longer(cfg: LayerSkipConfig, acfg: AdaptConfig, profile: str) -> tuple[str, ...]:
    """The from-scratch recipes and pretrained-model studies that a profile extending `profile` adds to its presets."""
    longer = [p.name for p in PROFILES.values() if p.runs_of == profile]
    if not longer or longer[0] not in LayerSkipConfig.PRESETS:
        return ()
    wide, wide_adapt = LayerSkipConfig.preset(longer[0]), AdaptConfig.preset(longer[0])
    return (tuple(r for r in wide.recipes if r not in cfg.recipes)
            + tuple(s.name for s in wide_adapt.studies if s.name not in {t.name for t in acfg.studies}))


TABLE_ERRORS = (KeyError, IndexError, ValueError, TypeError, ArithmeticError, ConfigError)  # tables without the rows,
# columns or types a claim reads (a notebook run must never fail on its ledger)


def _judge_one(ledger: Ledger, claim_id: str, context: Context) -> None:
    try:
        verdict = CHECKS[claim_id](context)
    except Unmeasured as why:
        ledger.not_measured(claim_id, context.explain(str(why), claim_id))
        return
    except TABLE_ERRORS as error:
        ledger.not_measured(claim_id, context.explain(f"the tables lack what this claim reads "
                                                      f"({type(error).__name__}: {error})", claim_id))
        return
    sampled = _sampled_source(context, SPEC_BY_ID[claim_id])
    if claim_id.endswith(SAMPLED) and sampled is None:  # a greedy study: the paper's claim itself is judged there
        ledger.not_measured(claim_id, f"this study decodes greedily, as the paper: its claim "
                                      f"{claim_id.removesuffix(SAMPLED)} is judged on that output")
        return
    if sampled is not None and not SPEC_BY_ID[claim_id].ours:  # the paper's decoding claims are greedy ones
        held = verdict.held if isinstance(verdict.held, str) else "held" if verdict.held else "not held"
        ledger.judge(claim_id, "not testable at this scale",
                     f"{verdict.measured} [on {sampled}'s {decoded(context.tables[sampled])} this reads '{held}', "
                     f"the verdict of {claim_id}{SAMPLED}; {greedy_only(context.tables, sampled)}]")
        return
    ledger.judge(claim_id, verdict.held, verdict.measured, _diagnose(verdict) if verdict.not_held else None)


SPEC_BY_ID = {spec.id: spec for spec in SPECS}
GREEDY_CHECK = {"decoding": "greedy_check", "generations_scratch": "greedy_check",
                "decoding_continual": "greedy_check_continual", "generations_continual": "greedy_check_continual"}
# the table that measures each sampled study's greedy output (`decode_study.greedy_check`)


def greedy_only(tables: Mapping[str, pd.DataFrame], source: str) -> str:
    """Why a paper decoding claim is not testable on the sampled study behind table `source`: the paper decodes
    greedily, and this study's greedy output, measured in its `greedy_check` table, loops (or, where it passes the
    gate, that the study could decode greedily instead)."""
    paper = "the paper decodes greedily ('All experiments were performed with greedy decoding', Sec. 6.2)"
    check = tables.get(GREEDY_CHECK.get(source, ""))
    if check is None or not (check["recipe"] == LS).any():
        return (f"{paper}; this study decodes by coupled sampling because these small models' greedy output loops "
                f"(this run has no greedy_check table to measure it), so the greedy claim is not testable here")
    values = ", ".join(f"{RECIPE_LABELS.get(r.recipe, r.recipe)} {r.greedy_distinct_2:.2f}"
                       for r in check.itertuples())
    measured = (f"greedy distinct-2 {values} over {int(check['prompts'].iloc[0])} prompts of "
                f"{int(check['new_tokens'].iloc[0])} tokens ({GREEDY_CHECK[source]})")
    if not bool(check.loc[check["recipe"] == LS, "passes_gate"].iloc[0]):
        return (f"{paper}; this study decodes by coupled sampling because its LayerSkip model's greedy output, the "
                f"output its self-speculation drafts and verifies, loops ({measured}, below the {GATE} gate), so the "
                f"greedy claim is not testable here")
    return (f"{paper}; this study decodes by coupled sampling, yet its LayerSkip model's greedy output passes the "
            f"{GATE} gate ({measured}): decode it greedily (decode_temperature 0 / decode_sampled_studies) to test "
            f"the greedy claim")


def _sampled_source(context: Context, spec) -> str | None:
    """The decoding table a decoding claim reads, where that table was decoded by sampling (None otherwise: not a
    decoding claim, the table missing, or greedy decoding)."""
    source = DECODED_FROM.get(spec.artifact)
    if source is None or source not in context.tables:
        return None
    table = context.tables[source]
    return source if len(table) and decoding_kind(table) == "sampled" else None


def _diagnose(verdict: Verdict) -> Diagnosis:
    """A "not held"'s diagnosis; if its evidence cannot be read from the tables, say so rather than guess."""
    try:
        return verdict.diagnosis() if verdict.diagnosis else ("setup", "needs: a diagnosis for this claim")
    except (Unmeasured, *TABLE_ERRORS) as error:
        return "setup", f"needs: the tables its evidence reads ({type(error).__name__}: {error})"
