"""Exit rules for continuous depth-wise batching: when may a token leave a looped model after loop j < B?

Relaxed Recursive Transformers Sec. 3.8 and App. K simulate throughput with an *oracle* (a token exits at the first
loop whose argmax equals the last loop's), which a server cannot know, and name confidence-based exits as the real
thing, whose extra computation the simulation leaves out. Two realizable rules, both calibrated on held-out text:

    SoftmaxExit      top-1 probability of the shared head's softmax after loop j >= threshold (CALM's "softmax
                     response"); costs the whole [V, D] head on every row that could exit, every pass
    ClassifierExit   a linear classifier on the final-normed hidden state after loop j predicts "loop j's argmax
                     equals the last loop's" (CALM's early-exit classifier, Schuster et al. 2022); costs D
                     multiply-adds per row, so the head runs only on rows that leave

`fit_exit_classifier` trains one logistic regression per intermediate loop on teacher-forced text; `calibrate` picks
each rule's threshold as the smallest whose exits agree with the last loop on at least `precision` of the calibration
tokens (the quality cost of exiting, stated up front); `exit_report` measures a rule on other text: the share of
tokens leaving at each loop, how often they agree with the full model, and the NLL of the mixed predictions.

    classifier = fit_exit_classifier(model, train_windows)
    rule = calibrate(classifier, model, calib_windows, precision=0.9)     # a ClassifierExit with its threshold
    LoopedProgram(model, exit_rule=rule)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from rlib.config import ConfigError
from rlib.model import Decoder

__all__ = ["ClassifierExit", "ExitRule", "SoftmaxExit", "TeacherForced", "calibrate", "decision_agreement",
           "exit_loops", "exit_report", "fit_exit_classifier", "teacher_forced"]


@dataclass(frozen=True)
class SoftmaxExit:
    """Exit after loop j when the head's top-1 probability reaches `threshold` (needs the head on every row)."""

    threshold: float
    needs_logits = True

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"SoftmaxExit threshold={self.threshold} must lie in (0, 1]")

    def score_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [b, V] -> top-1 probability [b]."""
        logits = logits.float()
        return (logits.amax(-1) - torch.logsumexp(logits, -1)).exp()

    def decide(self, model: Decoder, hidden: torch.Tensor, loops: torch.Tensor,
               logits: torch.Tensor | None = None) -> torch.Tensor:
        """hidden [b, D] after loop loops[r] (1-based), the head's logits [b, V] -> exit mask [b]."""
        return self.score_logits(logits if logits is not None else model.head(hidden)) >= self.threshold


@dataclass(frozen=True)
class ClassifierExit:
    """Exit after loop j when sigmoid(w_j . norm(h) + b_j) reaches `threshold`; weight [B - 1, D], bias [B - 1]."""

    weight: torch.Tensor
    bias: torch.Tensor
    threshold: float = 0.5
    needs_logits = False

    def __post_init__(self) -> None:
        if self.weight.ndim != 2 or self.bias.shape != self.weight.shape[:1]:
            raise ConfigError(f"ClassifierExit needs weight [B - 1, D] and bias [B - 1]; got {tuple(self.weight.shape)}"
                              f" and {tuple(self.bias.shape)}")
        if not 0 < self.threshold <= 1:
            raise ConfigError(f"ClassifierExit threshold={self.threshold} must lie in (0, 1]")

    def score(self, normed: torch.Tensor, loops: torch.Tensor) -> torch.Tensor:
        """normed [b, D] (final norm applied) after loops [b] (1-based, < B) -> P(agrees with the last loop) [b]."""
        w = self.weight.to(normed.device, normed.dtype)[loops - 1]  # [b, D]
        return torch.sigmoid((normed * w).sum(-1).float() + self.bias.to(normed.device)[loops - 1])

    def decide(self, model: Decoder, hidden: torch.Tensor, loops: torch.Tensor,
               logits: torch.Tensor | None = None) -> torch.Tensor:
        return self.score(model.final_norm(hidden), loops) >= self.threshold


ExitRule = SoftmaxExit | ClassifierExit


@dataclass
class TeacherForced:
    """Per intermediate loop and token of some windows: the final-normed hidden state [E-1, N, D], top-1 probability
    [E-1, N], whether the loop's argmax equals the last loop's [E-1, N], each loop's NLL of the next token [E, N]."""

    normed: torch.Tensor
    top_prob: torch.Tensor
    agrees: torch.Tensor
    nll: torch.Tensor

    @property
    def n_loops(self) -> int:
        return self.nll.shape[0]


