"""`python -m rlib.uptrain SOURCE OUT`: one conversion and uptraining run of chapter 01's recipe, from any source, on
one process or many (`accelerate launch`, DDP or FSDP).

Relaxed Recursive Transformers Sec. 2.1-2.3 and 3.1: the source's L layers become K = L / B blocks run B times
(`rlib.looping`, an initialization), optionally relaxed with a depth-wise LoRA of rank r (`rlib.relax`, SVD init),
then uptrained on a corpus with the chapter's TrainConfig (`rlib.recursive.config.RecursiveConfig` of the profile;
flags override its fields). The chapters run the same code in one process; this command is how a run scales out:

    python -m rlib.uptrain smollm2-135m runs/uptrain/B2 --loops 2
    accelerate launch --num_processes 4 -m rlib.uptrain smollm2-135m runs/uptrain/B2 --loops 2          # DDP
    accelerate launch --num_processes 4 --use_fsdp --fsdp_version 2 --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP \\
        -m rlib.uptrain /path/to/checkpoint runs/uptrain/mine-B2 --loops 2 --rank 64                   # FSDP

The global batch is the same for any number of processes (`rlib.train`). OUT holds `train/` (metrics.csv,
summary.json, checkpoints: the same command resumes a killed run) and `model/` (`rlib.model.convert.save`, with
the source's tokenizer recorded), which `python -m rlib.eval --model rlib --model_args path=OUT/model` evaluates and
`python -m rlib.export OUT OUT-hf` exports. Bad arguments (a source that is nothing or unsupported, a loop count
that does not divide its layers) fail before any weights load.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from rlib import relax, sources
from rlib.config import ConfigError
from rlib.fsutil import atomic_folder
from rlib.model import Decoder, convert
from rlib.recursive import experiments
from rlib.recursive.config import RecursiveConfig, Variant, source_config
from rlib.train import full_state_dict, process_state, train

__all__ = ["build", "main"]


def build(source: Decoder, variant: Variant, rank: int) -> Decoder:
    """The looped model of `variant`, relaxed with a rank-`rank` SVD-initialised LoRA per depth when rank > 0."""
    looped = variant.build(source)
    return relax.relax(looped, source, relax.Relaxation(rank=rank)) if rank > 0 else looped


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rlib.uptrain", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="asset name, hf:ORG/NAME or folder (a transformers checkpoint of llama, qwen2, "
                                       "qwen3, mistral or gemma3_text, or a book model folder)")
    parser.add_argument("out", help="run folder: train/ and model/ are written inside")
    parser.add_argument("--profile", default="cpu", help="the chapter-01 preset whose recipe is used (default cpu)")
    parser.add_argument("--loops", type=int, help="B, loops of the shared blocks (default: the preset's init_loops)")
    parser.add_argument("--init", default="stepwise", help="looping initialization (rlib.looping.INITS)")
    parser.add_argument("--rank", type=int, default=0, help="depth-wise LoRA rank (0: no relaxation)")
    parser.add_argument("--corpus", help="uptraining corpus (default: the preset's train_corpus)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=("auto", "no", "bf16"),
                        help="overrides the preset's (bf16: autocast on one process or DDP, FSDP's bf16 parameters "
                             "under FSDP; auto: bf16 where the device computes it natively, rlib.precision)")
    for name, kind in (("steps", int), ("lr", float), ("seq_len", int), ("batch_size", int),
                       ("micro_batch_size", int), ("checkpoint_every", int)):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, help="overrides the preset's")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        base = RecursiveConfig.preset(args.profile)
        loops = args.loops or base.init_loops
        cfg = base.override(model=args.source, loops=(loops,), init_loops=loops, steps=args.steps, lr=args.lr,
                            seq_len=args.seq_len, batch_size=args.batch_size, micro_batch_size=args.micro_batch_size,
                            checkpoint_every=args.checkpoint_every, precision=args.precision,
                            train_corpus=args.corpus, eval_corpora=(args.corpus or base.train_corpus,))
        cfg.check_model(source_config(cfg.model).n_layers)  # refuses an unsupported source before any weights
        variant = Variant("recursive", loops, args.init, seed=args.seed)
        if args.rank < 0:
            raise ConfigError(f"--rank {args.rank}: use 0 (no relaxation) or a positive LoRA rank")
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    state = process_state()
    out = Path(args.out)
    with state.main_process_first():  # the first process tokenizes the corpus; the others read its cache
        windows = experiments.train_windows(cfg, cfg.train_corpus)
        val = experiments.val_windows(cfg, cfg.train_corpus)
    source = sources.load_source(cfg.model)
    torch.manual_seed(args.seed)
    model = build(source, variant, args.rank)
    result = train(model, windows, cfg.train_config(variant), out / "train", val_windows=val)
    weights = full_state_dict(model)  # a collective under FSDP: every process takes part
    if state.is_main_process:
        trained = build(source, variant, args.rank)  # the same structure, unsharded, to hold the gathered weights
        trained.load_state_dict(weights)
        with atomic_folder(out / "model") as folder:  # a failed save leaves the previous model/ as it was
            convert.save(trained, folder, tokenizer=cfg.tokenizer)
        print(f"[uptrain] {variant.name} rank {args.rank} on {state.num_processes} process(es): step {result.step}, "
              f"val loss {result.val_loss:.4f}; model in {out / 'model'}")
    state.wait_for_everyone()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
