"""rlib.train on a tiny random-init Decoder and random token windows: accumulation, resume, KD, hooks, 2 processes.

The file also runs as a script (`python tests/test_train.py MODE OUT_DIR`) for the runs that must be separate
processes: a run killed mid-training (`killed`), a 2-process gloo run under torchrun (`ddp`) and 2-process gloo runs
of a looped model under `accelerate launch --use_fsdp` (`fsdp`, `fsdp_killed`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from rlib.config import ConfigError
from rlib.model import Decoder, DecoderConfig
from rlib.train import TrainConfig, lr_factor, make_optimizer, train

REPO = Path(__file__).resolve().parents[1]
VOCAB, SEQ_LEN = 64, 16


class Windows(Dataset):
    """Fixed random token windows [N, T] as a Dataset of LongTensor [T]."""

    def __init__(self, n: int, seed: int = 0):
        self.data = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


def tiny_decoder(seed: int = 0) -> Decoder:
    config = DecoderConfig(
        family="llama", vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ffn=64,
        activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0, qk_norm=False,
        rope_thetas=(1e4, 1e4), sliding_windows=(None, None), attn_scale=8**-0.5,
    )
    torch.manual_seed(seed)
    decoder = Decoder(config)
    torch.nn.init.normal_(decoder.embed.weight, std=0.02)  # N(0, 1) tied embeddings give huge initial logits
    return decoder


def base_config(**changes) -> TrainConfig:
    values = dict(lr=3e-3, schedule="cosine", warmup_steps=2, max_steps=10, batch_size=4, micro_batch_size=2,
                  log_every=1, checkpoint_every=0, eval_every=5, eval_batches=2, seed=1)
    return TrainConfig(**{**values, **changes})


def losses(out_dir: Path) -> dict[int, float]:
    import csv

    with open(out_dir / "metrics.csv", newline="") as f:
        return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f) if r["loss"]}


def weights_equal(a: torch.nn.Module, b: torch.nn.Module, atol: float = 0.0) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.allclose(sa[k], sb[k], rtol=0, atol=atol) for k in sa)


def run_subprocess(args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


class KillAt:
    """A hook that adds nothing and ends the process abruptly when step `step` starts (a stand-in for a kill)."""

    def __init__(self, step: int):
        self.step = step

    def loss(self, step, batch, logits, model):
        if step == self.step:
            os._exit(17)
        return {}


class LogitPenalty:
    def loss(self, step, batch, logits, model):
        return {"aux": 1e-3 * logits.float().pow(2).mean()}


# ---- tests --------------------------------------------------------------------------------------------------


def test_loss_decreases_on_a_repeated_batch(tmp_path):
    cfg = base_config(lr=1e-2, schedule="constant", warmup_steps=0, max_steps=30, eval_every=0)
    result = train(tiny_decoder(), Windows(4), cfg, tmp_path)
    curve = result.losses()
    assert result.step == 30 and len(curve) == 30
    assert curve[30] < 0.5 * curve[1]
    assert (tmp_path / "summary.json").exists() and (tmp_path / "checkpoint" / "latest.json").exists()


def test_one_process_trains_in_bf16_after_fp32_and_back(tmp_path):
    """accelerate keeps one precision per process; a chapter trains several configs in one kernel."""
    cfg = base_config(max_steps=3, warmup_steps=1, eval_every=0)
    first = train(tiny_decoder(), Windows(8), cfg, tmp_path / "fp32")
    in_bf16 = train(tiny_decoder(), Windows(8), cfg.override(mixed_precision="bf16"), tmp_path / "bf16")
    again = train(tiny_decoder(), Windows(8), cfg, tmp_path / "fp32-again")
    assert first.losses() == again.losses()  # fp32 again, bit for bit
    assert in_bf16.losses() != first.losses()  # and the bf16 run did run in bf16


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    cfg = base_config(max_steps=4, eval_every=0)
    a, b = tiny_decoder(), tiny_decoder()
    curve_a = train(a, Windows(32), cfg.override(micro_batch_size=2), tmp_path / "micro2").losses()
    curve_b = train(b, Windows(32), cfg.override(micro_batch_size=4), tmp_path / "micro4").losses()
    assert curve_a.keys() == curve_b.keys()
    assert all(abs(curve_a[s] - curve_b[s]) < 1e-5 for s in curve_a)
    assert weights_equal(a, b, atol=1e-5)


def test_kill_and_resume_is_bit_exact(tmp_path):
    cfg = base_config(max_steps=10, checkpoint_every=4)
    straight = tiny_decoder()
    train(straight, Windows(32), cfg, tmp_path / "a", val_windows=Windows(8, seed=9))
    # run B: a separate process trains with checkpoints at 4 and 8 and dies as step index 9 starts
    killed = run_subprocess([sys.executable, __file__, "killed", str(tmp_path / "b")])
    assert killed.returncode == 17, killed.stderr[-2000:]
    latest = json.loads((tmp_path / "b" / "checkpoint" / "latest.json").read_text())
    assert latest["step"] == 8
    (tmp_path / "b" / "checkpoint" / "step-00000009").mkdir()  # a half-written save is ignored
    resumed = tiny_decoder(seed=123)  # fresh weights: everything must come from the checkpoint
    result = train(resumed, Windows(32), cfg, tmp_path / "b", val_windows=Windows(8, seed=9))
    assert result.resumed_from == 8 and result.step == 10
    assert losses(tmp_path / "a") == losses(tmp_path / "b")  # exact: same floats
    assert weights_equal(straight, resumed)
    with pytest.raises(ConfigError, match="different TrainConfig"):
        train(tiny_decoder(), Windows(32), cfg.override(lr=1e-4), tmp_path / "b")


def test_bad_config_raises_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="micro_batch_size"):
        train(tiny_decoder(), Windows(32), base_config(batch_size=4, micro_batch_size=3), tmp_path / "x")
    with pytest.raises(ConfigError, match=r"TrainConfig.lr=-1"):
        train(tiny_decoder(), Windows(32), base_config(lr=-1), tmp_path / "x")
    with pytest.raises(ConfigError, match="does not fit the training windows"):
        train(tiny_decoder(), Windows(3), base_config(), tmp_path / "x")
    with pytest.raises(ConfigError, match="schedule"):
        base_config(schedule="linear").validate()
    with pytest.raises(ConfigError, match="needs a teacher"):
        train(tiny_decoder(), Windows(32), base_config(kd_alpha=0.5), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_schedules_shape():
    cosine = base_config(warmup_steps=2, max_steps=10, min_lr_ratio=0.1)
    assert lr_factor(0, cosine) == 0.5 and lr_factor(1, cosine) == 1.0
    assert lr_factor(9, cosine) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 7 / 8)))
    wsd = base_config(schedule="wsd", warmup_steps=1, max_steps=10, decay_fraction=0.2, min_lr_ratio=0.0)
    assert [lr_factor(s, wsd) for s in range(10)] == [1.0] * 8 + [0.5, 0.0]


def test_kd_with_teacher_equal_to_student_is_zero(tmp_path):
    student = tiny_decoder()
    teacher = copy.deepcopy(student)
    result = train(student, Windows(32), base_config(max_steps=2, warmup_steps=0, kd_alpha=1.0,
                                                                kd_temperature=2.0, eval_every=0),
                   tmp_path, teacher=teacher)
    first = result.history[0]
    assert first["kd"] == pytest.approx(0.0, abs=1e-7)
    assert first["loss"] == pytest.approx(first["ce"], abs=1e-6)
    assert result.history[1]["kd"] > 0  # the student moved, the frozen teacher did not
    assert all(not p.requires_grad for p in teacher.parameters())


def test_hook_terms_are_added_and_logged(tmp_path):
    result = train(tiny_decoder(), Windows(32), base_config(max_steps=3, eval_every=0), tmp_path,
                   hooks=[LogitPenalty()])
    for row in result.history:
        assert row["aux"] > 0
        assert row["loss"] == pytest.approx(row["ce"] + row["aux"], abs=1e-6)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "aux" in header


class HalfCE:
    """A hook that weighs the trainer's cross-entropy by 0.5 and adds a constant 1."""

    def ce_weight(self, step: int) -> float:
        return 0.5

    def loss(self, step, batch, logits, model):
        return {"one": torch.ones((), device=logits.device)}


