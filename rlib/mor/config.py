"""Chapter 03's settings: the typed configs per profile and the runs they define.

Mixture-of-Recursions (paper 001). Every from-scratch model has the same widths (SmolLM-like, scaled down by the
profile) and a vanilla depth L. A run is a `MoRVariant`: a vanilla model, or a `MoRSpec` (MoR expert- or
token-choice, or the fixed-depth Recursive baseline) with its sharing strategy and KV strategy, trained for one of
three budgets:

    "flops"     the isoFLOP budget `cfg.budget` in the paper's forward-FLOPs convention (`rlib.mor.flops`): a
                model that spends fewer FLOPs per token trains on more tokens (Table 3's isoFLOP rows, Fig. 3)
    "tokens"    as many tokens as vanilla gets at that budget (Table 3's fixed-token rows)
    "ablation"  `cfg.ablation_tokens` tokens, the same for every model (Tables 4/8/10/11/12 train on 10B tokens)

The ablation rows (Tables 4/10/11's routers, the gate ablation, Table 13's relaxations) are named changes of a
`MoRSpec`, defined in `rlib.mor.ablations`.

`BudgetSweepConfig` adds Fig. 3's budget axis; `UptrainConfig` / `UptrainRun` the up-training of a pretrained
checkpoint with each sharing strategy (Sec. 3.2, App. D.2, Table 9).

The cpu profile keeps the chapter within issue 27's 40 minutes on 2 cores: Table 3's isoFLOP grid and Fig. 3 at two
budgets. Its `cpu-long` preset extends it with the studies that do not fit (every run at the ablation budget: Tables 4,
8, 10-12 and Fig. 5b / 9; Fig. 3's middle budget; the gate ablation; Tables 9 and 13; Fig. 5a). The fields that only
add runs are `UNKEYED_FIELDS`: cpu-long's grid reads cpu's runs back under the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlib import looping
from rlib.config import ConfigError, Preset
from rlib.looping import Looping
from rlib.model import Decoder, DecoderConfig
from rlib.model.convert import empty_decoder
from rlib.mor.ablations import GATE_ABLATIONS, RELAXATIONS, ROUTER_ABLATIONS, gate_ablation_spec
from rlib.mor.spec import MoRSpec
from rlib.precision import resolve as resolve_precision
from rlib.train import TrainConfig
from rlib.vocab import ScratchText

__all__ = ["BUDGETS", "GATE_ABLATIONS", "RELAXATIONS", "ROUTER_ABLATIONS", "gate_ablation_spec", "BudgetSweepConfig",
           "MoRConfig", "MoRVariant", "UptrainConfig", "UptrainRun", "unrolled_layers", "uptrain_runs", "variants"]


BUDGETS = ("flops", "tokens", "ablation")


@dataclass(frozen=True)
class MoRConfig(Preset):
    """Chapter 03's settings per profile."""

    tokenizer: str  # the model asset whose tokenizer reads the corpus
    corpus: str
    vocab_size: int  # compact vocabulary size (0 = the tokenizer's own)
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    n_layers: int  # vanilla depth L (Middle-Cycle with Nr recursions: 1 + (L - 2) / Nr + 1 unique layers)
    seq_len: int
    n_recursions: int  # Nr of the main comparison (the paper: 3)
    extra_recursions: tuple[int, ...]  # further Nr for MoR-EC and Recursive at the isoFLOP budget (Table 3)
    budget: float  # forward FLOPs of the isoFLOP runs (paper convention)
    ablation_tokens: int  # tokens of every ablation run
    batch_size: int
    micro_batch_size: int
    lr: float
    warmup_frac: float
    seeds: tuple[int, ...]  # seeds of the main isoFLOP comparison
    router_ablations: tuple[str, ...]  # names in ROUTER_ABLATIONS
    sharings: tuple[str, ...]  # Recursive-Nr sharing strategies compared at the ablation budget (Table 8)
    kv_share_rows: bool  # Table 12: Recursive and MoR-TC with recursive KV sharing at the ablation budget
    val_windows: int
    eval_windows: int
    evals_per_run: int  # validation points per run (the loss-vs-compute curves of Fig. 3)
    decode_windows: int  # windows decoded token by token for the causal-routing agreement
    precision: str  # "auto" (bf16 where the machine computes it natively, else fp32), "bf16" or "no" (rlib.precision)
    head_dim: int = 64
    gate_ablations: tuple[str, ...] = ()  # GATE_ABLATIONS at the isoFLOP budget, every seed (ours)
    router_rows: bool = True  # Tables 4/10/11's final designs (MoR-EC, MoR-TC at the ablation budget), Fig. 5b / 9
    relaxations: tuple[str, ...] = ()  # names in RELAXATIONS at the ablation budget (Table 13)
    relax_rank: int = 16  # Table 13's LoRA rank, scaled with width: the paper's 64 at d 960 is ~1/15 of d
    relax_len: int = 32  # Table 13's adaptation prompt, scaled with context: the paper's 256 with 2K is 1/8 of it
    fewshot_items: int = 0  # items of book_nextline and book_cloze each main run's first seed is scored on (Table 3)
    # Sec. 3.1's training time and peak memory of MoR-2 vs vanilla (rlib.mor.train_cost): rounds of one fresh
    # process per model, each `cost_warmup` untimed and `cost_steps` timed optimizer steps of the chapter's recipe
    cost_rounds: int = 3
    cost_warmup: int = 2
    cost_steps: int = 4

    # fields that only choose which runs exist (each `MoRVariant` carries its spec, budget, seed and tag) or set up a
    # study over trained models: left out of the run cache's key (Preset.grid_context)
    UNKEYED_FIELDS = ("extra_recursions", "seeds", "router_ablations", "sharings", "kv_share_rows", "gate_ablations",
                      "router_rows", "decode_windows", "relaxations", "relax_rank", "relax_len", "cost_rounds",
                      "cost_warmup", "cost_steps")

    PRESETS = {
        "smoke": dict(
            tokenizer="smollm2-135m", corpus="shakespeare", vocab_size=512, d_model=64, n_heads=2, n_kv_heads=1,
            d_ffn=128, n_layers=8, seq_len=32, n_recursions=3, extra_recursions=(), budget=4e8, ablation_tokens=256,
            batch_size=4, micro_batch_size=4, lr=3e-3, warmup_frac=0.1, seeds=(0,), router_ablations=("ec_aux_router",),
            sharings=("cycle", "sequence"), kv_share_rows=False, val_windows=4, eval_windows=4, evals_per_run=2,
            decode_windows=1, precision="auto", head_dim=32, gate_ablations=("ec_replace", "rec_gated"),
            relaxations=("enc", "lora", "adapt_p"), relax_rank=4, relax_len=4, fewshot_items=4, cost_warmup=1,
            cost_steps=1),
        # <= 40 min on 2 cores: d 256, L 14, 8192-id vocabulary, ~0.2-0.3 M tokens per run; the isoFLOP grid of
        # Table 3 (13 runs). Every run at the ablation budget (Tables 4, 8, 10-12, Fig. 5b / 9) is cpu-long's (below):
        # on the reference machine the 23-run grid took 57 min (2026-11-28), its 10 ablation runs 16.3 min of it
        "cpu": dict(
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=8192, d_model=256, n_heads=4,
            n_kv_heads=2, d_ffn=768, n_layers=14, seq_len=256, n_recursions=3, extra_recursions=(2,), budget=5e12,
            ablation_tokens=160_000, batch_size=16, micro_batch_size=16, lr=3e-3, warmup_frac=0.05, seeds=(0, 1),
            router_ablations=(), sharings=(), kv_share_rows=False, router_rows=False, val_windows=32,
            eval_windows=64, evals_per_run=6, decode_windows=8, precision="auto", gate_ablations=(),
            fewshot_items=200),
        "gpu": dict(
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=0, d_model=512, n_heads=8, n_kv_heads=4,
            d_ffn=1536, n_layers=14, seq_len=512, n_recursions=3, extra_recursions=(2, 4), budget=2e15,
            ablation_tokens=50_000_000, batch_size=64, micro_batch_size=32, lr=3e-3, warmup_frac=0.05,
            seeds=(0, 1, 2), router_ablations=tuple(ROUTER_ABLATIONS),
            sharings=looping.SHARINGS, kv_share_rows=True, val_windows=128,
            eval_windows=256, evals_per_run=10, decode_windows=32, precision="auto", gate_ablations=GATE_ABLATIONS,
            relaxations=tuple(RELAXATIONS), relax_rank=32, relax_len=64, fewshot_items=200),
    }
    # cpu-long: the cpu grid (read back from cpu's run folders) plus the ablation budget's grid (Tables 8 and 12's
    # sharing and KV-sharing rows, the two final router designs: 10 runs), every router row a Table 4/10/11 claim
    # reads (10), the gate ablation at every seed (6) and Table 13's relaxations (4): 30 runs, ~1.5-2 min each at
    # the ablation budget on 2 cores (the gate rows at the isoFLOP budget take longer)
    PRESETS["cpu-long"] = {**PRESETS["cpu"], "gate_ablations": GATE_ABLATIONS, "router_rows": True,
                           "sharings": looping.SHARINGS, "kv_share_rows": True,
                           "router_ablations": ("ec_aux_router", "ec_tanh", "ec_alpha1", "ec_mlp", "ec_wide_mlp",
                                                "ec_zloss", "tc_loss_free", "tc_mlp", "tc_no_z", "tc_sigmoid"),
                           "relaxations": tuple(RELAXATIONS)}

    def __post_init__(self) -> None:
        unknown = [a for a in self.router_ablations if a not in ROUTER_ABLATIONS]
        if unknown:
            raise ConfigError(f"router_ablations {unknown} unknown; choose from {list(ROUTER_ABLATIONS)}")
        if self.router_ablations and not self.router_rows:
            raise ConfigError(f"router_ablations {list(self.router_ablations)} need their reference rows: set "
                              "router_rows=True (the final designs at the ablation budget)")
        object.__setattr__(self, "gate_ablations", tuple(self.gate_ablations))
        unknown = [a for a in self.gate_ablations if a not in GATE_ABLATIONS]
        if unknown:
            raise ConfigError(f"gate_ablations {unknown} unknown; choose from {list(GATE_ABLATIONS)}")
        object.__setattr__(self, "relaxations", tuple(self.relaxations))
        unknown = [a for a in self.relaxations if a not in RELAXATIONS]
        if unknown:
            raise ConfigError(f"relaxations {unknown} unknown; choose from {list(RELAXATIONS)}")
        if self.cost_rounds < 0 or self.cost_warmup < 1 or self.cost_steps < 1:
            raise ConfigError(f"cost_rounds={self.cost_rounds}, cost_warmup={self.cost_warmup}, cost_steps="
                              f"{self.cost_steps}: rounds must be >= 0 (0 = not measured), warmup and steps >= 1 "
                              "(the first step allocates AdamW's state and is never timed)")
        if self.fewshot_items < 0:
            raise ConfigError(f"fewshot_items={self.fewshot_items} must be >= 0 (0 = no few-shot column)")
        if self.relax_rank < 1 or self.relax_len < 1:
            raise ConfigError(f"relax_rank={self.relax_rank} and relax_len={self.relax_len} must be >= 1")
        for nr in (self.n_recursions, *self.extra_recursions):
            if (self.n_layers - 2) % nr:
                raise ConfigError(f"n_layers={self.n_layers}: Middle-Cycle needs (L - 2) divisible by Nr={nr}")
        if self.d_model != self.n_heads * self.head_dim:
            raise ConfigError(f"d_model={self.d_model} must equal n_heads * head_dim = {self.n_heads * self.head_dim}")
        object.__setattr__(self, "precision", resolve_precision(self.precision))  # "auto" -> bf16 or fp32 here

    def base_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(
            family="llama", vocab_size=vocab_size, d_model=self.d_model, n_layers=1, n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, d_ffn=self.d_ffn, activation="silu", norm_eps=1e-5,
            norm_kind="rms", post_norms=False, embed_scale=1.0, qk_norm=False, rope_thetas=(1e4,),
            sliding_windows=(None,), attn_scale=self.head_dim**-0.5, tie_embeddings=True)

    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def text(self) -> ScratchText:
        """The corpus, tokenizer, compact vocabulary and window length every run of the grid reads."""
        return ScratchText(self.corpus, self.tokenizer, self.vocab_size, self.seq_len)


