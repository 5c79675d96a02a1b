"""Training loop on HF Accelerate: one CPU, one GPU, DDP or FSDP (`accelerate launch`) run the same code.

    cfg = TrainConfig(lr=1e-3, max_steps=200, batch_size=16, micro_batch_size=4, eval_every=50)
    result = train(decoder, PackedWindows(cache, 256), cfg, out_dir, val_windows=val)

Data: every optimizer step draws one *global* batch of `batch_size` window indices from a `WindowSampler`
(seeded by `cfg.seed`, identical on every process); process r takes its contiguous share and splits it into
micro batches. The global batch is therefore the same for any world size, so 1 and N processes follow the
same loss curve up to the order of floating-point sums (`tests/test_train.py` checks 2 gloo processes).

Loss per micro batch: next-token cross-entropy (mean over tokens), plus `kd_alpha * T^2 * KL(teacher || student)`
on softmax(logits / T) (forward KL, token-level, mean over tokens; the T^2 keeps gradient scale as in Hinton et
al.) when a frozen teacher is given, plus every term returned by `hooks` (`hook.loss(step, batch, logits, model)
-> {name: scalar}`: routers' balance losses, early-exit losses). Gradient accumulation divides each micro
batch's loss by the number of micro batches, and DDP averages over processes: the gradient is the mean over
the global batch, whatever the split.

Optimizer AdamW, torch's fused kernel (decoupled weight decay on matrices only; norms, biases and 1-d tensors get
none; `make_optimizer`), the schedule
as a LambdaLR: linear warm-up, then "cosine" to lr * min_lr_ratio, "wsd" (warm-up, stable, then a linear decay
to lr * min_lr_ratio over the last `decay_fraction` of steps: the MoR paper's trapezoid) or "constant".

Outputs in `out_dir`:
    metrics.csv      one row per `log_every` steps and per evaluation: step, loss and its terms (ce, kd, hook
                     names; means since the last row), grad_norm (before clipping), lr, tokens, val_loss, val_ppl
    summary.json     final step, losses, validation loss / ppl, tokens, wall time, config
    checkpoint/      `step-XXXXXXXX/` folders (Accelerate's save_state: model, optimizer, scheduler, sampler,
                     RNG states of every process) and `latest.json` naming the last complete one

A checkpoint folder is complete before `latest.json` (written by atomic rename) points at it, so a kill at any
moment leaves the last good checkpoint usable. `resume=True` continues from it bit-exactly: same batches,
same RNG streams, same optimizer moments, so the loss curve after a kill and resume equals the uninterrupted
one. A checkpoint written with a different TrainConfig is refused.

Mixed precision: "bf16" autocasts forward passes to bfloat16 (weights, gradients and optimizer stay fp32), on a
GPU and on a CPU alike: on this book's 2-core CPU (AVX-512 with bf16) it trains SmolLM2-135M 2.4x faster than
fp32 (311 vs 131 tokens/s at 8 x 128 tokens). Losses are computed in fp32 either way.

Distributed: `torchrun --nproc_per_node N script.py` or `accelerate launch [--cpu] --num_processes N script.py`
(DDP); without CUDA the processes use gloo. FSDP goes through Accelerate's plugin (`accelerate launch --use_fsdp
--fsdp_version 2 --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP`: one shard unit per `DecoderBlock`, so a looped
model's shared block is gathered at each depth that runs it and its gradient reduced once per step) and its
sharded save_state / load_state; on CPU processes `_fsdp_on_cpu` turns the plugin on where Accelerate would fall
back to DDP. Tested: 1 process, 2 gloo DDP processes, and 2 gloo FSDP processes training a looped model with tied
layers (same losses as 1 process; a killed run resumes from its sharded checkpoint). A teacher is not sharded:
each process holds a full copy.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from rlib.config import ConfigError, Preset
from rlib.data import WindowSampler
from rlib.fsutil import atomic_path
from rlib.progress import progress

__all__ = ["SCHEDULES", "LossHook", "TrainConfig", "TrainResult", "full_state_dict", "lr_factor", "make_optimizer",
           "process_state", "train"]

SCHEDULES = ("cosine", "wsd", "constant")
PRECISIONS = ("no", "bf16")
CHECKPOINT_DIR = "checkpoint"
LATEST = "latest.json"


class LossHook(Protocol):
    """An auxiliary loss: terms returned are added to the micro batch's loss and logged under their names. A hook may
    also define `ce_weight(step) -> float`, the weight the trainer gives its own last-layer cross-entropy in the loss
    (default 1; at most one hook may set it), so that a loss weighing every exit (LayerSkip's Eq. 5) needs no second
    full-vocabulary cross-entropy of the same logits; "ce" is still logged unweighted."""

    def loss(self, step: int, batch: torch.Tensor, logits: torch.Tensor, model: nn.Module) -> dict[str, torch.Tensor]:
        ...


# ---- configuration ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig(Preset):
    """Everything that decides a training run's numbers; `validate()` runs before any step."""

    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # the schedule ends at lr * min_lr_ratio
    schedule: str = "cosine"  # "cosine" | "wsd" | "constant"
    decay_fraction: float = 0.2  # wsd: the last fraction of max_steps decays linearly
    warmup_steps: int = 0
    max_steps: int = 100
    batch_size: int = 8  # global: windows per optimizer step over all processes
    micro_batch_size: int = 8  # windows per forward pass on one process
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float | None = 1.0  # max global grad norm; None = no clipping
    mixed_precision: str = "no"  # "no" | "bf16" (autocast, GPU or CPU; master weights stay fp32)
    eval_every: int = 0  # steps between validations; 0 = only at the end (when val_windows is given)
    eval_batches: int = 4  # validation batches of `batch_size` windows
    checkpoint_every: int = 0  # steps between checkpoints; 0 = only at the end
    checkpoint_final: bool = True  # also checkpoint the last step (False: short runs whose caller saves the model)
    log_every: int = 1
    seed: int = 0
    kd_alpha: float = 0.0  # weight of the distillation term (needs a teacher)
    kd_temperature: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))

    def validate(self, world_size: int = 1) -> TrainConfig:
        """Raise ConfigError naming the field, its value and a fix; return self."""
        checks = [
            ("lr", self.lr > 0, "a positive learning rate, e.g. 1e-3"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "a ratio in [0, 1]"),
            ("schedule", self.schedule in SCHEDULES, f"one of {SCHEDULES}"),
            ("decay_fraction", 0 < self.decay_fraction <= 1, "a fraction in (0, 1]"),
            ("max_steps", _is_int(self.max_steps) and self.max_steps >= 1, "an integer >= 1"),
            ("warmup_steps", _is_int(self.warmup_steps) and 0 <= self.warmup_steps < self.max_steps,
             "an integer in [0, max_steps)"),
            ("batch_size", _is_int(self.batch_size) and self.batch_size >= 1, "an integer >= 1"),
            ("micro_batch_size", _is_int(self.micro_batch_size) and self.micro_batch_size >= 1, "an integer >= 1"),
            ("weight_decay", self.weight_decay >= 0, "a value >= 0"),
            ("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "two values in [0, 1)"),
            ("eps", self.eps > 0, "a small positive value, e.g. 1e-8"),
            ("grad_clip", self.grad_clip is None or self.grad_clip > 0, "a positive max norm, or None"),
            ("mixed_precision", self.mixed_precision in PRECISIONS, f"one of {PRECISIONS}"),
            ("eval_every", _is_int(self.eval_every) and self.eval_every >= 0, "an integer >= 0 (0 = at the end)"),
            ("eval_batches", _is_int(self.eval_batches) and self.eval_batches >= 1, "an integer >= 1"),
            ("checkpoint_every", _is_int(self.checkpoint_every) and self.checkpoint_every >= 0,
             "an integer >= 0 (0 = at the end)"),
            ("log_every", _is_int(self.log_every) and self.log_every >= 1, "an integer >= 1"),
            ("seed", _is_int(self.seed), "an integer"),
            ("kd_alpha", self.kd_alpha >= 0, "a weight >= 0"),
            ("kd_temperature", self.kd_temperature > 0, "a temperature > 0, e.g. 1.0 or 2.0"),
        ]
        for name, ok, fix in checks:
            if not ok:
                raise ConfigError(f"TrainConfig.{name}={getattr(self, name)!r} is invalid; use {fix}")
        self.accumulation_steps(world_size)
        return self

    def accumulation_steps(self, world_size: int = 1) -> int:
        """batch_size / (micro_batch_size * world_size), which must be a whole number."""
        per_step = self.micro_batch_size * world_size
        if self.batch_size % per_step:
            raise ConfigError(
                f"TrainConfig.batch_size={self.batch_size} is not a multiple of micro_batch_size "
                f"({self.micro_batch_size}) x processes ({world_size}) = {per_step}; use a batch_size that is "
                f"(e.g. {max(per_step, self.batch_size // per_step * per_step)}) or change micro_batch_size"
            )
        return self.batch_size // per_step


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """The LR multiplier for optimizer step `step` (0-based): warm-up, then the schedule's shape."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    floor = cfg.min_lr_ratio
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "cosine":
        frac = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    decay_steps = max(1, round(cfg.decay_fraction * cfg.max_steps))  # wsd
    decay_start = cfg.max_steps - decay_steps
    if step < decay_start:
        return 1.0
    return 1.0 - (1 - floor) * (step - decay_start + 1) / decay_steps


# ---- results and metrics ------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    step: int  # optimizer steps done in total (including those before a resume)
    resumed_from: int  # the checkpoint step this call started from (0 = fresh)
    train_loss: float | None  # the last step's loss
    val_loss: float | None
    val_ppl: float | None
    tokens: int  # training tokens seen in total
    seconds: float  # wall time of this call
    out_dir: Path
    history: list[dict[str, Any]] = field(default_factory=list)  # the rows of metrics.csv

    def losses(self) -> dict[int, float]:
        """step -> training loss, from the rows that have one."""
        return {int(r["step"]): float(r["loss"]) for r in self.history if r.get("loss") not in (None, "")}


class MetricsLog:
    """metrics.csv as rows in memory; rows are appended, and the file is rewritten when a new column appears."""

    def __init__(self, path: Path, keep_until: int | None):
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.fields: list[str] = []
        if keep_until is not None and path.exists():
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                self.fields = list(reader.fieldnames or [])
                self.rows = [_numbers(r) for r in reader if int(r["step"]) <= keep_until]
        self._rewrite()

    def _rewrite(self) -> None:
        with atomic_path(self.path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, self.fields)
            if self.fields:
                writer.writeheader()
            writer.writerows(self.rows)

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        new = [k for k in row if k not in self.fields]
        if new or not self.fields:
            self.fields += new
            self._rewrite()
            return
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, self.fields).writerow(row)


def _numbers(row: dict[str, str]) -> dict[str, Any]:
    """A csv row with its numbers parsed back (empty cells stay empty strings)."""
    out: dict[str, Any] = {}
    for key, text in row.items():
        try:
            out[key] = int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:
            out[key] = text
    return out


# ---- pieces of the loop -------------------------------------------------------------------------------------


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _batch(windows: Dataset, indices: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.stack([windows[int(i)] for i in indices]).to(device)  # [B, T]


def next_token_loss(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [B, T, V] predicting batch[:, 1:] (positions 0..T-2)."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch[:, 1:].flatten())


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * mean over tokens of KL(p_teacher || p_student) at temperature T; logits [B, T, V]."""
    student = F.log_softmax(student_logits.float() / temperature, dim=-1).flatten(0, 1)  # [B*T, V]
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1).flatten(0, 1)
    kl = F.kl_div(student, teacher, log_target=True, reduction="sum") / student.shape[0]
    return kl * temperature**2


