"""The book's Decoder against transformers: same logits (fp32, <= 1e-4 max abs), with and without KV cache.

(a) tiny random Llama (GQA), Gemma 3 (MQA, QK-norm, sliding window shorter than the sequence), Qwen2 (Q/K/V biases,
    sliding window on its upper layers), Qwen3 (per-head QK-norm, with and without attention biases) and Mistral
    (sliding window shorter than the sequence, or none) models; more on the last three in test_model_families.py
(b) the embedded SmolLM2-135M and Gemma 3 270M on real text, Gemma beyond its 512-token window
(c) export back to transformers, and the book's own save/load
(d) execution plans: identity, looping (cycle), shared KV, early exits
"""

import inspect
import textwrap

import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from rlib.model import Decoder, DecoderConfig, ExecutionPlan, from_transformers, load, save, to_transformers
from rlib.model.config import ConfigError

TOL = 1e-4
VOCAB = 97


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter random (norm weights included), so no weight sits at its trivial init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.15)
    return model.eval()


def tiny_llama(tied: bool = False) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return randomize(LlamaForCausalLM(config))


def tiny_gemma(logit_softcap: bool = False) -> Gemma3ForCausalLM:
    config = Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=24, sliding_window=7,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        final_logit_softcapping=3.0 if logit_softcap else None,
        bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )
    return randomize(Gemma3ForCausalLM(config), seed=1)


SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
             bos_token_id=1, eos_token_id=2, pad_token_id=0)
WINDOW = 5  # Qwen2's and Mistral's sliding window: shorter than every test sequence


def tiny_qwen2(sliding: bool = True) -> Qwen2ForCausalLM:
    config = Qwen2Config(**SHAPE, use_sliding_window=sliding, sliding_window=WINDOW, max_window_layers=1)
    return randomize(Qwen2ForCausalLM(config), seed=2)


def tiny_qwen3(attention_bias: bool = False) -> Qwen3ForCausalLM:
    config = Qwen3Config(**SHAPE, head_dim=24, attention_bias=attention_bias, tie_word_embeddings=True)
    return randomize(Qwen3ForCausalLM(config), seed=3)


def tiny_mistral(window: int | None = WINDOW) -> MistralForCausalLM:
    config = MistralConfig(**{**SHAPE, "num_key_value_heads": 1}, sliding_window=window)
    return randomize(MistralForCausalLM(config), seed=4)


TINY = {
    "llama": tiny_llama,
    "llama_tied": lambda: tiny_llama(tied=True),
    "gemma3": tiny_gemma,
    "gemma3_logit_softcap": lambda: tiny_gemma(logit_softcap=True),
    "qwen2": tiny_qwen2,
    "qwen2_global": lambda: tiny_qwen2(sliding=False),
    "qwen3": tiny_qwen3,
    "qwen3_bias": lambda: tiny_qwen3(attention_bias=True),
    "mistral": tiny_mistral,
    "mistral_global": lambda: tiny_mistral(window=None),
}


