"""`MoRSpec`: every choice of a Mixture-of-Recursions model (paper 001, Sec. 2.2, App. A, Tables 4, 10, 11, 12).

    routing   "expert"  per-step routers keep the top-k_r tokens, k_r = c_r T, among those kept at step r - 1
                        (hierarchical filtering); update x <- x + g f(x) for the kept tokens (Sec. 2.2.1, eq. 2.1)
              "token"   one router after the first layer picks each token's depth i in 1..Nr (softmax, top-1); the
                        token runs i recursions (Sec. 2.2.1, eq. 2.2)
              "none"    the fixed-depth Recursive baseline: every token runs all Nr recursions, x <- f(x)
    kv        "cache"   recursion-wise caching: recursion r attends only among the tokens active at r and caches
                        only their keys/values
              "share"   recursive KV sharing: keys/values are computed at recursion 1 (all tokens) and reused by
                        every deeper recursion; queries are the active tokens only
    sharing   "middle_cycle" (the paper's choice: unique first and last layers around a cycled block) or "cycle";
              the Recursive baseline also takes "sequence" and "middle_sequence" (Table 8)

Expert-choice options (Table 10): router_func sigmoid | tanh | none, alpha (the scale after the function: 0.1),
aux "loss" (BCE of the router's own logits against its top-k choice, coefficient 0.001; the paper's pick) |
"router" (a separate router on detached states, trained only to predict the top-k choice) | "none",
z_coef (router z-loss), capacities (default (Nr - r + 1) / Nr), gating "weighted" (x + g f(x), the paper's and
the official code's rule, where f is the block's output including its residual) | "replace" (x <- f(x): the router
only selects, so capacity 1 at every step is exactly the Recursive model).

Token-choice options (Table 11): router_func softmax | sigmoid, alpha (1.0), balance "loss" (Switch-style
f_i P_i, coefficient 0.1) | "loss_free" (a non-trained bias on the top-1 choice, moved by bias_rate sign(mean load
- load) after every training forward) | "none", z_coef (the paper's final design: 1e-3; the released config:
1e-5). token_gating "final" is what the official code trained: intermediate recursions are plain f, and the output
is H1 + g_i f^(i)(H1); "every" is eq. 2.2 as printed, which also scales every intermediate state by g.

Relaxing the Recursive baseline's sharing (App. G.2, Table 13; `rlib.mor.relaxation`): relax "none" | "enc" (a
trainable vector per recursion times its output) | "lora" (rank `relax_rank` on Q and V per recursion depth) |
"adapt_prompt" (`relax_len` gated prompt vectors per recursion depth).

Router architectures (Tables 4, 10, 11): "linear" (d -> out, no bias), "mlp" (d -> 2d -> GELU -> out),
"wide_mlp" (d -> 4d -> GELU -> out, as the paper describes it; the released code's "wide" MLP is the 2d one).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlib.config import Checked, ConfigError

__all__ = ["AUX", "BALANCES", "GATINGS", "KV_MODES", "RELAXES", "ROUTER_ARCHS", "ROUTINGS", "MoRSpec"]

ROUTINGS = ("expert", "token", "none")
KV_MODES = ("cache", "share")
ROUTER_ARCHS = ("linear", "mlp", "wide_mlp")
EXPERT_FUNCS = ("sigmoid", "tanh", "none")
TOKEN_FUNCS = ("softmax", "sigmoid")
GATINGS = ("weighted", "replace")
TOKEN_GATINGS = ("final", "every")
AUX = ("loss", "router", "none")
BALANCES = ("loss", "loss_free", "none")
MOR_SHARINGS = ("middle_cycle", "cycle")
RELAXES = ("none", "enc", "lora", "adapt_prompt")


@dataclass(frozen=True)
class MoRSpec(Checked):
    n_recursions: int = 3
    routing: str = "expert"
    kv: str = "cache"
    sharing: str = "middle_cycle"
    router_arch: str = "linear"
    router_func: str = "sigmoid"
    alpha: float = 0.1
    temperature: float = 1.0
    capacities: tuple[float, ...] | None = None  # expert-choice; None = (Nr - r + 1) / Nr
    gating: str = "weighted"  # expert-choice update rule
    aux: str = "loss"  # expert-choice causality fix
    aux_coef: float = 0.001
    z_coef: float = 0.0
    balance: str = "loss"  # token-choice load balancing
    balance_coef: float = 0.1
    bias_rate: float = 0.001  # loss-free balancing step u
    token_gating: str = "final"
    relax: str = "none"  # Table 13's relaxation of the Recursive baseline (rlib.mor.relaxation)
    relax_rank: int = 0  # LoRA rank ("lora")
    relax_len: int = 0  # prompt vectors per recursion depth ("adapt_prompt")

    @classmethod
    def expert(cls, n_recursions: int = 3, **changes) -> MoRSpec:
        """The paper's final expert-choice design: linear router, sigmoid, alpha 0.1, BCE aux loss 0.001."""
        return cls(n_recursions=n_recursions, **changes)

    @classmethod
    def token(cls, n_recursions: int = 3, **changes) -> MoRSpec:
        """The paper's final token-choice design: linear router, softmax, alpha 1, balancing loss 0.1, z-loss 1e-3."""
        base = dict(routing="token", router_func="softmax", alpha=1.0, aux="none", aux_coef=0.0, z_coef=1e-3)
        return cls(n_recursions=n_recursions, **{**base, **changes})

    @classmethod
    def recursive(cls, n_recursions: int = 3, **changes) -> MoRSpec:
        """The fixed-depth Recursive baseline (every token runs every recursion)."""
        base = dict(routing="none", aux="none", aux_coef=0.0)
        return cls(n_recursions=n_recursions, **{**base, **changes})

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacities", None if self.capacities is None else tuple(self.capacities))
        checks = [
            ("n_recursions", self.n_recursions >= 1, "an integer >= 1"),
            ("routing", self.routing in ROUTINGS, f"one of {ROUTINGS}"),
            ("kv", self.kv in KV_MODES, f"one of {KV_MODES}"),
            ("router_arch", self.router_arch in ROUTER_ARCHS, f"one of {ROUTER_ARCHS}"),
            ("gating", self.gating in GATINGS, f"one of {GATINGS}"),
            ("token_gating", self.token_gating in TOKEN_GATINGS, f"one of {TOKEN_GATINGS}"),
            ("aux", self.aux in AUX, f"one of {AUX}"),
            ("balance", self.balance in BALANCES, f"one of {BALANCES}"),
            ("alpha", self.alpha > 0, "a positive scale, e.g. 0.1 (expert) or 1.0 (token)"),
            ("temperature", self.temperature > 0, "a positive temperature, e.g. 1.0"),
            ("aux_coef", self.aux_coef >= 0, "a coefficient >= 0"),
            ("z_coef", self.z_coef >= 0, "a coefficient >= 0"),
            ("balance_coef", self.balance_coef >= 0, "a coefficient >= 0"),
            ("bias_rate", self.bias_rate >= 0, "a step >= 0"),
            ("relax", self.relax in RELAXES and (self.relax == "none" or self.routing == "none"),
             f"one of {RELAXES}; Table 13 relaxes the Recursive baseline only (routing 'none')"),
            ("relax_rank", self.relax != "lora" or self.relax_rank >= 1, "a LoRA rank >= 1 with relax='lora'"),
            ("relax_len", self.relax != "adapt_prompt" or self.relax_len >= 1,
             "a prompt length >= 1 with relax='adapt_prompt'"),
        ]
        if self.routing == "expert":
            checks.append(("router_func", self.router_func in EXPERT_FUNCS, f"one of {EXPERT_FUNCS} for expert-choice"))
        if self.routing == "token":
            checks.append(("router_func", self.router_func in TOKEN_FUNCS, f"one of {TOKEN_FUNCS} for token-choice"))
        if self.routing != "none":
            checks.append(("sharing", self.sharing in MOR_SHARINGS,
                           f"one of {MOR_SHARINGS} for a routed model (the Recursive baseline takes any)"))
        for name, ok, fix in checks:
            if not ok:
                raise ConfigError(f"MoRSpec.{name}={getattr(self, name)!r}: use {fix}")
        if self.capacities is not None:
            caps = self.capacities
            if len(caps) != self.n_recursions or not all(0 < c <= 1 for c in caps) or list(caps) != sorted(caps)[::-1]:
                raise ConfigError(f"MoRSpec.capacities={caps}: give {self.n_recursions} non-increasing values "
                                  "in (0, 1]")

    def capacity(self, step: int) -> float:
        """c_r of recursion `step` (0-based): the share of the sequence an expert-choice step keeps."""
        if self.capacities is not None:
            return self.capacities[step]
        return (self.n_recursions - step) / self.n_recursions

    @property
    def routed(self) -> bool:
        return self.routing != "none"

    def replace(self, **changes) -> MoRSpec:
        return dataclasses.replace(self, **changes)

    def label(self) -> str:
        if self.routing == "none":
            relaxed = {"none": "", "enc": ", Enc", "lora": f", LoRA r{self.relax_rank}",
                       "adapt_prompt": f", Adapt-P {self.relax_len}"}[self.relax]
            return (f"Recursive-{self.n_recursions} ({self.sharing}{', KV share' if self.kv == 'share' else ''}"
                    f"{relaxed})")
        kind = "EC" if self.routing == "expert" else "TC"
        return f"MoR-{self.n_recursions} {kind}{' KV share' if self.kv == 'share' else ''}"
