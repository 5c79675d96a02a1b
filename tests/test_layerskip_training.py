"""LayerSkip training (rlib.layerskip.training): layer dropout semantics, shared masks, the loss of Eq. 5-6, and a
run through rlib.train with gradient accumulation."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.layerskip.training import ExitProbe, LayerSkipDecoder, LayerSkipLoss
from rlib.model import Decoder, ExecutionPlan
from rlib.relaxed.early_exit import static_exit_losses
from rlib.train import TrainConfig, next_token_loss, train
from tests.test_looping import ids, tiny_model


def test_evaluation_and_zero_dropout_reproduce_the_decoder():
    decoder = tiny_model(4)
    batch = ids(3, 9)
    with torch.no_grad():
        reference = decoder(batch, return_hidden=True)
        wrapped = LayerSkipDecoder(decoder, p_max=0.5).eval()
        assert torch.equal(wrapped(batch), reference.logits)
        assert all(torch.equal(a, b) for a, b in zip(wrapped.hidden_states, reference.hidden_states))
        plain = LayerSkipDecoder(decoder, p_max=0.0).train()
        torch.testing.assert_close(plain(batch), reference.logits, rtol=1e-5, atol=1e-5)
    assert int(plain.training_forwards) == 1 and wrapped.kept is None


def test_dropped_samples_pass_unchanged_and_kept_ones_run_the_block():
    decoder = tiny_model(4)
    batch = ids(16, 7, seed=1)
    wrapped = LayerSkipDecoder(decoder, p_max=1.0, seed=3).train()  # rates 0, 0.26, 0.59, 1.0
    with torch.no_grad():
        wrapped(batch)
    kept = wrapped.kept
    assert bool(kept[0].all()) and not bool(kept[-1].any())  # D(0) = 0, D(L-1) = 1
    assert any(0 < int(k.sum()) < len(k) for k in kept[1:3])
    x = decoder.embed_tokens(batch)
    positions = torch.arange(7).expand(16, 7)
    ctx = decoder.context(positions, x.dtype, None, plain_causal=True)
    with torch.no_grad():
        for layer in range(4):
            full = decoder.run_step(layer, x, ctx)  # every sample through the block
            expected = torch.where(kept[layer][:, None, None], full, x)
            torch.testing.assert_close(wrapped.hidden_states[layer], expected, rtol=1e-5, atol=1e-5)
            x = wrapped.hidden_states[layer]


def test_masks_depend_on_seed_and_call_only_so_ranks_agree():
    batch = ids(32, 5)

    def masks(seed, calls):
        wrapped = LayerSkipDecoder(tiny_model(4), p_max=0.8, seed=seed).train()
        with torch.no_grad():
            for _ in range(calls):
                wrapped(batch)
        return torch.stack(wrapped.kept)

    assert torch.equal(masks(0, 2), masks(0, 2))
    assert not torch.equal(masks(0, 1), masks(0, 2)) and not torch.equal(masks(0, 1), masks(1, 1))


def test_the_step_counts_optimizer_steps_and_the_exp_schedule_starts_at_zero():
    wrapped = LayerSkipDecoder(tiny_model(4), p_max=0.5, time_schedule="exp", total_steps=10,
                               accumulation_steps=2).train()
    with torch.no_grad():
        for call in range(5):
            wrapped(ids(2, 4))
            assert wrapped.last_step == call // 2
    assert wrapped.rates(0) == [0.0] * 4 and wrapped.rates(9)[-1] == pytest.approx(0.5)


def test_the_loss_is_eq_5_and_zero_extra_without_exit_scale():
    decoder = tiny_model(4)
    batch = ids(4, 8, seed=2)
    wrapped = LayerSkipDecoder(decoder).eval()
    hook = LayerSkipLoss(wrapped, e_scale=1.0, curriculum="all")
    with torch.no_grad():
        logits = wrapped(batch)
        terms = hook.loss(0, batch, logits, wrapped)
        per_layer = [next_token_loss(decoder.head(h), batch) for h in wrapped.hidden_states]
    weights = hook.weights(0)
    assert weights == pytest.approx([0.0, 0.1, 0.3, 0.6])  # e(l) = l (l + 1) / 2, normalized
    total = hook.ce_weight(0) * next_token_loss(logits, batch) + terms["exit"]  # what the trainer optimizes
    assert total.item() == pytest.approx(sum(w * loss.item() for w, loss in zip(weights, per_layer)), rel=1e-5)
    none = LayerSkipLoss(wrapped, e_scale=0.0, curriculum="all")
    assert none.loss(0, batch, logits, wrapped)["exit"].item() == 0.0 and none.ce_weight(0) == 1.0


def test_plain_training_skips_the_zero_weight_ce_with_bit_identical_loss_and_gradients():
    """e_scale = 0 weighs the last layer 1: the hook adds nothing, instead of 0 x a full-vocabulary CE (its old form,
    written out here), and the optimized loss and every gradient stay equal to the last bit."""
    batch = ids(4, 8, seed=5)

    def step(skip: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        decoder = tiny_model(4)
        wrapped = LayerSkipDecoder(decoder, p_max=0.0).eval()
        hook = LayerSkipLoss(wrapped, e_scale=0.0, curriculum="all")
        logits = wrapped(batch)
        extra = hook.loss(0, batch, logits, wrapped)["exit"] if skip else 0.0 * next_token_loss(logits, batch)
        total = next_token_loss(logits, batch) + extra
        total.backward()
        return total.detach(), [p.grad.clone() for p in decoder.parameters() if p.grad is not None]

    (new, new_grads), (old, old_grads) = step(True), step(False)
    assert torch.equal(new, old) and len(new_grads) == len(old_grads) > 0
    assert all(torch.equal(a, b) for a, b in zip(new_grads, old_grads))


def test_bad_setups_fail_before_training():
    decoder = tiny_model(4)
    with pytest.raises(ConfigError, match="identity execution plan"):
        LayerSkipDecoder(Decoder(decoder.config, ExecutionPlan.cycle(2, 2)))
    with pytest.raises(ConfigError, match="p_max=2"):
        LayerSkipDecoder(decoder, p_max=2)
    with pytest.raises(ConfigError, match="'zigzag' unknown"):
        LayerSkipLoss(LayerSkipDecoder(decoder), e_scale=0.1, curriculum="zigzag")
    wrapped = LayerSkipDecoder(decoder, p_max=0.1, total_steps=5, accumulation_steps=1).train()
    hook = LayerSkipLoss(wrapped, e_scale=0.1)
    batch = ids(2, 5)
    logits = wrapped(batch)
    with pytest.raises(ConfigError, match="ran step 0 but the trainer is at step 3"):
        hook.loss(3, batch, logits, wrapped)


def test_training_with_accumulation_keeps_model_and_trainer_in_step(tmp_path):
    cfg = TrainConfig(lr=3e-3, schedule="constant", max_steps=4, batch_size=4, micro_batch_size=2, eval_every=0,
                      checkpoint_final=False, seed=0)
    wrapped = LayerSkipDecoder(tiny_model(4).train(), p_max=0.5, total_steps=cfg.max_steps,
                               accumulation_steps=cfg.accumulation_steps(1))
    hook = LayerSkipLoss(wrapped, e_scale=0.5, curriculum="rotational", rotation=2)
    result = train(wrapped, ids(8, 10, seed=4), cfg, tmp_path, hooks=[hook])
    assert int(wrapped.training_forwards) == 8 and wrapped.last_step == 3
    assert len(result.losses()) == 4


def test_exit_probe_records_held_out_nll_without_touching_the_schedule(tmp_path):
    cfg = TrainConfig(lr=3e-3, schedule="constant", max_steps=5, batch_size=4, micro_batch_size=2, eval_every=0,
                      checkpoint_final=False, seed=0)
    decoder = tiny_model(4).train()
    wrapped = LayerSkipDecoder(decoder, p_max=0.3, total_steps=5, accumulation_steps=2)
    heldout = ids(3, 8, seed=9)
    probe = ExitProbe(wrapped, heldout, exits=(2, 4), every=2)
    train(wrapped, ids(8, 10, seed=4), cfg, tmp_path, hooks=[LayerSkipLoss(wrapped, e_scale=0.5), probe])
    assert [r["step"] for r in probe.final(5)] == [0, 2, 4, 5] and int(wrapped.training_forwards) == 10
    decoder.eval()
    final = static_exit_losses(decoder, heldout, (1, 3), batch_size=8)
    assert probe.records[-1]["nll_exit_4"] == pytest.approx(final[3], rel=1e-4)
    with pytest.raises(ConfigError, match=r"exits \[5\]"):
        ExitProbe(wrapped, heldout, exits=(5,), every=1)