def tokens(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def cached_logits(decoder: Decoder, input_ids: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    """Feed input_ids through one KV cache in chunks of the given sizes; concatenate the logits."""
    cache, start, out = decoder.new_cache(), 0, []
    for size in chunks:
        out.append(decoder(input_ids[:, start : start + size], cache=cache))
        start += size
    assert start == input_ids.shape[1]
    return torch.cat(out, dim=1)


# ---- (a) tiny models ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TINY))
def test_tiny_full_forward_matches_transformers(name):
    hf_model = TINY[name]()
    decoder = from_transformers(hf_model)
    input_ids = tokens(2, 20)  # longer than the Gemma window (7) and the Qwen2 / Mistral one (5)
    with torch.no_grad():
        diff = max_diff(decoder(input_ids), hf_model(input_ids).logits)
    print(f"{name}: full forward max |diff| = {diff:.2e}")
    assert diff <= TOL


@pytest.mark.parametrize("name", list(TINY))
@pytest.mark.parametrize("chunks", [[5] + [1] * 15, [8, 3, 3, 1, 5]], ids=["prefill+decode", "chunked"])
def test_tiny_kv_cache_matches_full_forward(name, chunks):
    hf_model = TINY[name]()
    decoder = from_transformers(hf_model)
    input_ids = tokens(2, sum(chunks), seed=3)
    with torch.no_grad():
        reference = hf_model(input_ids).logits
        diff = max_diff(cached_logits(decoder, input_ids, chunks), reference)
    print(f"{name} {chunks}: cached max |diff| = {diff:.2e}")
    assert diff <= TOL


def test_attention_softcap_path():
    """Gemma-2-style score soft-capping (transformers' Gemma 3 ignores its config field, so no reference model):
    a huge cap is the identity, also with a KV cache and a sliding window; a small cap changes the output."""
    decoder = from_transformers(tiny_gemma())
    input_ids = tokens(2, 16)
    with torch.no_grad():
        plain = decoder(input_ids)
        capped = Decoder(decoder.config.replace(attn_softcap=1e6))
        capped.load_state_dict(decoder.state_dict())
        assert max_diff(capped(input_ids), plain) <= TOL
        assert max_diff(cached_logits(capped, input_ids, [9, 1, 1, 5]), plain) <= TOL
        tight = Decoder(decoder.config.replace(attn_softcap=0.5))
        tight.load_state_dict(decoder.state_dict())
        assert max_diff(tight(input_ids), plain) > 1e-2


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_tiny_gradients_match_transformers(name):
    """The same loss gives the same gradients: training through our decoder is training the same model."""
    hf_model = TINY[name]()
    decoder = from_transformers(hf_model)
    input_ids = tokens(2, 16, seed=5)
    hf_model(input_ids, labels=input_ids).loss.backward()
    logits = decoder(input_ids)
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), input_ids[:, 1:].reshape(-1)).backward()
    ours = decoder.blocks[0].attn.q_proj.weight.grad
    theirs = hf_model.model.layers[0].self_attn.q_proj.weight.grad
    assert max_diff(ours, theirs) <= 1e-5
    assert max_diff(decoder.embed.weight.grad, hf_model.model.embed_tokens.weight.grad) <= 1e-5


def test_tiny_greedy_generation_matches_transformers():
    hf_model = tiny_llama()
    decoder = from_transformers(hf_model)
    prompt = tokens(2, 6, seed=7)
    ours = decoder.generate(prompt, max_new_tokens=10, eos_ids=())
    theirs = hf_model.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(ours, theirs)


def test_sampling_is_seeded_and_respects_top_k():
    decoder = from_transformers(tiny_gemma())
    prompt = tokens(1, 4)
    runs = [decoder.generate(prompt, 8, temperature=1.0, top_k=5, eos_ids=(),
                             generator=torch.Generator().manual_seed(11)) for _ in range(2)]
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (1, 12)
    with torch.no_grad():  # each sampled token is among the 5 most likely after its prefix
        logits = decoder(runs[0][:, :-1])[0, 3:]
    top5 = logits.topk(5, dim=-1).indices
    assert all(runs[0][0, 4 + i] in top5[i] for i in range(8))


def test_generation_stops_at_eos():
    decoder = from_transformers(tiny_llama())
    prompt = tokens(1, 5)
    first = decoder.generate(prompt, 1, eos_ids=())[0, -1].item()
    out = decoder.generate(prompt, 10, eos_ids=(first,))
    assert out.shape == (1, 6)


def test_left_padding_via_negative_positions():
    """Padded keys (position -1) are never attended to: a padded row equals the same row unpadded."""
    decoder = from_transformers(tiny_gemma())
    row = tokens(1, 12)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), row], dim=1)
    positions = torch.cat([torch.full((1, 3), -1), torch.arange(12)[None]], dim=1)
    with torch.no_grad():
        assert max_diff(decoder(padded, positions=positions)[:, 3:], decoder(row)) <= TOL


# ---- (b) the embedded models -------------------------------------------------------------------------------

