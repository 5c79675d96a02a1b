"""Timing LayerSkip's decoders side by side (paper 004, Tables 2-6 and 10; inventory Sec. 5.2-5.3).

Every method decodes the same prompts greedily at batch 1 for a fixed number of new tokens (EOS ignored, so every
method produces the same count). The autoregressive baseline runs through the same code path and KV cache as
self-speculation (`n_draft=0`), as the official code does for an apples-to-apples comparison; transformers' own
greedy and early-exit assisted generation run on the exported weights. Each method is warmed up once; then each
prompt is decoded by every method in turn (round-robin, so a slow or fast spell of a shared machine falls on every
method alike, not on whichever was being timed), `repeats` times over the prompts; the median per (method, prompt)
counts, and ms/token = the sum of medians over the sum of new tokens. Every other round runs the methods in reverse
order (a round = one prompt decoded by every method; each prompt's rounds alternate too), so no method always runs
right after a given other one.

Paired rounds (`timings`, ours): every timed call can be logged (`TimingLog`), one row per (method, prompt, repeat).
Two methods timed in the same round met the same machine, so the ratio of their times in that round is a paired
measurement; `paired_ratios` gives one per round, and `rlib.rounds.median_interval` their median with a
distribution-free interval. The cache-reuse claims (Table 6) are judged this way: kvq against kv and none differ by a
few per cent, less than one timing's noise on a shared CPU.
`distinct_2` (`rlib.diversity`: distinct bigrams over bigrams of the generated tokens, mean over prompts) flags greedy
repetition loops: a looping continuation is easy for any exit to draft, so acceptance there says little about the
exit.
`greedy_distinct_2` measures it on the full model's greedy output alone, for a study that decodes by sampling.

`sampling` (ours, `rlib.layerskip.sampling`) decodes every one of our methods by Gumbel-max sampling at its
temperature, the noise fixed per position and drawn from seed + the prompt's index, so every method samples the same
output and `identical_to_greedy` checks that self-speculation reproduces the autoregressive sample (column
`temperature`, 0 = greedy). transformers' peers cannot share that noise and are refused with it.

Our decoders run inside `rlib.model.decode_matmul.fast_decoding` (`fast_matmul`, default on): on CPU every few-token
product takes the faster of three BLAS paths, for the baseline and self-speculation alike (column `fast_matmul`).
Transformers' decoders run on their own weights, untouched.

`draft_verify` cases decode with Draft & Verify (`rlib.layerskip.draft_verify`, the paper's Table 2 comparison): the
plain model drafts with some sublayers skipped and verifies with all of them; exact like self-speculation.

`draft_vocab` cases (beyond the paper) draft over a task vocabulary only: the ids given to `benchmark_decoding` plus the
prompt's own ids (a parse copies its slot values from the utterance), gathered per prompt inside the timed call.

The layer-count model of the inventory gives each self-speculative row a predicted speedup:

    S_pred = (a d + 1) L / ((d + 1) E + rho (L - E))      a = acceptance, rho = verify cost of d+1 tokens vs 1
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
import torch

from rlib.config import ConfigError
from rlib.diversity import distinct_2
from rlib.layerskip.draft_verify import OFFICIAL_DRAFTING, DraftExit, SkipSet, draft_verify_generate
from rlib.layerskip.peer import hf_early_exit_generate, hf_greedy_generate
from rlib.layerskip.sampling import Sampling
from rlib.layerskip.speculative import REUSE_MODES, early_exit_generate, self_speculative_generate
from rlib.model import Decoder
from rlib.model.decode_matmul import fast_decoding
from rlib.progress import progress

__all__ = ["METHODS", "DecodeCase", "OutputLog", "TimingLog", "benchmark_decoding", "decode_cases",
           "draft_verify_case", "draft_vocabulary", "greedy_distinct_2", "paired_ratios", "predicted_speedup",
           "run_case", "vocab_rows"]

METHODS = ("autoregressive", "early_exit", "self_speculative", "draft_verify", "hf_greedy", "hf_early_exit")


@dataclass(frozen=True)
class DecodeCase:
    method: str
    exit_layer: int = 0  # E (early_exit, self_speculative, hf_early_exit)
    n_draft: int = 0  # d (self_speculative, hf_early_exit)
    reuse: str = ""  # self_speculative: kvq | kv | none
    draft_vocab: bool = False  # self_speculative: draft over the task vocabulary only (module docstring)
    skip: SkipSet | None = None  # draft_verify: the sublayers its drafter skips (`rlib.layerskip.draft_verify`)
    drafting: DraftExit = OFFICIAL_DRAFTING  # draft_verify: its adaptive draft-exiting

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method {self.method!r} unknown; choose from {list(METHODS)}")
        if self.method == "self_speculative" and self.reuse not in REUSE_MODES:
            raise ConfigError(f"reuse={self.reuse!r}: choose from {list(REUSE_MODES)}")
        if self.draft_vocab and self.method != "self_speculative":
            raise ConfigError(f"draft_vocab applies to self_speculative only, not {self.method!r}")
        if (self.skip is None) != (self.method != "draft_verify"):
            raise ConfigError(f"skip (a draft_verify.SkipSet) goes with method 'draft_verify' only; got method "
                              f"{self.method!r} with skip={self.skip}")

    @property
    def label(self) -> str:
        vocab = " vocab" if self.draft_vocab else ""
        parts = {"early_exit": f"E={self.exit_layer}", "self_speculative": f"E={self.exit_layer} d={self.n_draft} "
                 f"{self.reuse}{vocab}", "hf_early_exit": f"E={self.exit_layer} d={self.n_draft}",
                 "draft_verify": f"{self.skip.label} d<={self.drafting.max_drafts}" if self.skip else ""}
        return f"{self.method} {parts[self.method]}" if self.method in parts else self.method


class RowLog:
    """Rows logged over one or more `benchmark_decoding` calls. Inside `with log.tagged(recipe=...)` the tags are
    added to each row logged; `frame()` is the table."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.tags: dict[str, object] = {}

    @contextmanager
    def tagged(self, **tags: object):
        saved = self.tags
        self.tags = {**saved, **tags}
        try:
            yield self
        finally:
            self.tags = saved

    def add(self, **row: object) -> None:
        self.rows.append({**self.tags, **row})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