@dataclass(frozen=True)
class MoRVariant:
    spec: MoRSpec | None = None  # None = vanilla
    budget: str = "flops"
    seed: int = 0
    tag: str = ""  # the ablation's name, if any

    def __post_init__(self) -> None:
        if self.budget not in BUDGETS:
            raise ConfigError(f"budget={self.budget!r}: choose from {BUDGETS}")

    @property
    def name(self) -> str:
        s = self.spec
        if s is None:
            base = "vanilla"
        else:
            kind = {"expert": "ec", "token": "tc", "none": "rec"}[s.routing]
            base = f"{kind}{s.n_recursions}-{s.sharing.replace('_', '')}" + ("-share" if s.kv == "share" else "")
        tag = f"-{self.tag}" if self.tag else ""
        return f"{base}{tag}-{self.budget}-s{self.seed}"

    @property
    def label(self) -> str:
        return "Vanilla" if self.spec is None else self.spec.label() + (f" [{self.tag}]" if self.tag else "")


def unrolled_layers(spec: MoRSpec | None, n_layers: int) -> int:
    """The unrolled depth closest to L that the spec's sharing divides (as the paper adds or drops layers)."""
    if spec is None:
        return n_layers
    nr = spec.n_recursions
    if spec.sharing.startswith("middle"):
        return 2 + nr * max(1, round((n_layers - 2) / nr))
    return nr * max(1, round(n_layers / nr))