REAL_TEXT = inspect.getsource(textwrap)  # prose docstrings and code, the same on every machine with this Python


@pytest.fixture(scope="module")
def real_models():
    loaded = {}

    def get(name: str):
        if name not in loaded:
            from rlib import assets

            torch.set_num_threads(min(2, torch.get_num_threads()))
            loaded.clear()  # one real model in memory at a time
            hf_model = assets.load_model(name)
            loaded[name] = (hf_model, from_transformers(hf_model), assets.load_tokenizer(name))
        return loaded[name]

    return get


def real_ids(tokenizer, length: int) -> torch.Tensor:
    ids = tokenizer(REAL_TEXT, return_tensors="pt").input_ids[:, :length]
    assert ids.shape[1] == length
    return ids


@pytest.mark.assets
@pytest.mark.parametrize("name, length", [("smollm2-135m", 256), ("gemma3-270m", 600)])
def test_real_model_matches_transformers(name, length, needs_assets, real_models):
    needs_assets(name)
    hf_model, decoder, tokenizer = real_models(name)
    input_ids = real_ids(tokenizer, length)
    if tokenizer.bos_token_id is not None and name.startswith("gemma"):
        assert input_ids[0, 0] == tokenizer.bos_token_id  # Gemma needs BOS at position 0
    with torch.no_grad():
        reference = hf_model(input_ids).logits  # [1, T, V]
        full = max_diff(decoder(input_ids), reference)
        cached = max_diff(cached_logits(decoder, input_ids, [length - 4, 1, 1, 1, 1]), reference)
    print(f"{name} T={length}: full max |diff| = {full:.2e}, prefill+4 decode max |diff| = {cached:.2e}")
    assert full <= TOL and cached <= TOL


@pytest.mark.assets
def test_real_model_exports_back(needs_assets, real_models):
    needs_assets("smollm2-135m")
    hf_model, decoder, tokenizer = real_models("smollm2-135m")
    input_ids = real_ids(tokenizer, 64)
    exported = to_transformers(decoder)
    with torch.no_grad():
        assert max_diff(exported(input_ids).logits, hf_model(input_ids).logits) == 0.0


@pytest.mark.assets
def test_real_model_greedy_generation_matches_transformers(needs_assets, real_models):
    needs_assets("smollm2-135m")
    hf_model, decoder, tokenizer = real_models("smollm2-135m")
    prompt = tokenizer("The capital of France is", return_tensors="pt").input_ids
    ours = decoder.generate(prompt, max_new_tokens=12, eos_ids=())
    theirs = hf_model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None,
                               pad_token_id=tokenizer.pad_token_id or 0)
    assert torch.equal(ours, theirs)


# ---- (c) export and the book's format ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(TINY))
def test_export_to_transformers_reproduces_logits(name):
    hf_model = TINY[name]()
    exported = to_transformers(from_transformers(hf_model))
    assert type(exported) is type(hf_model)
    assert DecoderConfig.from_hf(exported.config) == DecoderConfig.from_hf(hf_model.config)
    input_ids = tokens(2, 20)
    with torch.no_grad():
        assert max_diff(exported(input_ids).logits, hf_model(input_ids).logits) <= TOL


def test_export_refuses_looped_plans():
    decoder = from_transformers(tiny_llama())
    decoder.plan = ExecutionPlan.cycle(3, n_loops=2)
    with pytest.raises(ConfigError, match="identity"):
        to_transformers(decoder)


@pytest.mark.parametrize("name", ["llama", "gemma3_logit_softcap"])
def test_save_load_round_trip(name, tmp_path):
    decoder = from_transformers(TINY[name]())
    decoder.plan = ExecutionPlan.from_blocks([0, 1, 2, 1, 0])
    save(decoder, tmp_path / "model")
    loaded = load(tmp_path / "model")
    assert loaded.config == decoder.config and loaded.plan == decoder.plan
    assert loaded.state_dict().keys() == decoder.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in decoder.state_dict().items())
    input_ids = tokens(2, 12)
    with torch.no_grad():
        assert torch.equal(loaded(input_ids), decoder(input_ids))


