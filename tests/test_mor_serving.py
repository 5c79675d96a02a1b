"""rlib.mor.serving: continuous depth-wise batching of MoR models gives, token for token, the model's own cached
greedy decoding with causal routing, for both routers, both KV strategies and the Recursive model."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.mor import MoRSpec
from rlib.mor.serving import greedy_generate
from rlib.serving import Request, make_engine
from tests.test_mor import SPECS, model
from tests.test_serving import requests


@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("name", list(SPECS))
def test_engine_equals_cached_greedy_decoding(name, gemma):
    m = model(SPECS[name], gemma=gemma)
    reqs = requests()
    engine = make_engine(m, max_batch=3, max_len=24)
    result = engine.run(reqs)
    for req in reqs:
        assert result.completions[req.id].tokens == greedy_generate(m, req.prompt, req.max_new_tokens), (name, req.id)
    if SPECS[name].routed and (name, gemma) != ("expert-auxrouter", True):  # that random aux router sends all to 1
        depths = [d for c in result.completions.values() for d in c.exit_loops[1:]]
        assert len(set(depths)) > 1, "routing should vary, or the test proves little"


def test_recursion_wise_caching_stores_fewer_keys_than_sharing_everyone():
    reqs = requests(4, seed=1, max_new=(6, 8))
    counts = {}
    for name in ("recursive-cache", "expert-cache", "expert-share"):
        engine = make_engine(model(SPECS[name]), max_batch=4, max_len=24)
        engine.run(reqs)
        counts[name] = engine.program.kv_entries
    assert counts["expert-share"] < counts["expert-cache"] < counts["recursive-cache"]


def test_bad_settings_fail_before_any_work():
    m = model(MoRSpec.expert(3))
    with pytest.raises(ConfigError, match="max_batch=0"):
        make_engine(m, 0, 16)
    with pytest.raises(ConfigError, match="max_len=16"):
        make_engine(m, 2, 16).run([Request(0, [5] * 10, 10)])
    assert torch.is_grad_enabled()