def variants(cfg: MoRConfig) -> list[MoRVariant]:
    """Every training run of the chapter, main comparison first."""
    nr = cfg.n_recursions
    runs = []
    for seed in cfg.seeds:
        runs += [MoRVariant(None, "flops", seed), MoRVariant(MoRSpec.recursive(nr), "flops", seed),
                 MoRVariant(MoRSpec.expert(nr), "flops", seed), MoRVariant(MoRSpec.token(nr), "flops", seed)]
    first = cfg.seeds[0]
    runs.append(MoRVariant(MoRSpec.expert(nr, kv="share"), "flops", first))
    runs.append(MoRVariant(MoRSpec.expert(nr), "tokens", first))
    for extra in cfg.extra_recursions:
        runs += [MoRVariant(MoRSpec.recursive(extra), "flops", first),
                 MoRVariant(MoRSpec.expert(extra), "flops", first), MoRVariant(MoRSpec.expert(extra), "tokens", first)]
    if cfg.router_rows:  # the reference rows of the ablation tables
        runs.append(MoRVariant(MoRSpec.expert(nr), "ablation", first))
        runs.append(MoRVariant(MoRSpec.token(nr), "ablation", first))
    for name in cfg.router_ablations:
        routing, changes = ROUTER_ABLATIONS[name]
        spec = (MoRSpec.expert if routing == "expert" else MoRSpec.token)(nr, **changes)
        runs.append(MoRVariant(spec, "ablation", first, tag=name))
    if cfg.sharings:  # Table 8's vanilla reference
        runs.append(MoRVariant(None, "ablation", first))
    for sharing in cfg.sharings:
        runs.append(MoRVariant(MoRSpec.recursive(nr, sharing=sharing), "ablation", first))
    if cfg.kv_share_rows:
        runs += [MoRVariant(MoRSpec.recursive(nr, kv="share"), "ablation", first),
                 MoRVariant(MoRSpec.expert(nr, kv="share"), "ablation", first),
                 MoRVariant(MoRSpec.token(nr, kv="share"), "ablation", first)]
    for seed in cfg.seeds:  # the gate ablations, paired with the main grid's MoR-EC and Recursive seeds
        runs += [MoRVariant(gate_ablation_spec(name, nr), "flops", seed, tag=name) for name in cfg.gate_ablations]
    for name in cfg.relaxations:  # Table 13, beside the ablation grid's Recursive rows (with and without KV sharing)
        kv, relax = RELAXATIONS[name]
        spec = MoRSpec.recursive(nr, kv=kv, relax=relax, relax_rank=cfg.relax_rank if relax == "lora" else 0,
                                 relax_len=cfg.relax_len if relax == "adapt_prompt" else 0)
        runs.append(MoRVariant(spec, "ablation", first, tag=name))
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]