def _ce_weight_hook(hooks: Sequence[LossHook]) -> LossHook | None:
    """The hook that weighs the trainer's cross-entropy (`LossHook`), if any; more than one is an error."""
    weighers = [hook for hook in hooks if hasattr(hook, "ce_weight")]
    if len(weighers) > 1:
        raise ConfigError(f"hooks {[type(h).__name__ for h in weighers]} all set ce_weight; at most one may weigh "
                          "the last layer's cross-entropy (merge their weights into one hook)")
    return weighers[0] if weighers else None


def _micro_loss(step: int, model, batch, cfg: TrainConfig, teacher, hooks) -> dict[str, torch.Tensor]:
    """The loss terms of one micro batch; 'loss' is their weighted sum."""
    logits = model(batch)  # [b, T, V]
    terms = {"ce": next_token_loss(logits, batch)}
    weigher = _ce_weight_hook(hooks)
    weight = 1.0 if weigher is None else weigher.ce_weight(step)
    total = terms["ce"] if weight == 1.0 else weight * terms["ce"]  # 1: plain training's loss, bit for bit
    if teacher is not None and cfg.kd_alpha > 0:
        with torch.no_grad():
            teacher_logits = teacher(batch)
        terms["kd"] = kd_loss(logits, teacher_logits, cfg.kd_temperature)
        total = total + cfg.kd_alpha * terms["kd"]
    for hook in hooks:
        for name, value in hook.loss(step, batch, logits, model).items():
            if name in terms or name == "loss":
                raise ConfigError(f"hook {type(hook).__name__} returns a term named {name!r}, which is taken")
            terms[name] = value
            total = total + value
    terms["loss"] = total
    return terms


