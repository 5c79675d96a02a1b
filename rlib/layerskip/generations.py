"""Early-exit generations with their wrong tokens marked, next to self-speculation's (paper 004, Figs. 7 and 9).

The paper shows a few prompts continued by the model exiting early at one layer, with the incorrect phrases in red
(judged by hand: factually or grammatically wrong, or hallucinated), and states that self-speculative decoding fixes
them by verifying with the remaining layers. Our analog marks a token as wrong by a rule instead of by hand (ours):
an early-exit token is wrong where the full model, given the same prefix, would have chosen another token. The
self-speculative output is checked to equal the full model's greedy output, and its acceptance rate is reported.

    generation_examples   one row per prompt: the texts, the wrong-token count and the checks; plus one row per
                          generated early-exit token (its text, its position, whether it is wrong)
    generations_html      the rows rendered as the paper's figure: prompt in blue, wrong tokens in red
    text_decoder          token ids -> text, through a compact vocabulary first where a model has one
    figure_exit           the exit of a model of L layers at the paper's figures' depth (Fig. 7: 20 of 32)

Only prompts whose full-model greedy continuation passes the chapter's gate (distinct-2 >= 0.5, column
`passes_gate`) count for the claims: a continuation that loops says nothing about errors in text.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import pandas as pd
import torch

from rlib.config import ConfigError
from rlib.diversity import distinct_2
from rlib.layerskip.claims.base import GATE  # the chapter's distinct-2 gate
from rlib.layerskip.sampling import Sampling, TokenChooser, sampled_generate
from rlib.layerskip.speculative import early_exit_generate, self_speculative_generate
from rlib.model import Decoder
from rlib.model.decode_matmul import fast_decoding

__all__ = ["figure_exit", "generation_examples", "generations_html", "text_decoder", "wrong_tokens"]

PAPER_FIG7_DEPTH = 20 / 32  # Llama2 7B exiting at layer 20 (13B: 24 of 40, the same 0.6 within rounding)


PAPER_FIG9_DEPTH = 24 / 32  # Llama2 7B from scratch, exiting at layer 24


def figure_exit(n_layers: int, depth: float = PAPER_FIG7_DEPTH) -> int:
    """The exit at the paper's figure's relative depth for a model of `n_layers` (19 of 30 for Fig. 7's 20 of 32)."""
    if n_layers < 2:
        raise ConfigError(f"n_layers={n_layers}: early exit needs at least 2 layers")
    return min(n_layers - 1, max(1, round(depth * n_layers)))


def text_decoder(tokenizer, vocab=None) -> Callable[[list[int]], str]:
    """Token ids -> text with `tokenizer`; with a compact vocabulary (`rlib.vocab.CompactVocab`), its ids are mapped
    back to the tokenizer's first and <unk> is written as such."""
    def decode(ids: list[int]) -> str:
        if vocab is None:
            return tokenizer.decode(ids)
        source = vocab.decode(torch.tensor(ids, dtype=torch.long)).tolist()
        return "".join("<unk>" if i < 0 else tokenizer.decode([i]) for i in source)

    return decode


@torch.no_grad()
def wrong_tokens(model: Decoder, sequence: torch.Tensor, prompt_len: int,
                 sampling: Sampling | None = None) -> torch.Tensor:
    """sequence [1, T + n] (a prompt and n generated tokens) -> [n] bool: where token T + i is not the full model's
    choice after tokens 0 .. T + i - 1 (one teacher-forced pass of all layers): its greedy choice, or with `sampling`
    its sample under the same noise."""
    choose = TokenChooser(sampling, 1, sequence.shape[1], model.config.vocab_size, sequence.device)
    logits = model(sequence[:, :-1])  # [1, T + n - 1, V]
    full_next = choose(logits[:, prompt_len - 1:], prompt_len)[0]  # [n]: the full model's choice before each token
    return sequence[0, prompt_len:] != full_next


def generation_examples(model: Decoder, decode: Callable[[list[int]], str], prompts: list[torch.Tensor],
                        exit_layer: int, n_draft: int, new_tokens: int, label: str = "",
                        sampling: Sampling | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Continuations of each prompt [1, T] (EOS ignored): early exit at `exit_layer`, self-speculation at
    (`exit_layer`, `n_draft`) and plain decoding with every layer (over its KV cache); `decode` writes token ids as text
    (`text_decoder`). Greedy, or with `sampling` coupled sampling with noise seed + the prompt's index, where the
    columns named greedy (`self_speculative_equals_greedy`, `greedy_distinct_2`) mean the full model's sample.
    The decoders run inside `fast_decoding`, as every decoding table's (the self-speculative output is compared with
    the reference inside that one block). Returns (one row per prompt, one row per early-exit token)."""
    n_layers = len(model.plan)
    if not 1 <= exit_layer < n_layers:
        raise ConfigError(f"exit_layer={exit_layer} must be in 1..{n_layers - 1} (the model has {n_layers} layers)")
    if n_draft < 1 or new_tokens < 1 or not prompts:
        raise ConfigError(f"n_draft={n_draft} and new_tokens={new_tokens} must be >= 1, with at least one prompt")
    model.eval()
    summary, tokens = [], []
    with fast_decoding(model):  # every decoder of the figure in one block, as the decoding tables time them
        for index, prompt in enumerate(prompts):
            prompt = prompt.to(next(model.parameters()).device)
            t = prompt.shape[1]
            noise = None if sampling is None else Sampling(sampling.temperature, sampling.seed + index)
            early = early_exit_generate(model, prompt, new_tokens, exit_layer, eos_ids=(), sampling=noise)
            wrong = wrong_tokens(model, early, t, noise)  # [n]
            speculative, stats = self_speculative_generate(model, prompt, new_tokens, exit_layer, n_draft, eos_ids=(),
                                                           sampling=noise)
            greedy = sampled_generate(model, prompt, new_tokens, noise, use_cache=True)
            diversity = distinct_2(greedy[0, t:].tolist())
            pieces = [decode([tok]) for tok in early[0, t:].tolist()]
            for position, (piece, bad) in enumerate(zip(pieces, wrong.tolist())):
                tokens.append({"model": label, "prompt": index, "position": position, "token": piece, "wrong": bad})
            summary.append({
                "model": label, "prompt": index, "exit_layer": exit_layer, "n_draft": n_draft,
                "temperature": 0.0 if sampling is None else float(sampling.temperature),
                "prompt_text": decode(prompt[0].tolist()),
                "early_exit_text": "".join(f"[[{p}]]" if bad else p for p, bad in zip(pieces, wrong.tolist())),
                "wrong_tokens": int(wrong.sum()), "new_tokens": int(wrong.numel()),
                "first_wrong": int(wrong.nonzero()[0, 0]) if bool(wrong.any()) else -1,
                "self_speculative_text": decode(speculative[0, t:].tolist()),
                "self_speculative_equals_greedy": bool(torch.equal(speculative, greedy)),
                "acceptance": stats.acceptance,
                "greedy_distinct_2": diversity, "passes_gate": diversity >= GATE})
    return pd.DataFrame(summary), pd.DataFrame(tokens)


def generations_html(summary: pd.DataFrame, tokens: pd.DataFrame) -> str:
    """The examples as the paper's figure: per prompt, the prompt (blue) continued by early exit with its wrong tokens
    (red), then by self-speculation."""
    blocks = []
    for _, row in summary.iterrows():
        mine = tokens[(tokens["model"] == row["model"]) & (tokens["prompt"] == row["prompt"])]
        early = "".join(f'<span style="color:#c0392b;font-weight:600">{html.escape(t)}</span>' if bad
                        else html.escape(t) for t, bad in zip(mine["token"], mine["wrong"]))
        prompt = f'<span style="color:#1f5fa8">{html.escape(row["prompt_text"])}</span>'
        title = (f"{html.escape(str(row['model']))} prompt {row['prompt']}: early exit at layer {row['exit_layer']} "
                 f"({row['wrong_tokens']} of {row['new_tokens']} tokens wrong) / self-speculative, d = "
                 f"{row['n_draft']} (acceptance {row['acceptance']:.2f}, equals greedy: "
                 f"{'yes' if row['self_speculative_equals_greedy'] else 'NO'})")
        if float(row.get("temperature", 0) or 0) > 0:
            title = title.replace("equals greedy", f"equals the full model's sample at T={row['temperature']:g}")
        blocks.append(f'<div style="margin:0.6em 0"><div style="font-size:90%;color:#555">{title}</div>'
                      f'<pre style="white-space:pre-wrap;margin:0.2em 0">{prompt}{early}</pre>'
                      f'<pre style="white-space:pre-wrap;margin:0.2em 0">{prompt}'
                      f'{html.escape(row["self_speculative_text"])}</pre></div>')
    return "\n".join(blocks)