class TimingLog(RowLog):
    """Every timed decode, one row each (module docstring: paired rounds). Columns: the tags, `label` (the case's),
    `prompt`, `repeat`, `position` (its place in the round), `seconds`, `new_tokens`."""


class OutputLog(RowLog):
    """Every case's output on every prompt, one row each (the last repeat's: every repeat decodes the same tokens), to
    score the generations (`rlib.layerskip.quality`). Columns: the tags, `label`, `method`, `exit_layer`, `n_draft`,
    `prompt`, `tokens` (the new token ids, space-separated)."""


def paired_ratios(timings: pd.DataFrame, label: str, baseline: str, baseline_where: dict[str, object] | None = None,
                  **where: object) -> list[float]:
    """The time of case `label` over the time of case `baseline` in each round both ran in (same prompt and repeat,
    and the same values of the `where` columns, e.g. recipe="ld_ee"; `baseline_where`, where given, selects the
    baseline's rows instead, e.g. another recipe's model), in round order. Both ran the same prompt, so a ratio of
    seconds is a ratio of ms per token whenever they made the same number of tokens (every exact method)."""

    def select(conditions: dict[str, object], case: str) -> pd.Series:
        rows = timings
        for column, value in conditions.items():
            rows = rows[rows[column] == value]
        return rows[rows["label"] == case].set_index(["prompt", "repeat"])["seconds"]

    theirs = select(where if baseline_where is None else baseline_where, baseline)
    ratios = (select(where, label) / theirs).dropna().sort_index()  # aligned on (prompt, repeat): rounds both ran in
    if ratios.empty:
        raise ConfigError(f"no round timed both {label!r} (where {where}) and {baseline!r} (where "
                          f"{where if baseline_where is None else baseline_where}); labels present: "
                          f"{sorted(set(timings['label']))}")
    return ratios.tolist()