# ---- checkpoints --------------------------------------------------------------------------------------------


def _latest_checkpoint(out_dir: Path) -> tuple[Path, dict] | None:
    pointer = out_dir / CHECKPOINT_DIR / LATEST
    if not pointer.exists():
        return None
    meta = json.loads(pointer.read_text())
    return out_dir / CHECKPOINT_DIR / meta["folder"], meta


def _check_resumable(meta: dict, cfg: TrainConfig, world_size: int, checkpoint: Path) -> None:
    saved = meta["config"]
    current = json.loads(json.dumps(cfg.to_dict()))
    differs = {k: (saved.get(k), v) for k, v in current.items() if saved.get(k) != v}
    if differs:
        raise ConfigError(
            f"checkpoint {checkpoint} was written with a different TrainConfig (saved, now): {differs}; "
            "resume with the saved config, pass resume=False to start over, or use a new out_dir"
        )
    if meta["world_size"] != world_size:
        raise ConfigError(
            f"checkpoint {checkpoint} was written by {meta['world_size']} process(es), this run has {world_size}; "
            "resume with the same number of processes (its RNG states are per process)"
        )


def _save_checkpoint(accelerator, out_dir: Path, step: int, state: dict) -> None:
    """Write step-XXXXXXXX/ fully (every process), then point latest.json at it (main), then drop older ones."""
    root = out_dir / CHECKPOINT_DIR
    folder = root / f"step-{step:08d}"
    if accelerator.is_main_process and folder.exists():
        shutil.rmtree(folder)  # a left-over from a killed save of the same step
    accelerator.wait_for_everyone()
    accelerator.save_state(str(folder))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with atomic_path(folder / "trainer_state.json") as tmp:
            tmp.write_text(json.dumps(state, indent=1))
        with atomic_path(root / LATEST) as tmp:
            tmp.write_text(json.dumps({"folder": folder.name, **state}, indent=1))
        for old in root.glob("step-*"):
            if old.name != folder.name:
                shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


