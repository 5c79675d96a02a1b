"""Tests of the local lm-eval task suite (rlib.tasks) and the lm-eval adapter (rlib.eval.RlibLM, evaluate, main).

Everything needs the embedded corpora or tokenizer (marked `assets`). The adapter's scores are checked
against a hand computation from a tiny random Decoder's logits; one test runs the real SmolLM2 through
`evaluate` on 10 items per task and prints its accuracies; one runs `python -m rlib.eval` in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from rlib import corpora, paths, tasks
from rlib import eval as rev
from rlib.model import Decoder, DecoderConfig, convert

pytestmark = pytest.mark.assets
CORPUS_ASSETS = ("shakespeare", "gutenberg-poetry", "humaneval", "python-stdlib")
SMALL = {"n_items": 24, "n_fewshot": 6}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The suite built twice into two folders with the same (small) sizes."""
    from rlib import assets

    if not all(assets.is_ready(name) for name in CORPUS_ASSETS):
        pytest.skip("corpora not cached; run `make assets`")
    root = tmp_path_factory.mktemp("tasks")
    return tasks.build(root / "a", **SMALL), tasks.build(root / "b", **SMALL)


def _tiny_decoder(vocab_size: int) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        family="llama", vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
        d_ffn=64, activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0,
        qk_norm=False, rope_thetas=(10000.0, 10000.0), sliding_windows=(None, None), attn_scale=8**-0.5,
        bos_id=1, eos_ids=(2,), pad_id=2, max_positions=256,
    )
    return Decoder(config).eval()


@pytest.fixture(scope="module")
def smol_tokenizer():
    from rlib import assets

    if not assets.is_ready("smollm2-135m"):
        pytest.skip("smollm2-135m not cached; run `make assets`")
    return assets.load_tokenizer("smollm2-135m")


# ----------------------------------------------------------------------------------------------
# the task suite


def test_build_is_deterministic_and_skips_when_unchanged(built):
    a, b = built
    for task in tasks.TASKS:
        for split in ("test", "validation"):
            name = f"{task}.{split}.jsonl"
            assert (a / name).read_text() == (b / name).read_text(), name
        assert str(a / f"{task}.test.jsonl") in (a / f"{task}.yaml").read_text()  # absolute data_files
    stamp = (a / tasks.KEY_FILE).stat().st_mtime_ns
    assert tasks.build(a, **SMALL) == a and (a / tasks.KEY_FILE).stat().st_mtime_ns == stamp
    counts = json.loads((a / tasks.KEY_FILE).read_text())["counts"]
    assert all(c["test"] == SMALL["n_items"] and c["validation"] == SMALL["n_fewshot"] for c in counts.values())


def test_items_come_only_from_held_out_splits(built):
    a, _ = built
    for task in tasks.TASKS:
        for split in ("test", "validation"):
            for item in tasks.read_items(task, split, a):
                assert corpora.split_of(item["corpus"], item["doc_id"]) == split, (task, item["doc_id"])


def test_multiple_choice_items_have_one_true_answer(built):
    a, _ = built
    lines = {}  # (corpus, doc_id) -> the document's lines, as the builder saw them
    for corpus in CORPUS_ASSETS[:2] + ("python-stdlib",):
        for doc in corpora.documents_in(corpus, "test"):
            lines[(corpus, doc.doc_id)] = tasks._lines(doc.text)
    solutions = {p["task_id"]: p["canonical_solution"] for p in tasks._humaneval_problems()}
    for task in ("book_nextline", "book_code"):
        for item in tasks.read_items(task, "test", a):
            choices = item["choices"]
            assert len(choices) == tasks.N_CHOICES and len(set(choices)) == len(choices)
            assert len({c.strip() for c in choices}) == len(choices)  # not just differently indented
            correct = choices[item["label"]]
            if item["corpus"] == "humaneval":
                assert correct == solutions[item["doc_id"]]
                assert sum(c == solutions[item["doc_id"]] for c in choices) == 1
            else:
                assert correct.strip() == lines[(item["corpus"], item["doc_id"])][item["line"]].strip()


