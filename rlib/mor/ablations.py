"""Chapter 03's ablation rows as named changes of a `MoRSpec` (Mixture-of-Recursions, paper 001).

    ROUTER_ABLATIONS  Sec. 4.2, Table 4, App. F.1-F.3, Tables 10 and 11: one router design changed against the final
                      expert-choice or token-choice design (`MoRSpec.expert` / `MoRSpec.token`), at the ablation budget
    GATE_ABLATIONS    ours (issue 24 item 3), at the isoFLOP budget, every seed: `ec_alpha1` (the gate scaled by 1, not
                      0.1), `ec_replace` (x <- f(x): the router only selects), `rec_gated` (every token at every
                      recursion, x <- x + g f(x): the Recursive baseline with MoR's gate)
    RELAXATIONS       App. G.2, Table 13: the Recursive Middle-Cycle model relaxed, with recursion-wise caching or KV
                      sharing

Every run's cache key holds its whole `MoRSpec` (`rlib.mor.config.MoRVariant`), so this module is deliberately not
among the runs' `CODE_MODULES`: correcting one row re-keys that row's run only, not the chapter's grid
(tests/test_mor_config.py checks that a changed row changes its key).
"""

from __future__ import annotations

from typing import Any

from rlib.config import ConfigError
from rlib.mor.spec import MoRSpec

__all__ = ["GATE_ABLATIONS", "RELAXATIONS", "ROUTER_ABLATIONS", "gate_ablation_spec"]


# name -> (routing, changes to that routing's final design)
ROUTER_ABLATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "ec_aux_router": ("expert", dict(aux="router")),
    "ec_tanh": ("expert", dict(router_func="tanh")),
    "ec_mlp": ("expert", dict(router_arch="mlp")),
    "ec_wide_mlp": ("expert", dict(router_arch="wide_mlp")),
    "ec_alpha1": ("expert", dict(alpha=1.0)),
    "ec_zloss": ("expert", dict(z_coef=1e-3)),  # the paper gives no expert-choice z-loss coefficient: the book's
    "ec_no_aux": ("expert", dict(aux="none", aux_coef=0.0)),
    "tc_loss_free": ("token", dict(balance="loss_free", bias_rate=1e-3)),
    "tc_mlp": ("token", dict(router_arch="mlp")),
    "tc_no_z": ("token", dict(z_coef=0.0)),
    # Tables 4 / 11 ran sigmoid only with loss-free balancing (u 0.01 or 0.001, alpha 0.1 or 1.0); this is their
    # u 0.001, alpha 0.1 cell, compared with tc_loss_free (softmax, alpha 1.0, the same u): 2.9165 vs 2.9081
    "tc_sigmoid": ("token", dict(router_func="sigmoid", alpha=0.1, balance="loss_free", bias_rate=1e-3)),
}


GATE_ABLATIONS = ("ec_alpha1", "ec_replace", "rec_gated")


# name -> (kv, relax). DoRA, the paper's fourth relaxation, has no adapter in the book (rlib.mor.relaxation)
RELAXATIONS: dict[str, tuple[str, str]] = {
    "enc": ("cache", "enc"), "lora": ("cache", "lora"), "adapt_p": ("cache", "adapt_prompt"),
    "adapt_p_share": ("share", "adapt_prompt")}


def gate_ablation_spec(name: str, n_recursions: int) -> MoRSpec:
    """The MoR-EC variant of a gate ablation (GATE_ABLATIONS; module docstring)."""
    if name == "ec_alpha1":
        return MoRSpec.expert(n_recursions, alpha=1.0)
    if name == "ec_replace":  # the router gets no language-model gradient: only its aux loss trains it
        return MoRSpec.expert(n_recursions, gating="replace")
    if name == "rec_gated":  # capacity 1 at every step: no routing, MoR's gate on every token (no aux: nothing to fix)
        return MoRSpec.expert(n_recursions, capacities=(1.0,) * n_recursions, aux="none", aux_coef=0.0)
    raise ConfigError(f"gate ablation {name!r} unknown; choose from {list(GATE_ABLATIONS)}")