# ---- evaluation ---------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(accelerator, model, val_windows: Dataset, cfg: TrainConfig) -> tuple[float, float]:
    """(mean next-token loss, perplexity) over `eval_batches` batches of evenly spaced validation windows."""
    n = min(len(val_windows), cfg.eval_batches * cfg.batch_size)
    indices = np.linspace(0, len(val_windows) - 1, n).round().astype(np.int64)
    mine = np.array_split(indices, accelerator.num_processes)[accelerator.process_index]
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # [loss sum, tokens]
    for start in range(0, len(mine), cfg.micro_batch_size):
        batch = _batch(val_windows, mine[start : start + cfg.micro_batch_size], accelerator.device)
        with torch.no_grad(), accelerator.autocast():
            logits = model(batch)
        tokens = batch[:, 1:].numel()
        total += torch.tensor([float(next_token_loss(logits, batch)) * tokens, tokens], device=total.device)
    total = accelerator.reduce(total, reduction="sum")
    model.train(was_training)
    loss = float(total[0] / total[1])
    return loss, math.exp(min(loss, 50.0))


# ---- the loop -----------------------------------------------------------------------------------------------


def process_state():
    """Accelerate's PartialState as `train` sets it up (gloo CPU processes without CUDA): rank, main_process_first,
    wait_for_everyone for the code around a training run."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model.state_dict()` as whole CPU tensors, FSDP2's sharded parameters (DTensors) gathered: a collective under
    FSDP, so every process must call it; the same tensors as the plain state dict otherwise."""
    from torch.distributed.tensor import DTensor

    return {name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()
            for name, t in model.state_dict().items()}


def _accelerator(cfg: TrainConfig):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    precision = cfg.mixed_precision
    state = AcceleratorState._shared_state
    if state and str(state.get("_mixed_precision", precision)) != precision:
        # accelerate keeps one precision per process; a notebook that trains in bf16 after fp32 (or back) drops the
        # old setting here. Only the precision state goes: the process group (PartialState) stays as it is.
        AcceleratorState._reset_state(reset_partial_state=False)
    # cpu=True without CUDA: torchrun's WORLD_SIZE then means gloo processes (accelerate ignores it otherwise)
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=precision,
                              gradient_accumulation_steps=1, step_scheduler_with_optimizer=False)
    _fsdp_on_cpu(accelerator, precision)
    return accelerator