def test_a_hook_can_weigh_the_trainers_cross_entropy_and_only_one_may(tmp_path):
    result = train(tiny_decoder(), Windows(32), base_config(max_steps=3, eval_every=0), tmp_path / "half",
                   hooks=[HalfCE()])
    for row in result.history:  # "ce" is logged unweighted, the loss weighs it
        assert row["loss"] == pytest.approx(0.5 * row["ce"] + 1.0, abs=1e-6)
    with pytest.raises(ConfigError, match="at most one may weigh"):
        train(tiny_decoder(), Windows(32), base_config(max_steps=3, eval_every=0), tmp_path / "two",
              hooks=[HalfCE(), HalfCE()])
    assert not (tmp_path / "two" / "metrics.csv").exists()  # refused before any step


def test_two_gloo_processes_match_one(tmp_path):
    cfg = base_config(max_steps=4, eval_every=2)
    single = train(tiny_decoder(), Windows(32), cfg, tmp_path / "one", val_windows=Windows(8, seed=9))
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    ran = run_subprocess([str(torchrun), "--standalone", "--nproc_per_node", "2", __file__, "ddp",
                          str(tmp_path / "two")])
    assert ran.returncode == 0, ran.stderr[-3000:]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert one.keys() == two.keys()
    print("max |1-process - 2-process| loss:", max(abs(one[s] - two[s]) for s in one))
    assert all(abs(one[s] - two[s]) < 1e-5 for s in one), (one, two)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["val_loss"] == pytest.approx(single.val_loss, abs=1e-5)


