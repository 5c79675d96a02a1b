"""Chapter 05's decoding tables over trained models (paper 004, Tables 2-6 and 10; inventory Sec. 5.3).

    decode_models     every case of `rlib.layerskip.decoding` on each of several models, the same prompts, one table
    scratch_decoding  the from-scratch grid's models (`rlib.layerskip.experiments`) on held-out windows of their corpus,
                      with transformers' greedy and `assistant_early_exit` on the exported weights alongside
    parse_decoding    the parsing study's models (`rlib.layerskip.parse_study`) on the first test utterances, stopping
                      at EOS and scoring each output's exact match (Tables 5, 6 and 10's TOPv2 setting)
    parse_costs       the LayerSkip parsing model's decoding components timed one by one, and its `parse_decoding` rows
                      predicted from them (`rlib.layerskip.decode_costs`: why the whole head falls short here)
    scratch_costs     the same for the from-scratch LD+EE model and its `scratch_decoding` rows (what each cache mode
                      can save on it: Table 6)
    parse_matmul_ablation  the LayerSkip parsing model's baseline and first self-speculation setting with and without
                      `fast_decoding`'s few-token products (beyond the paper: what the CPU BLAS path does to both)
    adapt_generations / scratch_generations  Figs. 7 and 9: a few early-exit continuations with their wrong tokens
                      marked, beside self-speculation's (`rlib.layerskip.generations`)
    adapt_decoding    the pretrained model's studies (`rlib.layerskip.adapt`) on HumanEval prompts (the code study:
                      Table 4's HumanEval setting) or held-out windows of the study's corpus; with a skip set, Draft &
                      Verify on the baseline model beside them (Table 2's comparison)
    adapt_skip_search Draft & Verify's skip set for a study's baseline model (`rlib.layerskip.draft_verify`)
    scratch_quality / adapt_quality  Tables 2-4's ROUGE-2 column: every decoder's output of a decoding study scored
                      against each prompt's reference (`rlib.layerskip.quality`), from the study's `OutputLog`

    scratch_greedy_check / adapt_greedy_check  each model's greedy output diversity (`decoding.greedy_distinct_2`)
                      against the chapter's gate: the measurement behind decoding a study by sampling (ours)

    probe_models      Fig. 2's motivation probe on HumanEval's first prompt for several models: each model's greedy
                      continuation, the layers each generated token needs, and the agreement grid

Timings are measured live, never cached: they belong to this machine and this run. Batch 1, greedy, EOS ignored.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import torch

from rlib import assets, data
from rlib.config import ConfigError
from rlib.layerskip import adapt, decode_costs, decode_memory, generations, parse_data, parse_study, quality
from rlib.layerskip import experiments as scratch
from rlib.layerskip.analysis import motivation_probe
from rlib.layerskip.claims.base import GATE
from rlib.layerskip.config import (
    SOURCE,
    AdaptConfig,
    AdaptRun,
    LayerSkipConfig,
    LayerSkipRun,
    ParseConfig,
    sampling_of,
)
from rlib.layerskip.decoding import (
    DecodeCase,
    OutputLog,
    TimingLog,
    benchmark_decoding,
    decode_cases,
    draft_verify_case,
    draft_vocabulary,
    greedy_distinct_2,
)
from rlib.layerskip.draft_verify import SkipSearch, SkipSet, search_skip_set
from rlib.layerskip.sampling import Sampling
from rlib.model import Decoder
from rlib.progress import progress

__all__ = ["adapt_decoding", "adapt_generations", "adapt_greedy_check", "adapt_quality", "adapt_skip_search",
           "decode_models", "figure_prompts", "greedy_check", "humaneval_problems", "humaneval_prompts",
           "parse_costs", "parse_decoding", "parse_matmul_ablation", "probe_models", "scratch_costs",
           "scratch_decoding", "scratch_generations", "scratch_greedy_check", "scratch_prompts", "scratch_quality"]


def decode_models(models: dict[str, Decoder], prompts: list[torch.Tensor], exits: tuple[int, ...],
                  drafts: tuple[int, ...], reuses: tuple[str, ...], new_tokens: int, repeats: int,
                  peers: bool, full: tuple[str, ...] | None = None, eos_ids: tuple[int, ...] = (),
                  score=None, draft_vocab: torch.Tensor | None = None,
                  sampling: Sampling | None = None, timings: TimingLog | None = None,
                  outputs: OutputLog | None = None,
                  extra: dict[str, list[DecodeCase]] | None = None) -> pd.DataFrame:
    """One row per (model, case): `benchmark_decoding`'s columns plus `recipe` (the model's label). extra: more cases
    per label (e.g. Draft & Verify on the plain model), timed in the same rounds as its others. peers: also time
    transformers' greedy and early-exit assisted generation on each model exported to transformers (greedy decoding
    only: with `sampling` they are left out, as they cannot share its noise). full: the labels that get every reuse
    mode, the peers and (given a task vocabulary `draft_vocab`) the rows drafting over it (default all); the others
    get the "kvq" rows only. eos_ids, score, sampling, timings and outputs: as in `benchmark_decoding` (each logged row
    tagged with its model's `recipe`)."""
    from rlib.model.convert import to_transformers

    if not models:
        raise ConfigError("decode_models needs at least one model")
    peers = peers and sampling is None
    frames = []
    for label, model in models.items():
        model.eval()
        whole = full is None or label in full
        cases = decode_cases(exits, drafts, reuses if whole else ("kvq",), peers=peers and whole,
                             draft_vocab=whole and draft_vocab is not None)
        cases += (extra or {}).get(label, [])
        with (timings.tagged(recipe=label) if timings is not None else nullcontext(),
              outputs.tagged(recipe=label) if outputs is not None else nullcontext()):
            table = benchmark_decoding(model, prompts, cases, new_tokens, repeats,
                                       hf_model=to_transformers(model) if peers and whole else None,
                                       desc=f"decoding {label}", eos_ids=eos_ids, score=score,
                                       draft_vocab=draft_vocab, sampling=sampling, timings=timings, outputs=outputs)
        table.insert(0, "recipe", label)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


DECODE_SEED = 2  # which held-out windows the decoding studies take (their references follow the same windows)


def _window_prompts(windows: torch.Tensor, prompt_len: int) -> list[torch.Tensor]:
    return [windows[i:i + 1, :prompt_len] for i in range(len(windows))]


def scratch_prompts(cfg: LayerSkipConfig) -> list[torch.Tensor]:
    """The from-scratch study's prompts: the first `decode_prompt_len` tokens of `decode_prompts` held-out test
    windows, each [1, T] (also what `benchmarks.gpu_check.carry` sends to the GPU)."""
    return _window_prompts(cfg.text().heldout("test", cfg.decode_prompts, seed=DECODE_SEED), cfg.decode_prompt_len)


def scratch_decoding(cfg: LayerSkipConfig, work: Path, recipes: tuple[str, ...] = ("baseline", "ld_ee"),
                     peers: bool = True, layerskip: str = "ld_ee", timings: TimingLog | None = None,
                     outputs: OutputLog | None = None) -> pd.DataFrame:
    """The grid's first-seed models of `recipes` on the first `decode_prompt_len` tokens of held-out windows, greedy
    or by coupled sampling (`decode_temperature`); the `layerskip` model gets every reuse mode and (greedy only) the
    peers, the others the "kvq" rows. timings: log every timed decode there (`decoding.TimingLog`); outputs: every
    output (`decoding.OutputLog`, for `scratch_quality`)."""
    models = {recipe: scratch.load_model(work, LayerSkipRun(recipe, cfg.seeds[0]).name) for recipe in recipes}
    return decode_models(models, scratch_prompts(cfg), cfg.decode_exits,
                         cfg.decode_drafts, cfg.decode_reuses, cfg.decode_new_tokens, cfg.decode_repeats, peers,
                         full=(layerskip,), sampling=sampling_of(cfg.decode_temperature), timings=timings,
                         outputs=outputs)


def greedy_check(models: dict[str, Decoder], prompts: list[torch.Tensor], new_tokens: int,
                 sampling: Sampling | None) -> pd.DataFrame:
    """One row per model: the distinct-2 of its greedy continuations of `prompts` (mean, smallest, largest over
    prompts), whether the mean passes the chapter's gate (`GATE`, threshold ours), and how the study decodes
    (`sampling`: "greedy" or "sampled (T=...)"). A study sampled because greedy output loops keeps that reason
    measured on its own models; one whose greedy output passes the gate could decode greedily, as the paper."""
    decodes = "greedy" if sampling is None else f"sampled (T={sampling.temperature:g})"
    rows = []
    for label, model in progress(models.items(), desc="greedy check", total=len(models)):
        values = greedy_distinct_2(model, prompts, new_tokens)
        mean = sum(values) / len(values)
        rows.append({"recipe": label, "prompts": len(values), "new_tokens": new_tokens, "greedy_distinct_2": mean,
                     "greedy_distinct_2_min": min(values), "greedy_distinct_2_max": max(values), "gate": GATE,
                     "passes_gate": mean >= GATE, "study_decodes": decodes})
    return pd.DataFrame(rows)


def scratch_greedy_check(cfg: LayerSkipConfig, work: Path, recipes: tuple[str, ...] = ("baseline", "ld_ee")
                         ) -> pd.DataFrame:
    """`greedy_check` on the grid's first-seed models of `recipes`, over `scratch_decoding`'s prompts."""
    models = {recipe: scratch.load_model(work, LayerSkipRun(recipe, cfg.seeds[0]).name) for recipe in recipes}
    return greedy_check(models, scratch_prompts(cfg), cfg.decode_new_tokens, sampling_of(cfg.decode_temperature))


def adapt_greedy_check(cfg: AdaptConfig, work: Path, study: str, recipes: tuple[str, ...]) -> pd.DataFrame:
    """`greedy_check` on a pretrained-model study's models of `recipes`, over `adapt_decoding`'s prompts."""
    models = {recipe: adapt.load_model(work, AdaptRun(study, recipe).name, cfg) for recipe in recipes}
    table = greedy_check(models, _adapt_prompts(cfg, study), cfg.decode_new_tokens, cfg.decode_sampling(study))
    table.insert(0, "study", study)
    return table


def scratch_quality(cfg: LayerSkipConfig, outputs: pd.DataFrame) -> pd.DataFrame:
    """`scratch_decoding`'s outputs (its `OutputLog` frame) scored by ROUGE-2 against each held-out window's own
    continuation after the prompt (`decode_new_tokens` tokens of the window, decoded like the outputs)."""
    text = cfg.text()
    windows = text.heldout("test", cfg.decode_prompts, seed=DECODE_SEED)  # the windows scratch_prompts cuts
    decode = generations.text_decoder(data.load_tokenizer(cfg.tokenizer), text.vocabulary())
    end = cfg.decode_prompt_len + cfg.decode_new_tokens
    references = [decode(window[cfg.decode_prompt_len:end].tolist()) for window in windows]
    return quality.score_outputs(outputs, references, decode)


def scratch_costs(cfg: LayerSkipConfig, work: Path, decoding: pd.DataFrame, layerskip: str = "ld_ee",
                  repeats: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the from-scratch `layerskip` model's component costs over `scratch_decoding`'s prompts at its E and d, that
    model's rows of `decoding`, a `scratch_decoding` table of this run, with the cost model's predictions)."""
    model = scratch.load_model(work, LayerSkipRun(layerskip, cfg.seeds[0]).name)
    prompts = scratch_prompts(cfg)
    costs = decode_costs.measure_costs(model, prompts, cfg.decode_exits, cfg.decode_drafts, repeats=repeats)
    return costs, decode_costs.predict(decoding[decoding["recipe"] == layerskip], costs, len(prompts))


def scratch_memory(cfg: LayerSkipConfig, work: Path, layerskip: str = "ld_ee", prompts: int = 2) -> pd.DataFrame:
    """`decode_memory.footprint_table` of the from-scratch `layerskip` model on the first `prompts` of the study's
    prompts, greedy, at its E and d: the bytes each decoder holds (abstract, Sec. 4.3.3)."""
    model = scratch.load_model(work, LayerSkipRun(layerskip, cfg.seeds[0]).name)
    return decode_memory.footprint_table(model, scratch_prompts(cfg)[:prompts], cfg.decode_exits, cfg.decode_drafts,
                                         cfg.decode_new_tokens)


def humaneval_problems(n: int) -> list[dict]:
    """The first `n` HumanEval problems in task order (`prompt`, `canonical_solution`, ...)."""
    import gzip
    import json

    path = next(assets.path("humaneval").rglob("HumanEval.jsonl.gz"))
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle][:n]


def humaneval_prompts(tokenizer, n: int) -> list[torch.Tensor]:
    """The first `n` HumanEval prompts (in task order) as [1, T] ids, without special tokens (SmolLM2 adds none)."""
    return [torch.tensor([tokenizer(p["prompt"], add_special_tokens=False)["input_ids"]])
            for p in humaneval_problems(n)]


def _adapt_prompts(cfg: AdaptConfig, study: str) -> list[torch.Tensor]:
    """The study's decoding prompts [1, T]: HumanEval's for the python-stdlib study, held-out windows otherwise."""
    corpus = cfg.study(study).corpus
    if corpus == "python-stdlib":
        return humaneval_prompts(assets.load_tokenizer(cfg.model), cfg.decode_prompts)
    windows = data.heldout_windows(corpus, cfg.model, cfg.decode_prompt_len, cfg.decode_prompts, split="test",
                                   seed=DECODE_SEED)
    return _window_prompts(windows, cfg.decode_prompt_len)


def figure_prompts(decode_prompts: int) -> int:
    """Candidate prompts of Figs. 7 and 9's analogs: four times the decoding prompts, 2 to 8 (the claims need 5
    whose greedy continuation passes the gate)."""
    return min(8, max(2, 4 * decode_prompts))


def adapt_generations(cfg: AdaptConfig, work: Path, study: str, recipes: tuple[str, ...] = ("ld_ee",),
                      n_prompts: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 7's analog: the study's models of `recipes` continue `n_prompts` held-out windows of its corpus (default
    `figure_prompts`) by early exit at Fig. 7's depth (`generations.figure_exit`) and by self-speculation (the
    largest d of the config); `generations.generation_examples`' two tables, for all recipes."""
    n_prompts = n_prompts or figure_prompts(cfg.decode_prompts)
    windows = data.heldout_windows(cfg.study(study).corpus, cfg.model, cfg.decode_prompt_len, n_prompts,
                                   split="test", seed=3)
    prompts = _window_prompts(windows, cfg.decode_prompt_len)
    decode = generations.text_decoder(assets.load_tokenizer(cfg.model))
    frames = []
    for recipe in recipes:
        model = adapt.load_model(work, AdaptRun(study, recipe).name, cfg)
        exit_layer = generations.figure_exit(len(model.plan))
        frames.append(generations.generation_examples(model, decode, prompts, exit_layer, max(cfg.decode_drafts),
                                                      cfg.decode_new_tokens, label=f"{study} {recipe}",
                                                      sampling=cfg.decode_sampling(study)))
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*frames))