def decode_cases(exits: tuple[int, ...], drafts: tuple[int, ...], reuses: tuple[str, ...] = ("kvq",),
                 peers: bool = True, draft_vocab: bool = False) -> list[DecodeCase]:
    """The autoregressive baseline, early exit at each E, self-speculation over E x d x reuse, with draft_vocab
    self-speculation over E x d ("kvq") drafting over the task vocabulary, and the peers."""
    cases = [DecodeCase("autoregressive")]
    cases += [DecodeCase("early_exit", e) for e in exits]
    cases += [DecodeCase("self_speculative", e, d, r) for e in exits for d in drafts for r in reuses]
    if draft_vocab:
        cases += [DecodeCase("self_speculative", e, d, "kvq", draft_vocab=True) for e in exits for d in drafts]
    if peers:
        cases += [DecodeCase("hf_greedy")] + [DecodeCase("hf_early_exit", e, d) for e in exits for d in drafts]
    return cases


def draft_verify_case(skip: SkipSet, drafting: DraftExit = OFFICIAL_DRAFTING) -> DecodeCase:
    """Draft & Verify with `skip` (`rlib.layerskip.draft_verify`); its n_draft is the drafts' cap per round."""
    return DecodeCase("draft_verify", n_draft=drafting.max_drafts, skip=skip, drafting=drafting)


def predicted_speedup(acceptance: float, n_draft: int, exit_layer: int, n_layers: int, rho: float = 1.0) -> float:
    """S_pred of the layer-count model (module docstring)."""
    return (acceptance * n_draft + 1) * n_layers / ((n_draft + 1) * exit_layer + rho * (n_layers - exit_layer))


@torch.inference_mode()
def greedy_distinct_2(model: Decoder, prompts: list[torch.Tensor], max_new_tokens: int) -> list[float]:
    """`distinct_2` of the full model's greedy continuation of each prompt [1, T] (EOS ignored): whether greedy output
    loops, the reason a study decodes by sampling instead (one value per prompt)."""
    model.eval()
    out = []
    for prompt in prompts:
        ids, _ = run_case(DecodeCase("autoregressive"), model, prompt, max_new_tokens)
        out.append(distinct_2(ids[0, prompt.shape[1]:].tolist()))
    return out


def draft_vocabulary(sequences) -> torch.Tensor:
    """The distinct token ids of some token sequences (e.g. a task's training outputs), sorted: [V']."""
    ids = sorted({int(t) for seq in sequences for t in seq})
    if not ids:
        raise ConfigError("draft_vocabulary needs at least one token")
    return torch.tensor(ids, dtype=torch.long)


def vocab_rows(table: pd.DataFrame) -> pd.Series:
    """Which rows of a decoding table draft over a task vocabulary (False everywhere for a table without the
    `draft_vocab` column, e.g. one written before it existed)."""
    if "draft_vocab" not in table:
        return pd.Series(False, index=table.index)
    return table["draft_vocab"].fillna(False).astype(bool)