def test_config_round_trips_through_dict():
    config = DecoderConfig.from_hf(tiny_gemma().config)
    assert DecoderConfig.from_dict(config.to_dict()) == config
    assert config.sliding_windows == (7, 7, None, 7) and config.rope_thetas == (1e4, 1e4, 1e6, 1e4)
    with pytest.raises(ConfigError):
        config.replace(n_kv_heads=3)


# ---- (d) execution plans -----------------------------------------------------------------------------------


def test_identity_plan_reproduces_the_model():
    decoder = from_transformers(tiny_gemma())
    input_ids = tokens(2, 15)
    with torch.no_grad():
        default = decoder(input_ids)
        decoder.plan = ExecutionPlan.from_blocks([0, 1, 2, 3])
        assert torch.equal(decoder(input_ids), default)


def unrolled_copy(decoder: Decoder, blocks: list[int]) -> Decoder:
    """A plain decoder whose layer i is a *copy* of block blocks[i]: what a looped plan must compute."""
    unrolled = Decoder(decoder.config.with_layers(blocks))
    state = {k: v for k, v in decoder.state_dict().items() if not k.startswith("blocks.")}
    for depth, block in enumerate(blocks):
        for key, value in decoder.blocks[block].state_dict().items():
            state[f"blocks.{depth}.{key}"] = value
    unrolled.load_state_dict(state)
    return unrolled.eval()


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_looped_plan_equals_unrolled_copies(name):
    decoder = from_transformers(TINY[name]())
    blocks = [0, 1, 2] * 3 if name == "llama" else [0, 2, 0, 2, 1]  # Gemma: sliding and global blocks looped
    decoder.plan = ExecutionPlan.from_blocks(blocks)
    unrolled = unrolled_copy(decoder, blocks)
    input_ids = tokens(2, 18)
    with torch.no_grad():
        looped = decoder(input_ids)
        assert looped.shape == (2, 18, VOCAB) and torch.isfinite(looped).all()
        assert max_diff(looped, unrolled(input_ids)) <= TOL
        assert max_diff(cached_logits(decoder, input_ids, [10, 1, 1, 6]), looped) <= TOL


def test_shared_kv_plan_is_consistent_with_its_cache():
    """Recursive KV sharing: loop 2 attends to loop 1's keys/values, in a full forward and when decoding."""
    decoder = from_transformers(tiny_llama())
    decoder.plan = ExecutionPlan.cycle(3, n_loops=2, share_kv=True)
    assert decoder.plan.n_slots == 3
    input_ids = tokens(2, 14)
    with torch.no_grad():
        full = decoder(input_ids)
        assert max_diff(cached_logits(decoder, input_ids, [6] + [1] * 8), full) <= TOL
        decoder.plan = ExecutionPlan.cycle(3, n_loops=2)  # per-depth caches compute something else
        assert max_diff(decoder(input_ids), full) > 1e-3


def test_plan_validation():
    with pytest.raises(ConfigError, match="before any earlier step"):
        ExecutionPlan.from_list([{"block": 0, "slot": 0, "reuse_kv": True}])
    with pytest.raises(ConfigError, match="already written"):
        ExecutionPlan.from_list([{"block": 0, "slot": 0}, {"block": 1, "slot": 0}])
    decoder = from_transformers(tiny_llama())
    with pytest.raises(ConfigError, match="blocks"):
        decoder.plan = ExecutionPlan.from_blocks([0, 5])


def test_hidden_states_and_early_exit():
    decoder = from_transformers(tiny_llama())
    input_ids = tokens(2, 10)
    with torch.no_grad():
        logits, hidden = decoder(input_ids, return_hidden=True)
        assert len(hidden) == 3 and torch.equal(decoder.head(hidden[-1]), logits)
        exit_after_2 = decoder(input_ids, n_steps=2)
        assert torch.equal(exit_after_2, decoder.head(hidden[1]))
        assert max_diff(decoder(input_ids, last_only=True), logits[:, -1:]) <= 1e-6
