"""Task accuracy per exit (rlib.layerskip.exit_tasks) equals lm-eval's own run of RlibLM with exit_layer=E."""

from __future__ import annotations

import pytest

from rlib import eval as rev
from rlib.config import ConfigError
from rlib.layerskip.exit_tasks import exit_task_accuracy
from tests.test_lm_eval import CORPUS_ASSETS, _tiny_decoder

pytestmark = pytest.mark.assets


def test_every_exit_equals_lm_evals_run_at_that_exit(needs_assets):
    needs_assets("smollm2-135m", *CORPUS_ASSETS)
    from rlib import assets

    tokenizer = assets.load_tokenizer("smollm2-135m")
    decoder = _tiny_decoder(len(tokenizer))
    tasks, limit = ("book_cloze", "book_nextline", "book_code"), 6
    table = exit_task_accuracy(decoder, tokenizer, exits=(1, 2), tasks=tasks, limit=limit)
    assert set(table["exit_layer"]) == {1, 2} and set(table["n"]) == {limit}
    assert len(table) == 2 * (1 + 2 + 2)  # cloze: acc; the multiple-choice tasks: acc and acc_norm
    for exit_layer in (1, 2):
        reference = rev.evaluate(decoder, list(tasks), limit=limit, tokenizer=tokenizer, exit_layer=exit_layer)
        mine = table[table["exit_layer"] == exit_layer].set_index(["task", "metric"])["value"]
        for (task, metric), value in mine.items():
            assert value == pytest.approx(reference[task][metric]), (exit_layer, task, metric)


def test_bad_requests_fail_before_scoring():
    decoder = _tiny_decoder(64)
    with pytest.raises(ConfigError, match=r"tasks \['book_ppl'\] cannot be read per exit"):
        exit_task_accuracy(decoder, None, exits=(1,), tasks=("book_ppl",))
    with pytest.raises(ConfigError, match="limit=0"):
        exit_task_accuracy(decoder, None, exits=(1,), limit=0)