@dataclass(frozen=True)
class BudgetSweepConfig(Preset):
    fractions: tuple[float, ...]  # budgets as fractions of MoRConfig.budget (1.0 is the main grid's)

    # cpu: one smaller budget (Fig. 3 at two budgets, 1:4; 3 runs, 2.8 min on the reference machine); cpu-long adds the
    # middle one (the 0.5 runs took 4.4 min), read beside cpu's runs
    PRESETS = {"smoke": dict(fractions=(0.5,)), "cpu": dict(fractions=(0.25,)), "gpu": dict(fractions=(0.1, 0.3))}
    PRESETS["cpu-long"] = dict(fractions=(0.25, 0.5))
    UNKEYED_FIELDS = ("fractions",)  # they choose which runs exist; each run's key is its budget's MoRConfig

    def __post_init__(self) -> None:
        object.__setattr__(self, "fractions", tuple(self.fractions))
        bad = [f for f in self.fractions if not 0 < f < 1]
        if bad:
            raise ConfigError(f"fractions {bad} must lie in (0, 1): the full budget is the main grid's run")


UPTRAIN_KINDS = ("full", "recursive", "reduced")


SHORT = {"cycle": "Cyc", "sequence": "Seq", "middle_cycle": "M-Cyc", "middle_sequence": "M-Seq",
         "stepwise": "Step", "average": "Avg", "lower": "Lower", "upper": "Upper", "random_layers": "Rand"}