def _fsdp_on_cpu(accelerator, precision: str) -> None:
    """Accelerate's FSDP plugin (`accelerate launch --use_fsdp`, i.e. ACCELERATE_USE_FSDP=true) on gloo processes.

    Accelerate turns FSDP on only for accelerator devices and leaves CPU processes as plain DDP (MULTI_CPU), while
    torch's FSDP itself runs on CPU with gloo. Where FSDP was asked for and the processes are CPU ones, the shared
    accelerator state is switched to FSDP with the plugin read from the same environment, as its GPU branch does,
    so that one code path (and the 2-process CPU test) covers what a GPU run does.
    """
    import os

    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    wanted = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if not wanted or accelerator.distributed_type != DistributedType.MULTI_CPU:
        return
    plugin = FullyShardedDataParallelPlugin()
    if precision != "no":
        plugin.set_mixed_precision(precision)
    accelerator.state.fsdp_plugin = plugin
    # both shared states: a later AcceleratorState() (accelerate makes some) copies PartialState's type over its own
    accelerator.state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def make_optimizer(model: nn.Module, cfg: TrainConfig, fused: bool | None = None) -> torch.optim.AdamW:
    """AdamW over `_param_groups`; `fused` (default: wherever every parameter is a CPU or CUDA tensor) takes torch's
    fused kernel, one update per parameter tensor instead of about ten multi-tensor ops: the same algorithm, rounded
    in another order, and 0.88x the time of a SmolLM2 up-training step on 2 CPU cores (benchmarks/uptrain_step.py)."""
    if fused is None:
        fused = all(p.device.type in ("cpu", "cuda") for p in model.parameters())
    return torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                             fused=fused or None)


def train(
    model: nn.Module,
    train_windows: Dataset,
    cfg: TrainConfig,
    out_dir: str | Path,
    val_windows: Dataset | None = None,
    teacher: nn.Module | None = None,
    hooks: Sequence[LossHook] = (),
    resume: bool = True,
) -> TrainResult:
    """Train `model` (logits [B, T, V] from input_ids [B, T]) on windows [T]; see the module docstring."""
    from accelerate.utils import set_seed

    if not isinstance(cfg, TrainConfig):
        raise ConfigError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    cfg.validate()
    accelerator = _accelerator(cfg)
    world = accelerator.num_processes
    accum = cfg.accumulation_steps(world)
    if teacher is None and cfg.kd_alpha > 0:
        raise ConfigError(f"TrainConfig.kd_alpha={cfg.kd_alpha} needs a teacher; pass teacher=... or kd_alpha=0")
    _ce_weight_hook(hooks)
    try:
        sampler = WindowSampler(len(train_windows), cfg.batch_size, seed=cfg.seed)
    except ValueError as error:
        message = f"TrainConfig.batch_size={cfg.batch_size} does not fit the training windows: {error}"
        raise ConfigError(message) from None
    out_dir = Path(out_dir)
    latest = _latest_checkpoint(out_dir) if resume else None
    if not resume and accelerator.is_main_process:
        shutil.rmtree(out_dir / CHECKPOINT_DIR, ignore_errors=True)  # never resume a run this call replaces
    if latest is not None:
        _check_resumable(latest[1], cfg, world, latest[0])

    set_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.register_for_checkpointing(scheduler)
    accelerator.register_for_checkpointing(sampler)
    if teacher is not None:
        teacher = teacher.to(accelerator.device).eval().requires_grad_(False)

    state = {"step": 0, "tokens": 0, "window_sum": 0.0, "window_terms": {}, "window_count": 0}
    if latest is not None:
        accelerator.load_state(str(latest[0]))
        state = json.loads((latest[0] / "trainer_state.json").read_text())
    start_step = state["step"]
    log = MetricsLog(out_dir / "metrics.csv", keep_until=start_step) if accelerator.is_main_process else None
    model.train()
    batches = sampler.infinite()  # global batches of indices, the same on every process
    share = cfg.batch_size // world
    seq_len = int(train_windows[0].shape[0])
    t0 = time.perf_counter()
    last_loss = val_loss = val_ppl = None
    bar = progress(total=cfg.max_steps, initial=start_step, desc="train", disable=not accelerator.is_main_process)
    for step in range(start_step, cfg.max_steps):
        global_indices = next(batches)
        mine = global_indices[accelerator.process_index * share : (accelerator.process_index + 1) * share]
        lr = scheduler.get_last_lr()[0]  # the rate this step uses
        terms = _train_step(accelerator, model, optimizer, scheduler, train_windows, mine, cfg, accum, step,
                            teacher, hooks)
        if not math.isfinite(terms["loss"]):
            raise FloatingPointError(f"training loss is {terms['loss']} at step {step + 1}; lower lr or check the data")
        state["step"] = step + 1
        state["tokens"] += cfg.batch_size * seq_len
        last_loss = terms["loss"]
        _accumulate_window(state, terms)
        row: dict[str, Any] = {}
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.max_steps:
            row.update(_flush_window(state), lr=lr, tokens=state["tokens"])
        if val_windows is not None and _due(step + 1, cfg.eval_every, cfg.max_steps):
            val_loss, val_ppl = evaluate(accelerator, model, val_windows, cfg)
            row.update(val_loss=val_loss, val_ppl=val_ppl)
        if row and log is not None:
            log.append({"step": step + 1, **row, "seconds": round(time.perf_counter() - t0, 3)})
        last_step = step + 1 == cfg.max_steps
        if (cfg.checkpoint_final or not last_step) and _due(step + 1, cfg.checkpoint_every, cfg.max_steps):
            _save_checkpoint(accelerator, out_dir, step + 1, {**state, "config": cfg.to_dict(), "world_size": world})
        bar.update(1)
        bar.set_postfix(loss=f"{last_loss:.4f}")
    bar.close()
    return _finish(accelerator, out_dir, cfg, state, start_step, last_loss, val_loss, val_ppl, t0, log)


