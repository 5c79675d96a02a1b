"""Task accuracy at every exit (paper 004, Sec. 4.2 early-exit inference; Figs. 6, 8, 10 and Table 1's task rows).

The book's local lm-eval tasks (`rlib.tasks`) are scored after chosen layers of a `Decoder`, with the shared head,
from one pass per request (`rlib.eval.RlibLM.score_exits`). Each task becomes the requests lm-eval builds from its
YAML, and the metrics are lm-eval's:

    book_cloze      (context, " " + target)       acc       the target word is the greedy continuation
    book_nextline   (context, choice) per choice  acc       the choice with the highest summed log-probability
    book_code                                     acc_norm  the highest log-probability per character of the choice

So the row of exit E equals what `lm_eval --model rlib --model_args ...,exit_layer=E` reports on the same items
(tested), at a fraction of the cost of one lm-eval run per exit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlib import tasks as book_tasks
from rlib.config import ConfigError
from rlib.eval import RlibLM
from rlib.model import Decoder

__all__ = ["EXIT_TASKS", "exit_task_accuracy"]

EXIT_TASKS = ("book_cloze", "book_nextline", "book_code")  # book_ppl is a perplexity: exit_metrics reads those


def _requests(task: str, items: list[dict]) -> tuple[list[tuple[str, str]], list[int]]:
    """The (context, continuation) requests of `items` and, per item, how many of them it owns."""
    if task == "book_cloze":
        return [(item["context"], " " + item["target"]) for item in items], [1] * len(items)
    requests = [(item["context"], choice) for item in items for choice in item["choices"]]
    return requests, [len(item["choices"]) for item in items]


def exit_task_accuracy(model: Decoder, tokenizer, exits: tuple[int, ...], tasks: tuple[str, ...] = EXIT_TASKS,
                       limit: int | None = None, batch_size: int = 8) -> pd.DataFrame:
    """One row per (task, exit, metric): value in [0, 1] over the first `limit` test items (all if None), n items.

    exits: layers 1..L (the head after that many plan steps); the suite is built first if it is missing."""
    unknown = [t for t in tasks if t not in EXIT_TASKS]
    if unknown:
        raise ConfigError(f"tasks {unknown} cannot be read per exit; choose from {list(EXIT_TASKS)}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit} must be >= 1 (or None for every item)")
    lm = RlibLM(model=model, tokenizer=tokenizer, batch_size=batch_size)
    exits = lm._check_exits(exits)
    folder = book_tasks.build()
    rows = []
    for task in tasks:
        items = book_tasks.read_items(task, "test", folder)[:limit]
        requests, owned = _requests(task, items)
        scores = lm.score_exits(requests, exits)  # per request, per exit: (logprob, greedy)
        for e, exit_layer in enumerate(exits):
            start, hits, hits_norm = 0, 0, 0
            for item, count in zip(items, owned):
                mine = scores[start:start + count]
                start += count
                if task == "book_cloze":
                    hits += int(mine[0][e][1])
                    continue
                logprobs = np.array([s[e][0] for s in mine])
                lengths = np.array([float(len(choice)) for choice in item["choices"]])
                hits += int(np.argmax(logprobs) == item["label"])
                hits_norm += int(np.argmax(logprobs / lengths) == item["label"])
            rows.append({"task": task, "exit_layer": exit_layer, "metric": "acc", "value": hits / len(items),
                         "n": len(items)})
            if task != "book_cloze":
                rows.append({"task": task, "exit_layer": exit_layer, "metric": "acc_norm",
                             "value": hits_norm / len(items), "n": len(items)})
    return pd.DataFrame(rows)