def scratch_generations(cfg: LayerSkipConfig, work: Path, recipes: tuple[str, ...] = ("baseline", "ld_ee"),
                        n_prompts: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 9's analog: the from-scratch grid's first-seed models of `recipes` on `n_prompts` held-out windows
    (default `figure_prompts`), early exit at Fig. 9's depth (layer 24 of 32) and self-speculation at the largest d."""
    n_prompts = n_prompts or figure_prompts(cfg.decode_prompts)
    text = cfg.text()
    prompts = _window_prompts(text.heldout("test", n_prompts, seed=3), cfg.decode_prompt_len)
    decode = generations.text_decoder(data.load_tokenizer(cfg.tokenizer), text.vocabulary())
    frames = []
    for recipe in recipes:
        model = scratch.load_model(work, LayerSkipRun(recipe, cfg.seeds[0]).name)
        exit_layer = generations.figure_exit(len(model.plan), generations.PAPER_FIG9_DEPTH)
        frames.append(generations.generation_examples(model, decode, prompts, exit_layer, max(cfg.decode_drafts),
                                                      cfg.decode_new_tokens, label=f"scratch {recipe}",
                                                      sampling=sampling_of(cfg.decode_temperature)))
    return tuple(pd.concat(parts, ignore_index=True) for parts in zip(*frames))


def adapt_skip_search(cfg: AdaptConfig, work: Path, study: str) -> SkipSearch:
    """Draft & Verify's skip set for the study's baseline model (`draft_verify.search_skip_set`): the probes and
    `dv_search_iters` suggested sets, each timed on `dv_search_prompts` validation windows of the study's corpus
    (`dv_search_tokens` new tokens each, decoded as the study decodes), disjoint from the test windows it is then
    timed on."""
    model = adapt.load_model(work, AdaptRun(study, "baseline").name, cfg)
    windows = data.heldout_windows(cfg.study(study).corpus, cfg.model, cfg.decode_prompt_len, cfg.dv_search_prompts,
                                   split="validation", seed=DECODE_SEED)
    return search_skip_set(model, _window_prompts(windows, cfg.decode_prompt_len), cfg.dv_search_tokens,
                           cfg.dv_search_iters, sampling=cfg.decode_sampling(study),
                           desc=f"Draft & Verify search ({study} baseline)")


def adapt_decoding(cfg: AdaptConfig, work: Path, study: str, recipes: tuple[str, ...],
                   peers: bool = False, source: Decoder | None = None,
                   timings: TimingLog | None = None, outputs: OutputLog | None = None,
                   draft_verify: SkipSet | None = None) -> pd.DataFrame:
    """A study's models of `recipes` (SOURCE names the pretrained model: `source`, or loaded from the
    config) on the study's prompts: HumanEval for a study on python-stdlib, held-out windows of its corpus otherwise;
    greedy, or by coupled sampling for the config's `decode_sampled_studies`. timings, outputs: as in
    `scratch_decoding` (outputs for `adapt_quality`). draft_verify: the baseline model's Draft & Verify skip set
    (`adapt_skip_search`): one more case on that model, in the same rounds as its autoregressive decoding."""
    prompts = _adapt_prompts(cfg, study)
    names = {recipe: recipe if recipe == SOURCE else AdaptRun(study, recipe).name for recipe in recipes}
    models = {recipe: source if recipe == SOURCE and source is not None else adapt.load_model(work, name, cfg)
              for recipe, name in names.items()}
    if draft_verify is not None and "baseline" not in models:
        raise ConfigError(f"draft_verify decodes the baseline model, which recipes {list(recipes)} leave out")
    extra = {"baseline": [draft_verify_case(draft_verify)]} if draft_verify is not None else None
    table = decode_models(models, prompts, cfg.decode_exits, cfg.decode_drafts, cfg.decode_reuses,
                          cfg.decode_new_tokens, cfg.decode_repeats, peers, sampling=cfg.decode_sampling(study),
                          timings=timings, outputs=outputs, extra=extra)
    table.insert(0, "study", study)
    return table


def adapt_quality(cfg: AdaptConfig, study: str, outputs: pd.DataFrame) -> pd.DataFrame:
    """`adapt_decoding`'s outputs of `study` (its `OutputLog` frame) scored by ROUGE-2 against each prompt's reference:
    the corpus's continuation of the held-out window (`decode_new_tokens` tokens), or HumanEval's canonical solution
    for the code study's HumanEval prompts."""
    tokenizer = assets.load_tokenizer(cfg.model)
    corpus = cfg.study(study).corpus
    if corpus == "python-stdlib":
        references = [problem["canonical_solution"] for problem in humaneval_problems(cfg.decode_prompts)]
    else:
        after = data.heldout_continuations(corpus, cfg.model, cfg.decode_prompt_len, cfg.decode_prompts,
                                           cfg.decode_new_tokens, split="test", seed=DECODE_SEED)
        references = [tokenizer.decode(ids.tolist()) for ids in after]
    table = quality.score_outputs(outputs, references, tokenizer.decode)
    table.insert(0, "study", study)
    return table


def _parse_setup(cfg: ParseConfig):
    """The parsing study's decoding inputs: (prompts [1, T] of the first `decode_prompts` test utterances, the EOS id,
    exact-match scorer, task vocabulary or None)."""
    tokenizer = assets.load_tokenizer(cfg.model)
    vocab = None
    if cfg.decode_draft_vocab:
        train = parse_data.examples("train", cfg.train_examples, cfg.seed)
        vocab = draft_vocabulary(parse_data.target_ids(tokenizer, ex)[1] for ex in train)
    test = parse_data.examples("test", cfg.decode_prompts, cfg.seed)  # the test stream's first utterances
    pairs = [parse_data.target_ids(tokenizer, ex) for ex in test]
    prompts = [torch.tensor([prompt]) for prompt, _ in pairs]

    def exact(index: int, generated: list[int]) -> float:
        return float(generated == pairs[index][1])

    return prompts, tokenizer.eos_token_id, exact, vocab


def parse_decoding(cfg: ParseConfig, work: Path, layerskip: str = "ld_ee",
                   timings: TimingLog | None = None) -> pd.DataFrame:
    """Every trained recipe of the parsing study on the first `decode_prompts` test utterances, greedy until EOS
    (at most `decode_new_tokens`); column `score` is the exact match of the generated parse. The `layerskip` model
    gets every reuse mode (and the peers when `decode_peers`; with `decode_draft_vocab`, also drafting over the task
    vocabulary: the tokens of the training parses, EOS included, plus each prompt's), the others the "kvq" rows.
    timings: as in `scratch_decoding`."""
    prompts, eos_id, exact, vocab = _parse_setup(cfg)
    models = {recipe: parse_study.load_model(work, recipe) for recipe in cfg.recipes}
    return decode_models(models, prompts, cfg.decode_exits, cfg.decode_drafts, cfg.decode_reuses,
                         cfg.decode_new_tokens, cfg.decode_repeats, cfg.decode_peers, full=(layerskip,),
                         eos_ids=(eos_id,), score=exact, draft_vocab=vocab, timings=timings)


def parse_costs(cfg: ParseConfig, work: Path, decoding: pd.DataFrame, layerskip: str = "ld_ee",
                repeats: int = 20) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the `layerskip` parsing model's component costs, timed over `parse_decoding`'s prompts at its E and d; that
    model's rows of `decoding`, a `parse_decoding` table of this run, with the cost model's predictions)."""
    prompts, _, _, vocab = _parse_setup(cfg)
    model = parse_study.load_model(work, layerskip)
    costs = decode_costs.measure_costs(model, prompts, cfg.decode_exits, cfg.decode_drafts, vocab, repeats)
    return costs, decode_costs.predict(decoding[decoding["recipe"] == layerskip], costs, len(prompts))


def parse_matmul_ablation(cfg: ParseConfig, work: Path, layerskip: str = "ld_ee") -> pd.DataFrame:
    """The `layerskip` parsing model's autoregressive baseline and self-speculation at the first E and d ("kvq"; also
    over the task vocabulary with `decode_draft_vocab`), timed with `fast_matmul` off and on, as `parse_decoding`
    times them. One row per (fast_matmul, case); each half's speedups are over its own baseline."""
    prompts, eos_id, exact, vocab = _parse_setup(cfg)
    model = parse_study.load_model(work, layerskip)
    cases = [case for case in decode_cases(cfg.decode_exits[:1], cfg.decode_drafts[:1], ("kvq",), peers=False,
                                           draft_vocab=vocab is not None) if case.method != "early_exit"]
    frames = [benchmark_decoding(model, prompts, cases, cfg.decode_new_tokens, cfg.decode_repeats,
                                 desc=f"decoding {layerskip}, fast_matmul={fast}", eos_ids=(eos_id,), score=exact,
                                 draft_vocab=vocab, fast_matmul=fast) for fast in (False, True)]
    table = pd.concat(frames, ignore_index=True)
    table.insert(0, "recipe", layerskip)
    return table


def probe_models(models: dict[str, Decoder], tokenizer, new_tokens: int) -> dict[str, dict]:
    """{label: {"table": layers_needed table, "agree": [L, n] bool array, "tokens": generated token texts,
    "text": the continuation}} on HumanEval/0's prompt (the paper's Fig. 2 prompt)."""
    (prompt,) = humaneval_prompts(tokenizer, 1)
    out = {}
    for label, model in models.items():
        table, agree = motivation_probe(model, prompt, new_tokens)
        ids = table["token"].tolist()
        out[label] = {"table": table, "agree": agree.numpy(), "tokens": [tokenizer.decode([i]) for i in ids],
                      "text": tokenizer.decode(ids)}
    return out