def test_cloze_and_ppl_items(built):
    a, _ = built
    for item in tasks.read_items("book_cloze", "test", a):
        assert item["target"].isalpha() or "'" in item["target"]
        assert not item["context"].endswith((" ", "\n"))
    for item in tasks.read_items("book_ppl", "test", a):
        assert 0 < len(item["text"]) <= tasks.PPL_CHARS


# ----------------------------------------------------------------------------------------------
# the adapter against a hand computation


def _hand_loglikelihood(decoder, tokenizer, context: str, continuation: str,
                        n_steps: int | None = None) -> tuple[float, bool]:
    """SmolLM2's convention: no BOS; an empty context is replaced by the BOS/EOS token. n_steps: exit early."""
    context_ids = tokenizer(context, add_special_tokens=False)["input_ids"]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    target = whole[len(context_ids) :]
    context_ids = whole[: len(context_ids)] or [tokenizer.bos_token_id]
    ids = torch.tensor([context_ids + target])
    with torch.no_grad():
        logprobs = torch.log_softmax(decoder(ids, n_steps=n_steps)[0].float(), dim=-1)  # [T, V]
    rows = logprobs[len(context_ids) - 1 : -1]  # the positions that predict the continuation
    total = sum(float(rows[j, t]) for j, t in enumerate(target))
    return total, all(int(rows[j].argmax()) == t for j, t in enumerate(target))


def _requests(*args):
    return [SimpleNamespace(args=a) for a in args]


def test_loglikelihood_equals_hand_computation(smol_tokenizer):
    decoder = _tiny_decoder(len(smol_tokenizer))
    lm = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, batch_size=2)
    assert not lm.add_bos
    pairs = [
        ("The quick brown fox", " jumps over the lazy dog"),
        ("The quick brown fox", " sleeps"),  # shares its context with the pair above: the KV-cache path
        ("To be, or not to be,", " that is the question"),
        ("", "Hello world"),  # empty context: the BOS/EOS prefix
        ("def f(x):\n   ", " return x"),  # trailing blanks move to the continuation
    ]
    got = lm.loglikelihood(_requests(*pairs))
    for (context, continuation), (logprob, greedy) in zip(pairs, got):
        if context.endswith(" "):
            context, continuation = context.rstrip(), context[len(context.rstrip()) :] + continuation
        want, want_greedy = _hand_loglikelihood(decoder, smol_tokenizer, context, continuation)
        assert logprob == pytest.approx(want, rel=1e-4, abs=1e-3)
        assert greedy == want_greedy


def test_rolling_and_generation(smol_tokenizer):
    decoder = _tiny_decoder(len(smol_tokenizer))
    lm = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, max_length=16)
    text = "Shall I compare thee to a summer's day? Thou art more lovely and more temperate."
    ids = smol_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 16  # several windows
    windows = lm._rolling_windows(text)
    assert sum(len(t) for _, t in windows) == len(ids) and windows[0][0] == [smol_tokenizer.bos_token_id]
    (total,) = lm.loglikelihood_rolling(_requests((text,)))
    assert total == pytest.approx(sum(scores[0][0] for scores in lm._score(windows)), rel=1e-5)
    short = "Shall I compare thee"
    want, _ = _hand_loglikelihood(decoder, smol_tokenizer, "", short)
    assert lm.loglikelihood_rolling(_requests((short,)))[0] == pytest.approx(want, rel=1e-4)
    full = lm.generate_until(_requests(("Once upon a time", {"until": [], "max_gen_toks": 40})))[0]
    stop = full[5:8] if len(full) > 8 else None
    if stop:
        cut = lm.generate_until(_requests(("Once upon a time", {"until": [stop], "max_gen_toks": 40})))[0]
        assert cut == full[: full.index(stop)]


PAIRS = [("The quick brown fox", " jumps over the lazy dog"), ("The quick brown fox", " sleeps"),
         ("To be, or not to be,", " that is the question"), ("", "Hello world")]


