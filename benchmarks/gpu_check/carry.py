"""A trained model for gpu-check's self-speculative study, small enough to travel to the lent GPU machine (issue 26).

The lent machine has no copy of the assets, so `end_to_end` otherwise decodes a random-weight SmolLM2-135M, whose
self-speculative acceptance is 0: its ratio is the cost of drafting, not a speedup. Chapter 05's from-scratch LD+EE
model (LayerSkip Sec. 4.1-4.2: layer dropout and the early-exit loss; 14 MB) is trained on this machine by the
chapter's cpu profile. This command copies it, with the chapter's held-out prompts as token ids and its decoding
setting (exits, drafts, temperature), into `gpu_carry/` (git-ignored), which the device call carries:

    python -m benchmarks.gpu_check.carry                     # after the chapter's cpu run (or decode_check)
    # device tool: run(command='make gpu-check ARGS=...', carry=['gpu_carry'])

`end_to_end.self_speculative` then decodes it as the chapter does (`rlib.layerskip.decoding.benchmark_decoding`),
checked exact against autoregressive decoding with the same noise, beside the random-weight row.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rlib import paths

__all__ = ["CARRY_DIR", "LAYERSKIP", "export_layerskip", "main"]

CARRY_DIR = paths.ROOT / "gpu_carry"
LAYERSKIP = "layerskip_scratch"
CHAPTER = "05_layerskip"
RECIPE = "ld_ee"
# what travels must stay well under the device tool's 64 MiB for the whole working tree
LIMIT_BYTES = 32 * 2**20


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def export_layerskip(profile: str = "cpu", out: Path = CARRY_DIR) -> Path:
    """Copy chapter 05's first-seed LD+EE model of `profile`, its held-out prompts (ids, [P, T]) and decoding setting
    into `out/layerskip_scratch/`; a clear error when the chapter has not trained it yet."""
    import torch

    from rlib.experiments import work_dir
    from rlib.layerskip import config
    from rlib.layerskip.decode_study import scratch_prompts
    from rlib.model import convert

    cfg = config.LayerSkipConfig.preset(profile)
    run = config.LayerSkipRun(RECIPE, cfg.seeds[0]).name
    source = work_dir(profile, CHAPTER) / run / "model"
    if not (source / convert.CONFIG_FILE).exists():
        raise SystemExit(f"no trained model at {source}: run chapter 05 first (`python -m rlib.book run --profile "
                         f"{profile} --only 05`, or `python -m rlib.layerskip.decode_check --profile {profile}`)")
    size = _folder_bytes(source)
    if size > LIMIT_BYTES:
        raise SystemExit(f"{source} holds {size / 2**20:.0f} MiB, over the {LIMIT_BYTES // 2**20} MiB that may travel")
    target = out / LAYERSKIP
    staging = out / f".{LAYERSKIP}.partial"  # a failed export leaves the previous one in place
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging / "model")
    prompts = torch.cat(scratch_prompts(cfg))  # [P, T]
    torch.save(prompts, staging / "prompts.pt")
    meta = {"chapter": CHAPTER, "profile": profile, "run": run, "recipe": RECIPE, "n_layers": cfg.n_layers,
            "exits": list(cfg.decode_exits), "drafts": list(cfg.decode_drafts),
            "temperature": cfg.decode_temperature, "new_tokens": cfg.decode_new_tokens,
            "prompts": int(prompts.shape[0]), "prompt_len": int(prompts.shape[1]), "repeats": cfg.decode_repeats}
    (staging / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check.carry", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="the chapter 05 profile whose trained model travels")
    parser.add_argument("--out", type=Path, default=CARRY_DIR)
    args = parser.parse_args(argv)
    target = export_layerskip(args.profile, args.out)
    print(f"{target}: {_folder_bytes(target) / 2**20:.1f} MiB; carry it: run(..., carry=['{args.out.name}'])")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
