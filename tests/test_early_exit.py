"""rlib.relaxed.early_exit: exit coefficients (Sec. 3.7), the ExitModel/ExitLoss plumbing, static exits, and
training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlib import looping
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.relaxed import early_exit
from rlib.relaxed.early_exit import ExitLoss, ExitModel
from rlib.train import TrainConfig, train
from tests.test_looping import ids, tiny_model


def looped(n_loops=3):
    return looping.convert(tiny_model(6), Looping(n_loops))


def test_coefficients_follow_the_paper():
    assert early_exit.exit_coefficients("weighted", 2) == pytest.approx((1 / 3, 2 / 3))
    assert early_exit.exit_coefficients("weighted", 3) == pytest.approx((1 / 6, 2 / 6, 3 / 6))
    assert early_exit.exit_coefficients("aggressive", 3, 0.1) == (0.1, 0.1, 1.0)
    assert early_exit.exit_coefficients("final", 2) == (0.0, 1.0)
    with pytest.raises(ConfigError, match="exit schedule 'greedy' unknown"):
        early_exit.exit_coefficients("greedy", 2)
    with pytest.raises(ConfigError, match="coefficient 2"):
        early_exit.exit_coefficients("aggressive", 2, 2)


def test_loop_exits_and_bad_exits():
    model = looped(3)  # 6 steps over 2 blocks
    assert early_exit.loop_exits(model) == (1, 3, 5)
    with pytest.raises(ConfigError, match="must be increasing plan depths ending at the last step"):
        ExitModel(model, (1, 3))


def test_exit_model_returns_the_decoders_logits_and_each_exit_is_a_static_exit():
    model = looped(3)
    wrapped = ExitModel(model, early_exit.loop_exits(model))
    tokens = ids()
    with torch.no_grad():
        final = wrapped(tokens)
        torch.testing.assert_close(final, model(tokens), atol=0, rtol=0)
        for depth, logits in zip(wrapped.exits, wrapped.exit_logits):
            torch.testing.assert_close(logits, model(tokens, n_steps=depth + 1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("schedule,kd", [("weighted", False), ("aggressive", True)])
def test_total_loss_is_the_papers_formula(schedule, kd):
    model = looped(2)
    wrapped = ExitModel(model, early_exit.loop_exits(model))
    tokens = ids()
    final = wrapped(tokens)
    ce = lambda lg: F.cross_entropy(lg[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())  # noqa: E731
    hook = ExitLoss(wrapped, schedule, coef=0.1, kd=kd)
    total = ce(final) + sum(hook.loss(0, tokens, final, wrapped).values())
    first, last = wrapped.exit_logits
    if schedule == "weighted":
        expect = ce(first) / 3 + 2 * ce(last) / 3
    else:
        kl = F.kl_div(F.log_softmax(first, -1).flatten(0, 1), F.log_softmax(last.detach(), -1).flatten(0, 1),
                      log_target=True, reduction="batchmean")
        expect = ce(last) + 0.1 * (ce(first) + kl)
    torch.testing.assert_close(total, expect, atol=1e-5, rtol=1e-5)


def test_static_exit_losses_last_exit_is_the_models_nll():
    model = looped(2)
    windows = ids(4, 11, seed=3)
    losses = early_exit.static_exit_losses(model, windows, early_exit.loop_exits(model), batch_size=3)
    with torch.no_grad():
        logits = model(windows)
    nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), windows[:, 1:].flatten()).item()
    assert losses[5] == pytest.approx(nll, rel=1e-5)
    assert set(losses) == {2, 5}


def test_exit_training_lowers_the_first_loop_loss_more_than_plain_training(tmp_path):
    windows = ids(8, 12, seed=5)  # a tiny fixed set, memorized within a few dozen steps
    cfg = TrainConfig(lr=3e-3, schedule="constant", max_steps=25, batch_size=4, micro_batch_size=4,
                      eval_every=0, checkpoint_final=False, seed=0)
    first_loop = {}
    for schedule in ("final", "aggressive"):
        model = looped(2)
        wrapped = ExitModel(model, early_exit.loop_exits(model))
        train(wrapped, windows, cfg, tmp_path / schedule, hooks=[ExitLoss(wrapped, schedule, coef=0.3)])
        first_loop[schedule] = early_exit.static_exit_losses(model, windows, wrapped.exits)[2]
    assert first_loop["aggressive"] < first_loop["final"] - 0.05, first_loop


def test_oracle_and_confidence_exit_loops():
    top = torch.tensor([[[5, 1, 2]], [[5, 3, 2]], [[5, 3, 4]]])  # [E=3, N=1, T=3]
    assert early_exit.oracle_exit_loops(top).tolist() == [[1, 2, 3]]
    prob = torch.tensor([[[0.95, 0.2, 0.1]], [[0.5, 0.9, 0.2]], [[0.1, 0.1, 0.3]]])
    assert early_exit.confidence_exit_loops(prob, 0.9).tolist() == [[1, 2, 3]]
    model = looped(3)
    top, prob = early_exit.exit_predictions(model, ids(3, 9), early_exit.loop_exits(model), batch_size=2)
    assert top.shape == prob.shape == (3, 3, 9)
    with torch.no_grad():
        final = model(ids(3, 9)).argmax(-1)
    assert torch.equal(top[-1], final)


def test_exit_head_starts_as_the_head_and_training_it_moves_only_the_early_exits(tmp_path):
    """Table J.1's Freeze row: a frozen model whose intermediate exits read through a head LoRA."""
    model = looped(2)
    model.requires_grad_(False)
    head = early_exit.ExitHead(model, rank=4, seed=0)
    wrapped = ExitModel(model, early_exit.loop_exits(model), head)
    tokens = ids()
    with torch.no_grad():  # B = 0: the exit head is the decoder's head
        wrapped(tokens)
        torch.testing.assert_close(wrapped.exit_logits[0], model(tokens, n_steps=wrapped.exits[0] + 1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    windows = ids(8, 12, seed=5)
    plain = early_exit.static_exit_losses(model, windows, wrapped.exits)
    cfg = TrainConfig(lr=3e-3, schedule="constant", max_steps=15, batch_size=4, micro_batch_size=4, eval_every=0,
                      checkpoint_final=False, seed=0)
    train(wrapped, windows, cfg, tmp_path / "freeze", hooks=[ExitLoss(wrapped, "aggressive", coef=0.1)])
    for name, value in model.state_dict().items():  # every weight of the model stays frozen
        assert torch.equal(value, before[name]), name
    assert head.lora.lora_b.abs().sum() > 0
    trained = early_exit.static_exit_losses(model, windows, wrapped.exits, exit_head=head)
    assert trained[wrapped.exits[-1]] == pytest.approx(plain[wrapped.exits[-1]], rel=1e-6)  # the final exit: as is
    assert trained[wrapped.exits[0]] < plain[wrapped.exits[0]] - 0.05, (plain, trained)
