"""The decoding benchmark (rlib.layerskip.decoding): every exact method reproduces the autoregressive output, the
speedup column is relative to it, and the layer-count model reproduces the inventory's check of the paper."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.layerskip.decoding import (
    DecodeCase,
    OutputLog,
    TimingLog,
    benchmark_decoding,
    decode_cases,
    distinct_2,
    draft_vocabulary,
    paired_ratios,
    predicted_speedup,
)
from rlib.model.convert import to_transformers
from tests.test_looping import ids, tiny_model


def test_benchmark_rows_are_exact_and_relative_to_autoregressive():
    model = tiny_model(4, seed=1)
    cases = decode_cases(exits=(2,), drafts=(3,), reuses=("kvq", "none"))
    table = benchmark_decoding(model, [ids(1, 5, seed=s) for s in range(2)], cases, max_new_tokens=6, repeats=1,
                               hf_model=to_transformers(model))
    assert list(table["label"]) == ["autoregressive", "early_exit E=2", "self_speculative E=2 d=3 kvq",
                                    "self_speculative E=2 d=3 none", "hf_greedy", "hf_early_exit E=2 d=3"]
    exact = table[table["method"] != "early_exit"]
    assert exact["identical_to_greedy"].all() and (table["new_tokens"] == 12).all()
    assert table["speedup"].iloc[0] == 1.0 and (table["ms_per_token"] > 0).all()
    spec = table[table["method"] == "self_speculative"]
    assert spec["acceptance"].between(0, 1).all() and spec["predicted_speedup"].notna().all()
    assert table["distinct_2"].between(0, 1).all()
    assert (exact["distinct_2"] == table["distinct_2"].iloc[0]).all()  # same tokens, same diversity


def test_fast_matmul_is_a_column_and_both_settings_stay_exact():
    model = tiny_model(4, seed=1)
    cases = decode_cases(exits=(2,), drafts=(1, 3), peers=False)
    prompts = [ids(1, 5, seed=s) for s in range(2)]
    tables = [benchmark_decoding(model, prompts, cases, max_new_tokens=6, repeats=1, fast_matmul=fast)
              for fast in (False, True)]
    for fast, table in zip((False, True), tables):
        assert (table["fast_matmul"] == fast).all()
        assert table[table["method"] == "self_speculative"]["identical_to_greedy"].all()
    assert not any(type(m).__name__ == "DecodeProjection" for m in model.modules())  # restored after the benchmark


def test_cases_take_turns_on_each_prompt(monkeypatch):
    """Round-robin timing: after one warm-up per case, every case decodes prompt i before any decodes prompt i + 1,
    in reverse order every other round, so each prompt meets both orders over two repeats."""
    from rlib.layerskip import decoding

    calls = []
    real = decoding.run_case

    def recording(case, model, prompt, *args):
        calls.append((case.label, int(prompt[0, 0])))
        return real(case, model, prompt, *args)

    monkeypatch.setattr(decoding, "run_case", recording)
    model = tiny_model(4, seed=1)
    prompts = [ids(1, 5, seed=s) for s in range(2)]
    cases = decode_cases(exits=(2,), drafts=(3,), peers=False)
    labels = [c.label for c in cases]
    benchmark_decoding(model, prompts, cases, max_new_tokens=4, repeats=2)
    firsts = [int(p[0, 0]) for p in prompts]
    assert calls[:3] == [(label, firsts[0]) for label in labels]  # warm-ups
    rounds = [(firsts[0], labels), (firsts[1], labels[::-1]), (firsts[0], labels[::-1]), (firsts[1], labels)]
    assert calls[3:] == [(label, first) for first, order in rounds for label in order]


def test_timing_log_pairs_the_cases_of_each_round():
    model = tiny_model(4, seed=1)
    prompts = [ids(1, 5, seed=s) for s in range(3)]
    cases = decode_cases(exits=(2,), drafts=(2,), reuses=("kvq", "kv"), peers=False)
    log = TimingLog()
    with log.tagged(recipe="ld_ee"):
        table = benchmark_decoding(model, prompts, cases, max_new_tokens=5, repeats=2, timings=log)
    assert log.tags == {}  # the tag ends with its block
    times = log.frame()
    assert len(times) == len(cases) * len(prompts) * 2 and (times["recipe"] == "ld_ee").all()
    assert (times["new_tokens"] == 5).all() and (times["seconds"] > 0).all()
    first = times[(times["prompt"] == 0) & (times["repeat"] == 0)].sort_values("position")
    second = times[(times["prompt"] == 0) & (times["repeat"] == 1)].sort_values("position")
    assert first["label"].tolist() == [c.label for c in cases] == second["label"].tolist()[::-1]
    for label in table["label"]:  # each row's ms/token is the sum over prompts of its median round
        mine = times[times["label"] == label].groupby("prompt")["seconds"].median().sum()
        row = table[table["label"] == label].iloc[0]
        assert row["ms_per_token"] == pytest.approx(1000 * mine / row["new_tokens"])

    kvq, kv = "self_speculative E=2 d=2 kvq", "self_speculative E=2 d=2 kv"
    ratios = paired_ratios(times, kvq, kv, recipe="ld_ee")
    seconds = times.set_index(["label", "prompt", "repeat"])["seconds"]
    assert ratios == [seconds[(kvq, p, r)] / seconds[(kv, p, r)] for p in range(3) for r in range(2)]
    with pytest.raises(ConfigError, match="no round timed both"):
        paired_ratios(times, kvq, kv, recipe="baseline")


def test_output_log_holds_every_cases_new_tokens_on_every_prompt():
    model = tiny_model(4, seed=1)
    prompts = [ids(1, 5, seed=s) for s in range(3)]
    cases = decode_cases(exits=(2,), drafts=(2,), peers=False)
    log = OutputLog()
    with log.tagged(recipe="ld_ee"):
        benchmark_decoding(model, prompts, cases, max_new_tokens=6, repeats=2, outputs=log)
    out = log.frame()
    assert len(out) == len(cases) * len(prompts) and (out["recipe"] == "ld_ee").all()
    tokens = {(row.label, row.prompt): [int(t) for t in row.tokens.split()] for row in out.itertuples()}
    for index, prompt in enumerate(prompts):
        greedy = model.generate(prompt, 6, eos_ids=())[0, prompt.shape[1]:].tolist()
        ar = tokens[("autoregressive", index)]
        assert ar == greedy  # the decoded tokens themselves, after the prompt
        assert tokens[("self_speculative E=2 d=2 kvq", index)] == ar  # exact: the same tokens logged
        assert len(tokens[("early_exit E=2", index)]) == 6
    assert set(out["exit_layer"]) == {2, 4} and set(out["method"]) == {"autoregressive", "early_exit",
                                                                        "self_speculative"}


def test_distinct_2_flags_loops():
    assert distinct_2([5, 5, 5, 5, 5]) == 0.25 and distinct_2([1, 2, 3, 4]) == 1.0 and distinct_2([7]) == 1.0
    assert distinct_2([1, 2, 1, 2, 1]) == 0.5


def test_predicted_speedup_matches_the_inventorys_table_10_check():
    for exit_layer, acceptance, expected in ((18, 0.99, 1.27), (12, 0.97, 1.73), (6, 0.76, 2.30)):
        assert predicted_speedup(acceptance, 7, exit_layer, 24) == pytest.approx(expected, abs=0.01)


def test_bad_cases_fail_early():
    with pytest.raises(ConfigError, match="'beam' unknown"):
        DecodeCase("beam")
    with pytest.raises(ConfigError, match="reuse=''"):
        DecodeCase("self_speculative", 2, 3)
    with pytest.raises(ConfigError, match="first case must be the autoregressive"):
        benchmark_decoding(tiny_model(2), [ids(1, 3)], [DecodeCase("early_exit", 1)], 2)
    with pytest.raises(ConfigError, match=r"\[1, T\]"):
        benchmark_decoding(tiny_model(2), [ids(2, 3)], decode_cases((1,), (1,), peers=False), 2)


def test_draft_vocabulary_cases_add_the_prompt_and_stay_exact():
    model = tiny_model(4, seed=1)
    prompts = [ids(1, 5, seed=s) for s in range(2)]
    cases = decode_cases(exits=(2,), drafts=(3,), peers=False, draft_vocab=True)
    assert [c.label for c in cases][-1] == "self_speculative E=2 d=3 kvq vocab"
    greedy = [model.generate(p, 6, eos_ids=()) for p in prompts]
    vocab = draft_vocabulary(g[0, 5:].tolist() for g in greedy[:1])  # the first prompt's continuation only
    assert vocab.tolist() == sorted(set(greedy[0][0, 5:].tolist()))
    table = benchmark_decoding(model, prompts, cases, max_new_tokens=6, repeats=1, draft_vocab=vocab)
    narrow = table[table["draft_vocab"]]
    assert len(narrow) == 1 and narrow["identical_to_greedy"].all() and not table["draft_vocab"].iloc[:-1].any()
    with pytest.raises(ConfigError, match="needs draft_vocab"):
        benchmark_decoding(model, prompts, cases, max_new_tokens=6, repeats=1)
    with pytest.raises(ConfigError, match="self_speculative only"):
        DecodeCase("early_exit", 2, draft_vocab=True)
    with pytest.raises(ConfigError, match="at least one token"):
        draft_vocabulary([[], []])