FSDP_LAUNCH = ["--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
               "--fsdp_transformer_layer_cls_to_wrap", "DecoderBlock", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"]


def looped_decoder(seed: int = 0) -> Decoder:
    """The tiny decoder looped twice (2 blocks at 4 depths) with tied embeddings: every block's weights are used at
    two depths, the case FSDP must all-gather once per use and reduce once per step."""
    from rlib import looping

    config = tiny_decoder().config.replace(n_layers=4, rope_thetas=(1e4,) * 4, sliding_windows=(None,) * 4)
    torch.manual_seed(seed)
    source = Decoder(config)
    torch.nn.init.normal_(source.embed.weight, std=0.02)
    model = looping.convert(source, looping.Looping(2))
    assert model.config.tie_embeddings and [s.block for s in model.plan.steps] == [0, 1, 0, 1]
    return model


def test_fsdp_two_gloo_processes_match_one_and_resume(tmp_path):
    """Accelerate's FSDP plugin (FSDP2, one shard unit per DecoderBlock) on 2 CPU processes: the losses of a looped
    model with tied layers equal single-process training, and a run killed after its step-2 checkpoint resumes
    from the sharded checkpoint onto the same curve."""
    accelerate_cli = Path(sys.executable).with_name("accelerate")
    if not accelerate_cli.exists():
        pytest.skip("accelerate's launcher is not installed next to this Python")
    cfg = base_config(max_steps=4, eval_every=2, checkpoint_every=2)
    single = train(looped_decoder(), Windows(32), cfg, tmp_path / "one", val_windows=Windows(8, seed=9))
    ran = run_subprocess([str(accelerate_cli), "launch", *FSDP_LAUNCH, __file__, "fsdp", str(tmp_path / "two")],
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    layout = json.loads((tmp_path / "two" / "fsdp.json").read_text())
    assert layout == {"distributed_type": "FSDP", "sharded": True, "local_rows": 32}, layout  # half of 64 rows
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert one.keys() == two.keys() == {1, 2, 3, 4}
    print("FSDP: max |1-process - 2-process| loss:", max(abs(one[s] - two[s]) for s in one))
    assert all(abs(one[s] - two[s]) < 1e-5 for s in one), (one, two)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["val_loss"] == pytest.approx(single.val_loss, abs=1e-5)
    # killed as step index 3 starts (after the step-2 checkpoint), then the same command resumes
    killed = run_subprocess([str(accelerate_cli), "launch", *FSDP_LAUNCH, __file__, "fsdp_killed",
                             str(tmp_path / "resumed")], timeout=300)
    assert killed.returncode != 0
    assert json.loads((tmp_path / "resumed" / "checkpoint" / "latest.json").read_text())["step"] == 2
    ran = run_subprocess([str(accelerate_cli), "launch", *FSDP_LAUNCH, __file__, "fsdp", str(tmp_path / "resumed")],
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["resumed_from"] == 2
    resumed = losses(tmp_path / "resumed")
    assert resumed.keys() == one.keys() and all(abs(one[s] - resumed[s]) < 1e-5 for s in one), (one, resumed)


# ---- the separate processes ---------------------------------------------------------------------------------


def _main(mode: str, out_dir: str) -> None:
    if mode == "killed":
        cfg = base_config(max_steps=10, checkpoint_every=4)
        train(tiny_decoder(), Windows(32), cfg, out_dir, val_windows=Windows(8, seed=9), hooks=[KillAt(9)])
    elif mode in ("fsdp", "fsdp_killed"):
        _fsdp_run(out_dir, killed=mode == "fsdp_killed")
    elif mode == "ddp":
        cfg = base_config(max_steps=4, eval_every=2)  # 2 processes x micro 2 = the global batch of 4
        train(tiny_decoder(), Windows(32), cfg, out_dir, val_windows=Windows(8, seed=9))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def _fsdp_run(out_dir: str, killed: bool) -> None:
    from accelerate import PartialState
    from torch.distributed.tensor import DTensor

    model = looped_decoder()
    cfg = base_config(max_steps=4, eval_every=2, checkpoint_every=2)
    train(model, Windows(32), cfg, out_dir, val_windows=Windows(8, seed=9), hooks=[KillAt(3)] if killed else [])
    state = PartialState()
    weight = model.embed.weight
    if state.is_main_process:
        local = weight.to_local() if isinstance(weight, DTensor) else weight
        layout = {"distributed_type": state.distributed_type.name, "sharded": isinstance(weight, DTensor),
                  "local_rows": int(local.shape[0])}
        (Path(out_dir) / "fsdp.json").write_text(json.dumps(layout))


if __name__ == "__main__":
    _main(*sys.argv[1:])


def test_the_optimizer_is_fused_adamw_with_decay_on_matrices_only():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    cfg = TrainConfig(lr=1e-3, max_steps=2, batch_size=2, micro_batch_size=2, weight_decay=0.1)
    optimizer = make_optimizer(model, cfg)
    assert optimizer.defaults["fused"] is True
    decays = sorted((g["weight_decay"], len(g["params"])) for g in optimizer.param_groups)
    assert decays == [(0.0, 3), (0.1, 1)]  # the Linear's matrix decays; its bias and the norm's two tensors do not
    assert make_optimizer(model, cfg, fused=False).defaults["fused"] is None
