"""Downstream scoring of the small models trained from scratch (chapters 03-05) on the book's local task suite.

Those models read a compact vocabulary (`rlib.vocab`) over a real tokenizer and are plain callables from ids [B, T]
to logits [B, T, V]; they are not the book's `Decoder`. `ScratchLM` scores them through lm-eval exactly as
`rlib.eval.RlibLM` scores a Decoder: the same context/continuation split, BOS convention and left truncation (it
inherits them), with text mapped to compact ids (a rare token becomes <unk>, scored like any other id) and one
right-padded causal forward per batch. It is what the papers' downstream columns need at this scale:

    paper 002 (Recurrent Transformer) Sec. 7.2, Tables 3, 5, 8: cross-entropy of the gold answer
    paper 002 Tables 6, 9, 10 and paper 001 (MoR) Table 3: few-shot / zero-shot accuracy

`downstream_scores` returns per task the accuracy (lm-eval's, with its standard error) and the per-item gold-answer
cross-entropy (summed over the answer's tokens, as the paper's CE column), so two models can be compared item by
item.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlib.eval import RlibLM, _logits
from rlib.vocab import CompactVocab

__all__ = ["DOWNSTREAM_TASKS", "ScratchLM", "downstream_scores"]

# the two local tasks a small verse model can be asked about: HellaSwag-style next line and LAMBADA-style cloze
DOWNSTREAM_TASKS = ("book_nextline", "book_cloze")


class ScratchLM(RlibLM):
    """lm-eval model for a callable ids [B, T] -> logits [B, T, V] under a compact vocabulary (module docstring).
    Log-likelihood requests only: these models are scored, never asked to generate."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor], tokenizer: Any, vocab: CompactVocab | None,
                 max_length: int, batch_size: int = 16):
        if max_length < 2:
            raise ValueError(f"max_length={max_length}: a scored window needs at least 2 tokens")
        _LMInit(self)
        self.model, self.vocab, self.tokenizer = model, vocab, tokenizer
        self._device = torch.device("cpu")
        self.batch_size, self.max_length, self.exits = int(batch_size), int(max_length), (1,)
        probe = tokenizer("a")["input_ids"]
        self.add_bos = tokenizer.bos_token_id is not None and probe[:1] == [tokenizer.bos_token_id]
        bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.prefix_id = self._compact([bos if bos is not None else eos])[0]
        self.bos_id = self._compact([bos])[0] if bos is not None else None  # RlibLM's prefix and cut use it

    def _compact(self, ids: list[int]) -> list[int]:
        if self.vocab is None:
            return list(ids)
        return self.vocab.encode(torch.tensor(ids, dtype=torch.long)).tolist()

    def _encode(self, text: str) -> list[int]:
        return self._compact(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _score(self, pairs: list[tuple[list[int], list[int]]], desc: str = "scratch") -> list[list[tuple[float, bool]]]:
        """Per (context ids, continuation ids): [(sum log-probability of the continuation, all greedy)]."""
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        results: list[list[tuple[float, bool]] | None] = [None] * len(pairs)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                members = order[start:start + self.batch_size]
                inputs = [self._fit(*pairs[i]) for i in members]
                logits = _logits(self.model, self._padded(inputs))  # [B, T, V]; causal: padding never read
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                for row, i in enumerate(members):
                    target = pairs[i][1][-min(len(pairs[i][1]), len(inputs[row])):]  # a cut context keeps them all
                    end = len(inputs[row])
                    scored = logprobs[row, end - len(target):end]  # [n, V]
                    index = torch.tensor(target)
                    results[i] = [(float(scored.gather(1, index[:, None]).sum()),
                                   bool((scored.argmax(-1) == index).all()))]
        return results  # type: ignore[return-value]

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError("ScratchLM scores log-likelihoods only; these tasks need no generation")

    @property
    def tokenizer_name(self) -> str:
        return "scratch-" + getattr(self.tokenizer, "name_or_path", "tokenizer").replace("/", "__")


def _LMInit(lm: Any) -> None:
    """lm-eval's LM.__init__ (rank, world size and cache hooks) without RlibLM's Decoder loading."""
    base = RlibLM.__mro__[1]
    if base is not object:
        base.__init__(lm)


def downstream_scores(lm: ScratchLM, tasks: tuple[str, ...] = DOWNSTREAM_TASKS, limit: int | None = None,
                      num_fewshot: int = 0) -> dict[str, dict[str, Any]]:
    """{task: {"acc", "acc_stderr", "acc_norm" and "acc_norm_stderr" (NaN where the task has none), "n", "gold_ce"
    (a list, in the task's item order), "gold_ce_mean"}} for the book's local tasks, through lm-eval with per-sample
    logging."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from rlib import tasks as book_tasks

    manager = TaskManager(include_path=str(book_tasks.build()))
    out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), num_fewshot=num_fewshot, limit=limit,
                                  task_manager=manager, batch_size=lm.batch_size, log_samples=True,
                                  verbosity="ERROR")
    scores = {}
    for task in tasks:
        metrics, samples = out["results"][task], sorted(out["samples"][task], key=lambda s: s["doc_id"])
        gold = [_gold_ce(sample) for sample in samples]
        scores[task] = {"acc": float(metrics["acc,none"]), "acc_stderr": float(metrics["acc_stderr,none"]),
                        "acc_norm": float(metrics.get("acc_norm,none", float("nan"))),
                        "acc_norm_stderr": float(metrics.get("acc_norm_stderr,none", float("nan"))),
                        "n": len(samples), "gold_ce": gold, "gold_ce_mean": float(np.mean(gold))}
    return scores


def _gold_ce(sample: dict[str, Any]) -> float:
    """-log p(gold answer | context), summed over its tokens, from one logged lm-eval sample."""
    responses = sample["filtered_resps"]  # per choice: (loglikelihood, is_greedy)
    target = sample["target"]
    gold = target if isinstance(target, int) else 0  # a cloze item has one continuation, its target the text
    return -float(responses[gold][0])