def run_case(case: DecodeCase, model: Decoder, prompt: torch.Tensor, max_new_tokens: int, hf_model=None,
             eos_ids: tuple[int, ...] = (), draft_vocab: torch.Tensor | None = None,
             sampling: Sampling | None = None):
    """Decode `prompt` [1, T] with `case`, stopping at any of `eos_ids` (default none: every method makes
    `max_new_tokens`) -> (ids [1, T + n], SpeculativeStats or None). draft_vocab: the task vocabulary [V'] of a
    `case.draft_vocab` case (the prompt's ids are added to it here). sampling: greedy if None (module docstring)."""
    if case.method == "autoregressive":
        return self_speculative_generate(model, prompt, max_new_tokens, len(model.plan), 0, eos_ids=eos_ids,
                                         sampling=sampling)
    if case.method == "self_speculative":
        vocab = None
        if case.draft_vocab:
            if draft_vocab is None:
                raise ConfigError(f"{case.label} needs draft_vocab (e.g. decoding.draft_vocabulary(task outputs))")
            vocab = torch.unique(torch.cat([draft_vocab.to(prompt.device), prompt[0]]))  # [V' + prompt]
        return self_speculative_generate(model, prompt, max_new_tokens, case.exit_layer, case.n_draft, case.reuse,
                                         eos_ids=eos_ids, draft_vocab=vocab, sampling=sampling)
    if case.method == "draft_verify":
        return draft_verify_generate(model, prompt, max_new_tokens, case.skip, case.drafting, eos_ids=eos_ids,
                                     sampling=sampling)
    if case.method == "early_exit":
        return early_exit_generate(model, prompt, max_new_tokens, case.exit_layer, eos_ids=eos_ids,
                                   sampling=sampling), None
    if sampling is not None:
        raise ConfigError(f"{case.label} cannot share the coupled sampling noise; decode the peers greedily "
                          "(sampling=None) or leave them out (peers=False)")
    if hf_model is None:
        raise ConfigError(f"{case.label} needs hf_model (rlib.model.convert.to_transformers(model))")
    if case.method == "hf_greedy":
        return hf_greedy_generate(hf_model, prompt, max_new_tokens, eos_ids), None
    return hf_early_exit_generate(hf_model, prompt, max_new_tokens, case.exit_layer, case.n_draft, eos_ids), None


@torch.inference_mode()
def benchmark_decoding(model: Decoder, prompts: list[torch.Tensor], cases: list[DecodeCase], max_new_tokens: int,
                       repeats: int = 3, hf_model=None, desc: str = "decoding",
                       eos_ids: tuple[int, ...] = (), score=None,
                       draft_vocab: torch.Tensor | None = None, fast_matmul: bool = True,
                       sampling: Sampling | None = None, timings: TimingLog | None = None,
                       outputs: OutputLog | None = None) -> pd.DataFrame:
    """One row per case: ms/token, speedup over the autoregressive row, acceptance, tokens and drafts per round,
    S_pred, and whether every prompt's output equals the autoregressive output (early exit is not expected to). eos_ids:
    stop each output at one of these (a task with an end, as TOPv2's parses); ms/token then counts the tokens made.
    score: `score(prompt_index, generated_ids) -> float` (e.g. exact match of a parse), its mean over prompts as column
    `score`. draft_vocab: the task vocabulary of the `draft_vocab` cases (`draft_vocabulary`). fast_matmul:
    run our decoders inside `fast_decoding` (module docstring). sampling: temperature and base seed of coupled
    sampling (module docstring; default greedy). timings: log every timed call there (module docstring). outputs:
    log every case's new tokens on every prompt there (`OutputLog`)."""
    if not prompts or any(p.dim() != 2 or p.shape[0] != 1 for p in prompts):
        raise ConfigError("prompts must be a non-empty list of [1, T] id tensors (batch 1, as the paper times)")
    if repeats < 1:
        raise ConfigError(f"repeats={repeats} must be >= 1")
    if cases[0].method != "autoregressive":
        raise ConfigError("the first case must be the autoregressive baseline (the speedups are relative to it)")
    peers = [case.label for case in cases if case.method.startswith("hf_")]
    if sampling is not None and peers:
        raise ConfigError(f"cases {peers} cannot share the coupled sampling noise; drop them or decode greedily")
    model.eval()
    with fast_decoding(model, enabled=fast_matmul):
        table = _benchmark(model, prompts, cases, max_new_tokens, repeats, hf_model, desc, eos_ids, score,
                           draft_vocab, sampling, timings, outputs)
    table.insert(table.columns.get_loc("new_tokens") + 1, "fast_matmul", fast_matmul)
    table.insert(table.columns.get_loc("fast_matmul") + 1, "temperature", 0.0 if sampling is None else
                 float(sampling.temperature))
    return table