def test_exit_layer_scores_the_first_steps_and_the_shared_head(smol_tokenizer):
    decoder = _tiny_decoder(len(smol_tokenizer))
    early = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, batch_size=2, exit_layer="1")  # as model_args give it
    got = early.loglikelihood(_requests(*PAIRS))
    for (context, continuation), (logprob, greedy) in zip(PAIRS, got):
        want, want_greedy = _hand_loglikelihood(decoder, smol_tokenizer, context, continuation, n_steps=1)
        assert logprob == pytest.approx(want, rel=1e-4, abs=1e-3) and greedy == want_greedy
    full = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, batch_size=2).loglikelihood(_requests(*PAIRS))
    assert [lp for lp, _ in got] != pytest.approx([lp for lp, _ in full])  # the exit changes the scores
    both = early.score_exits(PAIRS, exits=(2, 1))  # ascending: exit 1, then exit 2
    for exit_index, reference in ((0, got), (1, full)):
        assert [b[exit_index][0] for b in both] == pytest.approx([lp for lp, _ in reference], rel=1e-5)
        assert [b[exit_index][1] for b in both] == [g for _, g in reference]
    assert early.exits == (1,)  # score_exits leaves the configured exit alone
    for bad in (0, 3, "x"):
        with pytest.raises(ValueError, match=r"must be whole numbers in \[1, 2\]"):
            rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, exit_layer=bad)


def test_generation_with_an_exit_layer_is_early_exit_greedy(smol_tokenizer):
    from rlib.layerskip.speculative import early_exit_generate

    decoder = _tiny_decoder(len(smol_tokenizer))
    lm = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, exit_layer=1)
    prompt = smol_tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]
    want = early_exit_generate(decoder, torch.tensor([prompt]), 12, 1, eos_ids=(2,))[0].tolist()
    assert lm._greedy(prompt, 12, (2,)) == want
    text = lm.generate_until(_requests(("Once upon a time", {"until": [], "max_gen_toks": 12})))[0]
    assert text == smol_tokenizer.decode(want[len(prompt):], skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------
# end to end: SmolLM2 through evaluate(), and the CLI


def test_evaluate_smollm2_on_the_local_suite(needs_assets):
    needs_assets("smollm2-135m", *CORPUS_ASSETS)
    results = rev.evaluate("smollm2-135m", list(tasks.TASKS), limit=10, batch_size=8)
    print(json.dumps(results, indent=1, default=str))
    assert set(tasks.TASKS) <= set(results)
    assert math.isfinite(results["book_ppl"]["bits_per_byte"]) and results["book_ppl"]["bits_per_byte"] > 0
    assert 0 <= results["book_cloze"]["acc"] <= 1
    for task in ("book_nextline", "book_code"):  # chance is 1/4
        assert results[task]["acc"] > 0.25, f"{task}: SmolLM2 acc {results[task]['acc']} is not above chance"


def test_cli_runs_offline(tmp_path, smol_tokenizer):
    folder = convert.save(_tiny_decoder(len(smol_tokenizer)), tmp_path / "tiny")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, "-m", "rlib.eval", "--model", "rlib", "--model_args", f"path={folder}",
               "--tasks", "book_cloze", "--limit", "5", "--output_path", str(tmp_path / "out")]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "book_cloze" in done.stdout
    assert (paths.CACHE / "tasks" / "book_cloze.yaml").exists()


# ----------------------------------------------------------------------------------------------
# suites per profile, the long and wide tables, the figure


def test_standard_suite_falls_back_to_local_offline(monkeypatch, tmp_path):
    import datasets.config

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))  # an empty cache
    names, note = tasks.resolve_suite("standard")
    assert names == tasks.TASKS and "cannot run here" in note and "lambada" in note
    (tmp_path / "EleutherAI___lambada_openai").mkdir()  # a cached dataset counts as available
    assert "lambada_openai" not in tasks.standard_tasks_missing(("lambada_openai", "hellaswag"))
    assert set(tasks.standard_tasks_missing(("lambada_openai", "hellaswag"))) == {"hellaswag"}
    assert tasks.resolve_suite("local") == (tasks.TASKS, tasks.resolve_suite("local")[1])
    with pytest.raises(ValueError, match="'mmlu'.*local"):
        tasks.resolve_suite("mmlu")


def test_every_task_has_a_primary_metric():
    assert set(tasks.TASKS) | set(tasks.STANDARD_TASKS) <= set(tasks.PRIMARY_METRIC)


