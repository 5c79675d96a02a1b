"""Teacher-forced against generated exact match on the same parsing utterances (LayerSkip, paper 004, Sec. 6.1,
Fig. 10b, Tables 5 and 10; a check of chapter 05's own scorer, not a paper result).

Chapter 05 reads Fig. 10b's exact match teacher-forced (`rlib.layerskip.parse_study.exit_match`: every target token,
EOS included, is the head's argmax given the true prefix) and Table 10's from greedy decoding until EOS
(`rlib.layerskip.decode_study.parse_decoding`). For the same model and utterance the two are the same event: greedy
decoding reproduces the target exactly when, and only when, every target token is the argmax after the true prefix.
So they must agree utterance by utterance; a gap means the two paths compute different logits. The cpu-long run of
2026-12-06 showed one (generated below teacher-forced on the first 10 test utterances, chapter 05's
`ls.fig10b.parse_last_em` evidence) and its models are gone. This script fine-tunes the plain and the LD+EE recipe
for a few steps (cpu-long's recipe otherwise; cached in `--work`, so a second call only decodes), then scores every
test utterance both ways: greedy decoding with and without `fast_decoding` (the chapter decodes inside it).

    python benchmarks/parse_em_identity.py --steps 40 --items 40 --work /tmp/parse_em \
        --out benchmarks/results/parse_em_identity_cpu.md     # ~11 min on 2 cores (LD+EE trains 8.6 min)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from rlib import assets  # noqa: E402
from rlib.layerskip import parse_data, parse_study  # noqa: E402
from rlib.layerskip.config import ParseConfig  # noqa: E402
from rlib.layerskip.decoding import DecodeCase, fast_decoding, run_case  # noqa: E402


@torch.no_grad()
def compare(cfg: ParseConfig, work: Path) -> pd.DataFrame:
    """One row per (recipe, utterance): teacher-forced exact at the last exit, and generated exact with the plain and
    the fast matmuls; trains the recipes first where `work` does not hold them."""
    parse_study.run_grid(cfg, work)
    tokenizer = assets.load_tokenizer(cfg.model)
    pairs = [parse_data.target_ids(tokenizer, ex) for ex in parse_data.examples("test", cfg.test_examples, cfg.seed)]
    rows = []
    for recipe in cfg.recipes:
        model = parse_study.load_model(work, recipe)
        for index, (prompt, target) in enumerate(pairs):
            logits = model(torch.tensor([prompt + target[:-1]]))[0, len(prompt) - 1:]  # [len(target), V]
            row = {"recipe": recipe, "utterance": index, "teacher_forced": logits.argmax(-1).tolist() == target}
            for fast in (False, True):
                with fast_decoding(model, enabled=fast):
                    out, _ = run_case(DecodeCase("autoregressive"), model, torch.tensor([prompt]),
                                      cfg.decode_new_tokens, eos_ids=(tokenizer.eos_token_id,))
                row["generated_fast" if fast else "generated"] = out[0, len(prompt):].tolist() == target
            rows.append(row)
    return pd.DataFrame(rows)


def summary(per_utterance: pd.DataFrame) -> pd.DataFrame:
    """Per recipe: the three exact matches and the utterances where generation and the scorer disagree."""
    out = []
    for recipe, part in per_utterance.groupby("recipe", sort=False):
        apart = part[(part["generated"] != part["teacher_forced"]) | (part["generated_fast"] != part["teacher_forced"])]
        out.append({"recipe": recipe, "utterances": len(part), "teacher-forced EM": part["teacher_forced"].mean(),
                    "generated EM": part["generated"].mean(), "generated EM (fast_decoding)":
                    part["generated_fast"].mean(), "utterances that disagree": len(apart)})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--items", type=int, default=40, help="test utterances scored both ways")
    parser.add_argument("--work", type=Path, default=Path("/tmp/parse_em"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.items < 1:
        parser.error(f"--steps {args.steps} and --items {args.items} must be >= 1")
    cfg = ParseConfig.preset("cpu-long").override(steps=args.steps, test_examples=args.items,
                                                  warmup_steps=max(1, args.steps // 10))
    table = summary(compare(cfg, args.work))
    text = table.to_markdown(index=False, floatfmt=".3f")
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            "# Teacher-forced vs generated exact match, utterance by utterance (chapter 05's parsing study)\n\n"
            f"cpu-long's parsing recipe fine-tuned for {args.steps} steps (warm-up {cfg.warmup_steps}); the first "
            f"{args.items} test utterances. Command: `python benchmarks/parse_em_identity.py --steps {args.steps} "
            f"--items {args.items}`.\n\n{text}\n")


if __name__ == "__main__":
    main()
