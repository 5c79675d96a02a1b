"""Tables 2-4's ROUGE-2 column (rlib.layerskip.quality): torchmetrics' ROUGE-2 F-measure with the official
benchmark's lowercasing, decoded outputs scored against their prompt's reference, and the paired ratio to the
baseline's autoregressive mean with its bootstrap interval."""

from __future__ import annotations

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.layerskip.quality import quality_summary, ratio_interval, rouge2, score_outputs


def test_rouge2_is_the_bigram_f_measure_on_lowercased_words():
    assert rouge2(["The cat sat on the mat"], ["the cat sat on a mat"]) == [pytest.approx(0.6)]  # 3 of 5 bigrams
    assert rouge2(["a b c"], ["x y z"]) == [0.0]
    assert rouge2(["Cat, sat"], ["cat sat"]) == [0.0]  # punctuation stays on the word, as the official normalizer
    with pytest.raises(ConfigError, match="2 predictions but 1 references"):
        rouge2(["a b", "c d"], ["a b"])


def test_outputs_are_decoded_and_scored_against_their_prompts_reference():
    words = {1: "the", 2: "cat", 3: "sat", 4: "dog", 5: "ran"}
    decode = lambda ids: " ".join(words[i] for i in ids)  # noqa: E731
    outputs = pd.DataFrame({"recipe": ["baseline", "baseline", "ld_ee", "ld_ee"],
                            "label": ["autoregressive", "autoregressive", "early_exit E=2", "early_exit E=2"],
                            "method": ["autoregressive", "autoregressive", "early_exit", "early_exit"],
                            "exit_layer": [4, 4, 2, 2], "n_draft": 0, "prompt": [0, 1, 0, 1],
                            "tokens": ["1 2 3", "1 4 5", "4 4 4", "1 4 5"]})
    scored = score_outputs(outputs, ["the cat sat", "the dog ran"], decode)
    assert "tokens" not in scored and scored["new_tokens"].tolist() == [3, 3, 3, 3]
    assert scored["rouge2"].tolist() == [1.0, 1.0, 0.0, 1.0]
    summary = quality_summary(scored).set_index("label")
    assert summary.loc["autoregressive", "ratio_to_baseline"] == 1.0
    assert summary.loc["early_exit E=2", "rouge2"] == 0.5 and summary.loc["early_exit E=2", "ratio_to_baseline"] == 0.5
    speculative = pd.concat([scored, scored[scored["recipe"] == "ld_ee"].assign(
        label="self_speculative E=2 d=2 kvq", method="self_speculative"), scored[scored["recipe"] == "ld_ee"].assign(
        label="self_speculative E=2 d=2 kv", method="self_speculative")])
    short = quality_summary(speculative, one_speculative=True)
    assert short["label"].tolist() == ["autoregressive", "early_exit E=2", "self_speculative E=2 d=2 kvq"]
    assert len(quality_summary(speculative)) == 4
    with pytest.raises(ConfigError, match="prompt 1 has no reference"):
        score_outputs(outputs, ["the cat sat"], decode)
    alone = quality_summary(scored[scored["recipe"] == "ld_ee"])  # no baseline decoded: no ratio
    assert alone["rouge2"].tolist() == [0.5] and alone["ratio_to_baseline"].isna().all()


def test_the_ratio_interval_holds_the_ratio_and_narrows_with_more_prompts():
    ratio, lo, hi = ratio_interval([0.1, 0.2, 0.3, 0.2], [0.2, 0.2, 0.2, 0.2])
    assert ratio == pytest.approx(1.0) and lo < 1.0 < hi
    few = ratio_interval([0.1, 0.3] * 4, [0.2] * 8)
    many = ratio_interval([0.1, 0.3] * 64, [0.2] * 128)
    assert many[2] - many[1] < (few[2] - few[1]) / 2  # about 1/sqrt(n)
    assert ratio_interval([0.1, 0.2], [0.1, 0.2]) == (1.0, 1.0, 1.0)  # identical outputs: no spread
    assert all(v != v for v in ratio_interval([0.1], [0.0]))  # nan: no baseline to divide by
    with pytest.raises(ConfigError, match="paired"):
        ratio_interval([0.1, 0.2], [0.1])
