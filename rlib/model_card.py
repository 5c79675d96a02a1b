"""The model card (README.md) of an exported book model: what it is, what the export did to it, how to use it.

For a looped or relaxed model (Relaxed Recursive Transformers, Sec. 2.1-2.3) the card lists, depth by depth,
the shared block that was copied and the LoRA ranks and norm deltas that were merged, so a reader knows that
the checkpoint no longer shares parameters although it computes the same function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlib.model import DecoderConfig

if TYPE_CHECKING:
    from rlib.export import ExportResult

__all__ = ["model_card"]


def _what_was_done(result: ExportResult) -> list[str]:
    record = result.unrolled
    depths = len(record.blocks)
    if not record.is_looped and not record.is_relaxed:
        return [f"A plain decoder of {depths} layers, written as its own architecture (`{result.architecture}`) "
                "with its weights unchanged."]
    lines = [f"The book model runs {record.n_blocks} unique block(s) at {depths} depths "
             f"(block order {list(record.blocks)}). transformers has no layer sharing, so the export is "
             f"**unrolled**: layer l is a copy of the block that runs at depth l, with that depth's attention "
             "window and rope theta."]
    if record.is_relaxed:
        lines.append("Its depth-wise adapters are **merged** into each depth's copy: every LoRA as "
                     "W' + B_l A_l (computed in fp32), every norm delta as w' + delta_l. The export computes "
                     "the relaxed model's function with no adapters left.")
    lines.append(f"Parameters: {result.parameters[0]:,} in the book model (shared blocks and adapters), "
                 f"{result.parameters[1]:,} in the export (one copy per depth).")
    return lines


def _depth_table(result: ExportResult) -> list[str]:
    record = result.unrolled
    if not record.is_looped and not record.is_relaxed:
        return []
    rows = ["| layer (depth) | block copied | LoRA merged (map: rank) | norm deltas merged |", "|---|---|---|---|"]
    for depth, block in enumerate(record.blocks):
        ranks = ", ".join(f"{path}: {rank}" for path, rank in record.lora_ranks[depth].items()) or "none"
        norms = ", ".join(record.norm_deltas[depth]) or "none"
        rows.append(f"| {depth} | {block} | {ranks} | {norms} |")
    return ["## Depth by depth", "", *rows, ""]


def model_card(result: ExportResult, source: str, config: DecoderConfig) -> str:
    """The README.md text of an export."""
    check = ("not checked" if result.max_abs_diff is None else
             f"transformers reloaded this folder and its logits on a fixed sequence of 32 tokens differ from the "
             f"book model's by at most {result.max_abs_diff:.2e}")
    folder = result.folder.name
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags: [rlib, recursive-transformer]",
        "---",
        "",
        f"# {folder}",
        "",
        f"Exported by `python -m rlib.export` from the recursive-depth transformers book. Source: `{source}` "
        f"({config.family} family). Architecture: `{result.architecture}`, {len(result.unrolled.blocks)} layers, "
        f"d_model {config.d_model}, vocabulary {config.vocab_size}. Tokenizer: `{result.tokenizer}`.",
        "",
        "## What the export did",
        "",
        *[line + "\n" for line in _what_was_done(result)],
        *_depth_table(result),
        "## Check",
        "",
        f"Logits: {check}.",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        f'generate = pipeline("text-generation", model="{folder}")',
        "```",
        "",
        "```bash",
        f"lm_eval --model hf --model_args pretrained={folder} --tasks book_cloze --include_path .cache/tasks",
        "```",
        "",
        "Licence: that of the source model (see `licence/` where present).",
        "",
    ]
    return "\n".join(lines)