@dataclass(frozen=True)
class UptrainConfig(Preset):
    """The up-training recipe shared by every run of the Table 9 analog."""

    model: str  # the source checkpoint (an embedded asset)
    corpus: str  # up-training data; its test split scores every run
    seq_len: int
    batch_size: int  # windows per optimizer step
    micro_batch_size: int
    steps: int  # optimizer steps, the same for every run (equal tokens)
    lr: float  # peak learning rate (cosine schedule)
    warmup_steps: int
    eval_every: int  # steps between validation-loss points
    val_windows: int  # validation windows per evaluation
    n_eval_windows: int  # test windows scored before and after up-training
    n_loops: int  # Nr of the recursive runs (the paper's Table 9: mostly 2)
    sharings: tuple[str, ...]  # rlib.looping.SHARINGS to compare
    inits: tuple[str, ...]  # rlib.looping.INITS to compare under every sharing
    reduced: tuple[tuple[str, str], ...]  # (sharing, init) pairs whose K blocks also run once ("Loop 1")
    full: bool  # also up-train the untied source model (the reference row)
    seed: int
    precision: str  # "auto" (bf16 where the machine computes it natively, else fp32), "bf16" or "no" (rlib.precision)

    UNKEYED_FIELDS = ("sharings", "inits", "reduced", "full")  # they only choose runs (Preset.grid_context)

    PRESETS = {
        "smoke": dict(model="smollm2-135m", corpus="shakespeare", seq_len=32, batch_size=2, micro_batch_size=2,
                      steps=2, lr=1e-3, warmup_steps=1, eval_every=2, val_windows=2, n_eval_windows=2, n_loops=2,
                      sharings=("cycle", "middle_cycle"), inits=("stepwise",), reduced=(("cycle", "stepwise"),),
                      full=False, seed=0, precision="auto"),
        # chapter 1's cpu recipe (24.6k tokens per run, its swept learning rate): 16 runs, ~28 min on 2 cores, so the
        # cpu profile leaves the study to cpu-long (below; the cpu preset has no runs)
        "cpu-long": dict(model="smollm2-135m", corpus="gutenberg-poetry", seq_len=128, batch_size=4, micro_batch_size=4,
                    steps=48, lr=1e-3, warmup_steps=5, eval_every=16, val_windows=16, n_eval_windows=32, n_loops=2,
                    sharings=looping.SHARINGS, inits=("stepwise", "average", "upper"),
                    reduced=(("cycle", "stepwise"), ("cycle", "average"), ("sequence", "average")), full=True,
                    seed=0, precision="auto"),
        "gpu": dict(model="gemma3-270m", corpus="gutenberg-poetry", seq_len=512, batch_size=32, micro_batch_size=16,
                    steps=500, lr=5e-4, warmup_steps=50, eval_every=100, val_windows=64, n_eval_windows=256,
                    n_loops=2, sharings=looping.SHARINGS,
                    inits=("stepwise", "average", "lower", "upper", "random_layers"),
                    reduced=(("cycle", "stepwise"), ("cycle", "average"), ("sequence", "average")), full=True,
                    seed=0, precision="auto"),
    }
    PRESETS["cpu"] = {**PRESETS["cpu-long"], "sharings": (), "inits": (), "reduced": (), "full": False}

    def __post_init__(self) -> None:
        object.__setattr__(self, "sharings", tuple(self.sharings))
        object.__setattr__(self, "inits", tuple(self.inits))
        object.__setattr__(self, "reduced", tuple(tuple(pair) for pair in self.reduced))
        for sharing in (*self.sharings, *(s for s, _ in self.reduced)):
            if sharing not in looping.SHARINGS:
                raise ConfigError(f"sharing {sharing!r} unknown; choose from {list(looping.SHARINGS)}")
        for init in (*self.inits, *(i for _, i in self.reduced)):
            if init not in looping.INITS or init == "random":
                raise ConfigError(f"init {init!r} is not a pretrained initialization; choose from "
                                  f"{[i for i in looping.INITS if i != 'random']}")
        if self.n_loops < 2:
            raise ConfigError(f"n_loops={self.n_loops}: a recursive run needs at least 2 loops")
        if self.steps < 1 or self.eval_every < 1:
            raise ConfigError(f"steps={self.steps} and eval_every={self.eval_every} must be >= 1")
        object.__setattr__(self, "precision", resolve_precision(self.precision))  # "auto" -> bf16 or fp32 here

    def check_model(self, n_layers: int) -> None:
        """Every sharing must accept `n_loops` for the source's depth; raised before any training."""
        bad = [s for s in {*self.sharings, *(s for s, _ in self.reduced)}
               if self.n_loops not in looping.valid_loops(n_layers, s)]
        if bad:
            raise ConfigError(f"n_loops={self.n_loops} does not fit a {n_layers}-layer {self.model} under "
                              f"{sorted(bad)}; valid per sharing: "
                              f"{ {s: looping.valid_loops(n_layers, s) for s in sorted(bad)} }")

    def train_config(self) -> TrainConfig:
        return TrainConfig(lr=self.lr, schedule="cosine", warmup_steps=self.warmup_steps, max_steps=self.steps,
                           batch_size=self.batch_size, micro_batch_size=self.micro_batch_size,
                           eval_every=self.eval_every, eval_batches=max(1, self.val_windows // self.batch_size),
                           seed=self.seed, mixed_precision=self.precision, checkpoint_final=False)


@dataclass(frozen=True)
class UptrainRun:
    """One up-training run (see the module docstring)."""

    kind: str
    sharing: str = "cycle"
    init: str = "stepwise"

    def __post_init__(self) -> None:
        if self.kind not in UPTRAIN_KINDS:
            raise ConfigError(f"run kind {self.kind!r} unknown; choose from {list(UPTRAIN_KINDS)}")

    @property
    def name(self) -> str:
        return "full" if self.kind == "full" else f"{self.kind}-{self.sharing}-{self.init}"

    def build(self, source: Decoder, n_loops: int, seed: int) -> Decoder:
        if self.kind == "full":
            return looping.convert(source, Looping(1))
        looped = looping.convert(source, Looping(n_loops, self.sharing, self.init, seed=seed))
        if self.kind == "recursive":
            return looped
        weight = looped.embed.weight  # reduced: the same blocks, each run once, in block order
        once = empty_decoder(looped.config, None, weight.dtype, weight.device)
        once.load_state_dict(looped.state_dict(), strict=True)
        return once.train(source.training)


def uptrain_runs(cfg: UptrainConfig) -> list[UptrainRun]:
    """Every run, the reference first, then the reduced baselines, then sharing x initialization."""
    out = [UptrainRun("full")] if cfg.full else []
    out += [UptrainRun("reduced", s, i) for s, i in cfg.reduced]
    out += [UptrainRun("recursive", s, i) for s in cfg.sharings for i in cfg.inits]
    return list(dict.fromkeys(out))