@torch.no_grad()
def teacher_forced(model: Decoder, windows: torch.Tensor, n_loops: int, batch_size: int = 8) -> TeacherForced:
    """Run `windows` [N, T] through the model once, reading every loop's exit (positions predicting tokens 1..T-1)."""
    n_steps = len(model.plan.steps)
    if n_loops < 2 or n_steps % n_loops:
        raise ConfigError(f"n_loops={n_loops} must be >= 2 and divide the plan's {n_steps} steps")
    exits = [n_steps // n_loops * (j + 1) - 1 for j in range(n_loops)]  # the depth ending each loop
    device = next(model.parameters()).device
    normed, probs, agrees, nlls = [], [], [], []
    for start in range(0, len(windows), batch_size):
        batch = windows[start:start + batch_size].to(device)
        out = model(batch, return_hidden=True)
        target = batch[:, 1:].flatten()
        states = [model.final_norm(out.hidden_states[d][:, :-1]).flatten(0, 1) for d in exits]  # E x [b(T-1), D]
        logits = [model.head(out.hidden_states[d][:, :-1]).flatten(0, 1).float() for d in exits]
        last = logits[-1].argmax(-1)
        normed.append(torch.stack(states[:-1]).float().cpu())
        probs.append(torch.stack([SoftmaxExit(1.0).score_logits(lg) for lg in logits[:-1]]).cpu())
        agrees.append(torch.stack([lg.argmax(-1) == last for lg in logits[:-1]]).cpu())
        nlls.append(torch.stack([F.cross_entropy(lg, target, reduction="none") for lg in logits]).cpu())
    return TeacherForced(torch.cat(normed, 1), torch.cat(probs, 1), torch.cat(agrees, 1), torch.cat(nlls, 1))


def fit_exit_classifier(data: TeacherForced, steps: int = 200, weight_decay: float = 1e-4) -> ClassifierExit:
    """One logistic regression per intermediate loop on `data` (labels: the loop agrees with the last), full-batch
    L-BFGS with an L2 penalty; threshold 0.5 until `calibrate` sets one."""
    if data.n_loops < 2:
        raise ConfigError("an exit classifier needs a model with at least two loops")
    fits = [_logistic(data.normed[j], data.agrees[j].float(), steps, weight_decay) for j in range(data.n_loops - 1)]
    weights, biases = zip(*fits)
    return ClassifierExit(torch.stack(weights), torch.stack(biases))


def _logistic(x: torch.Tensor, y: torch.Tensor, steps: int, weight_decay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-penalized logistic regression of y [N] on x [N, D]: (weight [D], bias []) by full-batch L-BFGS."""
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(x @ w + b, y) + weight_decay * w.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()[0]


def _scores(rule: ExitRule, data: TeacherForced) -> torch.Tensor:
    """Each intermediate loop's exit score on the teacher-forced tokens: [E-1, N]."""
    if isinstance(rule, SoftmaxExit):
        return data.top_prob
    return torch.stack([rule.score(data.normed[j], torch.full((data.normed.shape[1],), j + 1, dtype=torch.long))
                        for j in range(data.n_loops - 1)])


def exit_loops(rule: ExitRule, data: TeacherForced, threshold: float | None = None) -> torch.Tensor:
    """The loop (1..E) each token leaves at under `rule` (or its rule at `threshold`): [N]."""
    fires = _scores(rule, data) >= (rule.threshold if threshold is None else threshold)  # [E-1, N]
    fires = torch.cat([fires, torch.ones_like(fires[:1])])  # the last loop always ends the token
    return fires.int().argmax(0) + 1


def calibrate(rule: ExitRule, data: TeacherForced, precision: float) -> ExitRule:
    """`rule` with the smallest threshold whose early exits agree with the last loop on >= `precision` of the exited
    calibration tokens (the exits' quality bar); the strictest threshold if none reaches it."""
    if not 0 < precision <= 1:
        raise ConfigError(f"precision={precision} must lie in (0, 1]")
    scores = _scores(rule, data)
    candidates = torch.unique(torch.quantile(scores.flatten().float(), torch.linspace(0, 1, 201)))
    candidates = candidates[(candidates > 0) & (candidates < 1)]
    upper = 1.0  # no candidate reached the precision: exit only on certainty
    for t in [*candidates.tolist(), upper]:
        loops = exit_loops(rule, data, t)
        early = loops < data.n_loops
        if not early.any():
            return replace(rule, threshold=t)
        if float(_agreement(loops, data)[early].float().mean()) >= precision:
            return replace(rule, threshold=t)
    return replace(rule, threshold=upper)


def exit_report(rule: ExitRule, data: TeacherForced) -> dict[str, float]:
    """On teacher-forced tokens: share leaving at each loop, agreement of the exited tokens with the last loop, mean
    exit loop, and the NLL of the mixed predictions against the last loop's (the quality cost of exiting)."""
    loops = exit_loops(rule, data)  # [N]
    early = loops < data.n_loops
    agree = _agreement(loops, data)
    mixed = data.nll.gather(0, (loops - 1)[None])[0]
    out = {f"exit_share_loop{j}": float((loops == j).float().mean()) for j in range(1, data.n_loops + 1)}
    out.update({"mean_exit_loop": float(loops.float().mean()),
                "exit_agreement": float(agree[early].float().mean()) if early.any() else float("nan"),
                "oracle_mean_exit_loop": float(_oracle(data).float().mean()),
                "nll_last_loop": float(data.nll[-1].mean()), "nll_with_exits": float(mixed.mean())})
    out["nll_cost"] = out["nll_with_exits"] - out["nll_last_loop"]
    return out


def _agreement(loops: torch.Tensor, data: TeacherForced) -> torch.Tensor:
    """Whether each token's answer at its exit loop [N] equals the last loop's (a last-loop exit reads loop E-1's
    flag, which only early exits use): [N] bool."""
    return data.agrees.gather(0, (loops.clamp(max=data.n_loops - 1) - 1)[None])[0]


def _oracle(data: TeacherForced) -> torch.Tensor:
    """The paper's oracle loop per token (first loop agreeing with the last): [N]."""
    agrees = torch.cat([data.agrees, torch.ones_like(data.agrees[:1])])
    return agrees.int().argmax(0) + 1


def decision_agreement(a: ExitRule, b: ExitRule, data: TeacherForced) -> float:
    """Share of tokens both rules send out at the same loop."""
    return float((exit_loops(a, data) == exit_loops(b, data)).float().mean())