def test_suite_table_and_summary(built, smol_tokenizer):
    models = {"tiny-a": _tiny_decoder(len(smol_tokenizer)), "tiny-b": _tiny_decoder(len(smol_tokenizer))}
    long = rev.suite_table(models, ["book_nextline", "book_ppl"], limit=4, tokenizer=smol_tokenizer)
    assert set(long["model"]) == set(models) and set(long["task"]) == {"book_nextline", "book_ppl"}
    primary = long[long["primary"]].set_index(["model", "task"])["metric"]
    assert primary[("tiny-a", "book_nextline")] == "acc_norm" and primary[("tiny-a", "book_ppl")] == "bits_per_byte"
    assert (long["n"] == 4).all()
    a, b = (long[long.model == m].set_index(["task", "metric"])["value"] for m in models)
    assert a.equals(b)  # the same seed gives the same tiny model, so the same scores
    wide = rev.suite_summary(long)
    assert list(wide["model"]) == list(models)
    acc = long[(long.model == "tiny-a") & (long.metric == "acc_norm")]["value"].iloc[0]
    assert wide.loc[0, "book_nextline (acc_norm)"] == pytest.approx(100 * acc, abs=0.01)
    assert wide.loc[0, "avg_acc"] == pytest.approx(100 * acc, abs=0.01)  # bits per byte is not averaged


def test_plot_task_suite_draws_one_bar_per_model_and_accuracy_task():
    import pandas as pd

    from rlib.basemodels import plots

    rows = [{"model": m, "task": t, "metric": metric, "value": v, "stderr": 0.05, "n": 100, "primary": True}
            for m in ("a", "b") for t, metric, v in (("book_code", "acc", 0.6), ("book_ppl", "bits_per_byte", 1.4),
                                                     ("book_nextline", "acc_norm", 0.5))]
    fig = plots.plot_task_suite(pd.DataFrame(rows), chance=tasks.CHANCE_ACCURACY)
    ax = fig.axes[0]
    assert len(ax.patches) == 4  # 2 models x 2 accuracy tasks; bits per byte is left out
    assert [t.get_text() for t in ax.get_xticklabels()] == ["book_code", "book_nextline"]
    assert ax.get_ylim()[1] >= 100


def test_a_looped_model_evaluates_through_lm_eval(built, smol_tokenizer, tmp_path):
    from rlib import looping

    looped = looping.convert(_tiny_decoder(len(smol_tokenizer)), looping.Looping(2, init="average"))
    assert len(looped.plan) == 2 and looped.config.n_layers == 1
    direct = rev.evaluate(looped, ["book_nextline"], limit=3, tokenizer=smol_tokenizer)
    reloaded = rev.evaluate(str(convert.save(looped, tmp_path / "looped")), ["book_nextline"], limit=3,
                            tokenizer=smol_tokenizer)
    assert direct["book_nextline"]["acc"] == reloaded["book_nextline"]["acc"]


def test_length_groups_bound_padding_and_cover_every_index():
    lengths = [122, 9, 14, 61, 120, 9, 10, 66]
    groups = rev.length_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert lengths[group[0]] == longest  # longest first
        assert longest * len(group) <= 1.25 * sum(lengths[i] for i in group)
    assert rev.length_groups([5, 5, 5], slack=1.0) == [[0, 1, 2]]
    assert rev.length_groups([]) == []
    with pytest.raises(ValueError, match="slack=0.5"):
        rev.length_groups([1], slack=0.5)


def test_shared_context_scores_equal_one_pair_at_a_time(smol_tokenizer):
    """Continuations of very different lengths over one context (several length groups, the cache restored
    between them) score as each pair alone."""
    decoder = _tiny_decoder(len(smol_tokenizer))
    lm = rev.RlibLM(model=decoder, tokenizer=smol_tokenizer, batch_size=3)
    context = "Once upon a time there was"
    endings = [" a king", " a very old king who lived in a castle by the sea with his three daughters", " a",
               " a queen who ruled", " one"]
    together = lm.score_exits([(context, e) for e in endings], exits=(1, 2))
    assert len(rev.length_groups([len(smol_tokenizer(e)["input_ids"]) for e in endings])) >= 3
    for ending, got in zip(endings, together):
        alone = lm.score_exits([(context, ending)], exits=(1, 2))[0]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in alone], rel=1e-5)
        assert [g for _, g in got] == [g for _, g in alone]