def _train_step(accelerator, model, optimizer, scheduler, windows, mine, cfg, accum, step, teacher, hooks):
    """One optimizer step over this process's share of the global batch; returns its global mean terms."""
    sums: dict[str, torch.Tensor] = {}
    for micro in range(accum):
        batch = _batch(windows, mine[micro * cfg.micro_batch_size : (micro + 1) * cfg.micro_batch_size],
                       accelerator.device)  # [b, T]
        last = micro == accum - 1
        context = accelerator.no_sync(model) if not last else _nullcontext()
        with context:
            with accelerator.autocast():
                terms = _micro_loss(step, model, batch, cfg, teacher, hooks)
            accelerator.backward(terms["loss"] / accum)
        for name, value in terms.items():
            sums[name] = sums.get(name, 0.0) + value.detach().float() / accum
    grad_norm = None
    if cfg.grad_clip is not None:
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    names = sorted(sums)
    reduced = accelerator.reduce(torch.stack([sums[n] for n in names]), reduction="mean")
    out = {name: float(v) for name, v in zip(names, reduced.tolist())}
    if grad_norm is not None:
        out["grad_norm"] = float(grad_norm)
    return out


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _due(step: int, every: int, max_steps: int) -> bool:
    return step == max_steps or (every > 0 and step % every == 0)


def _accumulate_window(state: dict, terms: dict[str, float]) -> None:
    state["window_count"] += 1
    state["window_sum"] += terms["loss"]
    for name, value in terms.items():
        if name != "loss":
            state["window_terms"][name] = state["window_terms"].get(name, 0.0) + value


def _flush_window(state: dict) -> dict[str, float]:
    n = state["window_count"]
    row = {"loss": state["window_sum"] / n, **{k: v / n for k, v in state["window_terms"].items()}}
    state.update(window_sum=0.0, window_terms={}, window_count=0)
    return row


def _finish(accelerator, out_dir, cfg, state, start_step, last_loss, val_loss, val_ppl, t0, log) -> TrainResult:
    seconds = time.perf_counter() - t0
    result = TrainResult(
        step=state["step"], resumed_from=start_step, train_loss=last_loss, val_loss=val_loss, val_ppl=val_ppl,
        tokens=state["tokens"], seconds=seconds, out_dir=out_dir, history=list(log.rows) if log else [],
    )
    if accelerator.is_main_process:
        summary = {k: v for k, v in dataclasses.asdict(result).items() if k not in ("history", "out_dir")}
        summary.update(config=cfg.to_dict(), world_size=accelerator.num_processes)
        with atomic_path(out_dir / "summary.json") as tmp:
            tmp.write_text(json.dumps(summary, indent=1))
    accelerator.wait_for_everyone()
    return result