def _benchmark(model, prompts, cases, max_new_tokens, repeats, hf_model, desc, eos_ids, score, draft_vocab,
               sampling, timings, outputs):
    n_layers = len(model.plan)

    def decode(case: DecodeCase, index: int, tokens: int = max_new_tokens):
        noise = None if sampling is None else Sampling(sampling.temperature, sampling.seed + index)
        return run_case(case, model, prompts[index], tokens, hf_model, eos_ids, draft_vocab, noise)

    for case in cases:  # warm-up: two draft-and-verify rounds reach every matmul shape the timed decodes use
        decode(case, 0, min(max_new_tokens, 2 * (case.n_draft or 0) + 2))
    times = [[[] for _ in prompts] for _ in cases]  # [case][prompt] -> seconds per repeat
    results: list[list] = [[None] * len(prompts) for _ in cases]  # [case][prompt] -> (ids, stats)
    for step in progress(range(repeats * len(prompts)), desc=desc, unit="prompt"):
        repeat, index = divmod(step, len(prompts))
        order = list(enumerate(cases))  # round-robin: a slow spell of the machine hits every case alike
        if (repeat + index) % 2:
            order.reverse()  # and no case always follows the same other one
        for position, (number, case) in enumerate(order):
            started = time.perf_counter()
            results[number][index] = decode(case, index)
            seconds = time.perf_counter() - started
            times[number][index].append(seconds)
            if timings is not None:
                out = results[number][index][0]
                timings.add(label=case.label, prompt=index, repeat=repeat, position=position, seconds=seconds,
                            new_tokens=out.shape[1] - prompts[index].shape[1])
    reference = [out for out, _ in results[0]]
    rows = []
    for number, case in enumerate(cases):
        seconds = tokens = drafted = accepted = rounds = 0
        identical, diversity, scores = True, [], []
        for index, prompt in enumerate(prompts):
            out, stats = results[number][index]
            if outputs is not None:
                outputs.add(label=case.label, method=case.method, exit_layer=case.exit_layer or n_layers,
                            n_draft=case.n_draft, prompt=index,
                            tokens=" ".join(str(t) for t in out[0, prompt.shape[1]:].tolist()))
            seconds += statistics.median(times[number][index])
            tokens += out.shape[1] - prompt.shape[1]
            diversity.append(distinct_2(out[0, prompt.shape[1]:].tolist()))
            if score is not None:
                scores.append(float(score(index, out[0, prompt.shape[1]:].tolist())))
            identical &= bool(torch.equal(out, reference[index]))
            if stats is not None:
                drafted, accepted, rounds = drafted + stats.drafted, accepted + stats.accepted, rounds + stats.rounds
        acceptance = accepted / drafted if drafted else float("nan")
        row = {"method": case.method, "label": case.label, "exit_layer": case.exit_layer or n_layers,
               "n_draft": case.n_draft, "reuse": case.reuse, "draft_vocab": case.draft_vocab,
               "ms_per_token": 1000 * seconds / tokens, "acceptance": acceptance,
               "tokens_per_round": tokens / rounds if rounds else float("nan"),
               "drafts_per_round": drafted / rounds if rounds else float("nan"),
               "identical_to_greedy": identical, "new_tokens": tokens,
               "distinct_2": sum(diversity) / len(diversity)}
        if score is not None:
            row["score"] = sum(scores) / len(scores)
        if case.method == "self_speculative":
            row["predicted_speedup"] = predicted_speedup(acceptance, case.n_draft, case.exit_layer, n_layers)
        rows.append(row)
    table = pd.DataFrame(rows)
    table["speedup"] = table["ms_per_token"].iloc[0] / table["ms_per_token"]
    return table
