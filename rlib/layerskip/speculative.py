"""Self-speculative decoding (paper 004, Sec. 4.3, App. 10.4, with the inventory's corrections in Sec. 1.5.2).

Each round drafts up to d tokens greedily with the first E layers and the shared head, then verifies them with one
pass of the remaining layers; the longest agreeing prefix of the drafts is committed, plus the verifier's own next
token (a correction, or a bonus when every draft agreed), so a round commits at least one token and every
committed token is the full model's greedy choice: the output equals greedy decoding token for token.

Cache reuse (Table 6), three ways:

    kvq    one KV cache for both stages (drafting fills layers < E for the verifier) and the exit-query cache: the
           layer-E inputs computed while drafting feed the verifier directly, so it runs only layers E..L-1
           (the last draft needs layers < E once more)                                            the paper's
    kv     the shared KV cache, but no exit-query cache: the verifier drops the drafts' layer < E entries and
           reruns all L layers over the drafted positions
    none   a separate draft cache for layers < E (what a separate draft model needs, and transformers'
           `assistant_early_exit` does): the draft stage prefills its own cache, the verifier runs all L layers

Draft vocabulary (beyond the paper): `draft_vocab` restricts the drafts to some token ids, so drafting computes only
those rows of the shared head. On a small model the head is a large share of a drafted token's cost (SmolLM2-135M's
576 x 49,152 head reads as many bytes as 8 of its 30 layers); a task's outputs use few distinct tokens. The
verifier still uses the whole head, so the output stays the full model's greedy output whatever the vocabulary; only
acceptance (a draft outside the vocabulary is never proposed) and the drafting cost change.

Sampling (ours, `rlib.layerskip.sampling`): with `sampling`, every token is chosen as the argmax of its logits / T plus
Gumbel noise fixed for its position, drafts and verification alike, so the output is a true sample at temperature T
and equals autoregressive sampling with the same noise token for token (greedy when `sampling` is None).

Batches: every row commits the same number of tokens per round, k + 1 with k the smallest accepted prefix over the
unfinished rows; a row that accepted more has draft k equal to its verifier token k, so committing the verifier's
token stays exact for it. A row that emitted an EOS is padded with the EOS, as `Decoder.generate` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rlib.config import ConfigError
from rlib.layerskip.sampling import Sampling, TokenChooser
from rlib.model import Decoder, KVCache

__all__ = ["REUSE_MODES", "SpeculativeStats", "accept_drafts", "draft_head", "early_exit_generate",
           "self_speculative_generate", "stopping_and_choice"]

REUSE_MODES = ("kvq", "kv", "none")


@dataclass
class SpeculativeStats:
    rounds: int = 0
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens committed (the official code's acceptance numerator)
    new_tokens: int = 0

    @property
    def acceptance(self) -> float:
        """accepted / drafted over the whole generation (the paper's token acceptance rate)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_round(self) -> float:
        return self.new_tokens / self.rounds if self.rounds else float("nan")


def _run(model: Decoder, depths: range, x: torch.Tensor, start: int, cache: KVCache | None,
         no_attention: frozenset[int] = frozenset(), no_mlp: frozenset[int] = frozenset()) -> torch.Tensor:
    """Run plan steps `depths` on hidden states x [B, T, D] at positions start..start + T - 1, appending to cache;
    the steps in no_attention / no_mlp skip that sublayer (Draft & Verify's drafter)."""
    batch, tokens, _ = x.shape
    positions = torch.arange(start, start + tokens, device=x.device).expand(batch, tokens)  # [B, T]
    ctx = model.context(positions, x.dtype, cache)
    for depth in depths:
        x = model.run_step(depth, x, ctx, attention=depth not in no_attention, mlp=depth not in no_mlp)
    return x


def _check(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int, exit_layer: int) -> None:
    n_layers = len(model.plan)
    if not model.plan.is_identity(model.config.n_layers):
        raise ConfigError("self-speculative decoding needs a plain decoder (identity execution plan)")
    if not 1 <= exit_layer <= n_layers:
        raise ConfigError(f"exit_layer={exit_layer} must lie in [1, {n_layers}] (the number of layers that draft)")
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if input_ids.dim() != 2 or input_ids.shape[1] < 1:
        raise ConfigError(f"input_ids must be [B, T] with T >= 1, got shape {tuple(input_ids.shape)}")


def _pad_after_eos(tokens: torch.Tensor, finished: torch.Tensor, eos: torch.Tensor, fill) -> torch.Tensor:
    """tokens [B, n]: everything after a row's first EOS (or the whole row if it had finished) becomes `fill`."""
    is_eos = torch.isin(tokens, eos)
    before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before each position
    done = finished[:, None] | (before > 0)
    return torch.where(done, fill, tokens)


def _trim(new: torch.Tensor, eos: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Cut the generated tokens [B, n] where greedy decoding would have stopped: max_new_tokens, or the step after
    which every row had emitted an EOS."""
    new = new[:, :max_new_tokens]
    is_eos = torch.isin(new, eos)
    if len(eos) and bool(is_eos.any(1).all()):
        first = is_eos.long().argmax(1)  # [B]
        new = new[:, :int(first.max()) + 1]
    return new


def stopping_and_choice(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int, eos_ids: tuple[int, ...] | None,
                        sampling: Sampling | None) -> tuple[torch.Tensor, torch.Tensor, TokenChooser]:
    """What every decoder here starts from: the stop ids [n_eos] (default the model's), the id a finished row is padded
    with, and the token chooser of every position it can generate (greedy, or `sampling`'s noise)."""
    eos_ids = model.config.eos_ids if eos_ids is None else eos_ids
    eos = torch.tensor(eos_ids, dtype=torch.long, device=input_ids.device)
    fill = eos[0] if len(eos) else torch.tensor(0, device=input_ids.device)
    choose = TokenChooser(sampling, input_ids.shape[0], input_ids.shape[1] + max_new_tokens, model.config.vocab_size,
                          input_ids.device)
    return eos, fill, choose


def accept_drafts(drafted: torch.Tensor, verified: torch.Tensor, finished: torch.Tensor, eos: torch.Tensor,
                  fill) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Verification's outcome for drafts [B, n] and the verifier's choices [B, n + 1] after each prefix: the tokens to
    commit [B, k + 1] (the k drafts every unfinished row agrees on, then the verifier's next token), k, and the
    updated `finished` [B] (module docstring: batches)."""
    n_drafted = drafted.shape[1]
    agree = torch.cumprod((drafted == verified[:, :n_drafted]).long(), dim=1).sum(1)  # [B] accepted prefix
    accepted = int(agree[~finished].min()) if bool((~finished).any()) else n_drafted
    commit = torch.cat([drafted[:, :accepted], verified[:, accepted:accepted + 1]], dim=1)  # [B, k + 1]
    commit = _pad_after_eos(commit, finished, eos, fill)
    return commit, accepted, finished | torch.isin(commit, eos).any(1)


def draft_head(model: Decoder, draft_vocab: torch.Tensor | None, choose: TokenChooser | None = None):
    """(hidden [B, 1, D], its token's position) -> the draft [B, 1]: the shared head's argmax (greedy, or perturbed by
    `choose`'s noise for that position) over the whole vocabulary, or over `draft_vocab` only (the rows of the head
    for those ids, gathered once)."""
    choose = choose or TokenChooser(None, 0, 0, 0)
    if draft_vocab is None:
        return lambda hidden, position: choose(model.head(hidden), position)
    vocab = draft_vocab.to(torch.long).flatten()
    size = model.config.vocab_size
    if vocab.numel() == 0 or int(vocab.min()) < 0 or int(vocab.max()) >= size:
        span = f" in [{int(vocab.min())}, {int(vocab.max())}]" if vocab.numel() else ""
        raise ConfigError(f"draft_vocab must hold 1 or more token ids, each in [0, {size}); got {vocab.numel()} "
                          f"ids{span}")
    weight = model.embed.weight if model.lm_head is None else model.lm_head.weight
    vocab = vocab.to(weight.device)
    rows = weight[vocab]  # [V', D]
    cap = model.config.logit_softcap if choose.sampling is not None else None  # monotone: greedy needs none

    def head(hidden: torch.Tensor, position: int) -> torch.Tensor:
        logits = F.linear(model.final_norm(hidden), rows)  # [B, 1, V']
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return vocab[choose(logits, position, vocab)]  # [B, 1]

    return head


@torch.no_grad()
def self_speculative_generate(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int, exit_layer: int,
                              n_draft: int, reuse: str = "kvq", eos_ids: tuple[int, ...] | None = None,
                              draft_vocab: torch.Tensor | None = None,
                              sampling: Sampling | None = None) -> tuple[torch.Tensor, SpeculativeStats]:
    """Self-speculative decoding: prompt [B, T] -> ([B, T + n], stats); equal to `model.generate(...)` greedy, or with
    `sampling` to `rlib.layerskip.sampling.sampled_generate` with the same noise.

    exit_layer  E, the layers that draft (E = L drafts with the whole model: every draft is accepted)
    n_draft     d, drafts per round (0 = plain autoregressive decoding through this code path)
    reuse       "kvq" | "kv" | "none" (module docstring)
    draft_vocab token ids [V'] the drafts are restricted to (module docstring; default the whole vocabulary)
    sampling    temperature and noise seed (module docstring; default greedy)
    """
    _check(model, input_ids, max_new_tokens, exit_layer)
    if reuse not in REUSE_MODES:
        raise ConfigError(f"reuse={reuse!r} unknown; choose from {list(REUSE_MODES)}")
    if n_draft < 0:
        raise ConfigError(f"n_draft={n_draft} must be >= 0")
    n_layers = len(model.plan)
    early, late = range(exit_layer), range(exit_layer, n_layers)
    eos, fill, choose = stopping_and_choice(model, input_ids, max_new_tokens, eos_ids, sampling)
    seq, prompt_len = input_ids, input_ids.shape[1]
    propose = draft_head(model, draft_vocab, choose)
    cache = model.new_cache()
    draft_cache = model.new_cache() if reuse == "none" else cache
    cached = draft_cached = 0  # committed tokens whose keys/values each cache holds (in every slot it uses)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    stats = SpeculativeStats()
    while seq.shape[1] - prompt_len < max_new_tokens and not bool(finished.all()):
        remaining = max_new_tokens - (seq.shape[1] - prompt_len)
        pending = seq[:, cached:]  # [B, p]: committed tokens the verifier has not seen
        # ---- draft with the first E layers ----
        drafts: list[torch.Tensor] = []
        exit_states: list[torch.Tensor] = []
        tokens, start = seq[:, draft_cached:], draft_cached
        for _ in range(min(n_draft, remaining - 1)):
            hidden = _run(model, early, model.embed_tokens(tokens), start, draft_cache)  # [B, t, D]: layer-E input
            exit_states.append(hidden)
            draft = propose(hidden[:, -1:], start + tokens.shape[1])  # [B, 1]
            drafts.append(draft)
            start, tokens = start + tokens.shape[1], draft
            if bool((torch.isin(draft[:, 0], eos) | finished).all()):
                break
        n_drafted = len(drafts)
        drafted = torch.cat(drafts, dim=1) if drafts else seq[:, :0]  # [B, n]
        # ---- verify with one pass ----
        verify_ids = torch.cat([pending, drafted], dim=1)  # [B, p + n]
        if reuse == "kvq" and n_drafted:
            last = _run(model, early, model.embed_tokens(drafted[:, -1:]), start, cache)  # the last draft, layers < E
            layer_e = torch.cat([*exit_states, last], dim=1)[:, -verify_ids.shape[1]:]  # [B, p + n, D]
            hidden = _run(model, late, layer_e, cached, cache)
        else:
            if reuse == "kv":
                cache.crop(cached, early)  # forget the drafts' early-layer entries: they are recomputed below
            hidden = _run(model, range(n_layers), model.embed_tokens(verify_ids), cached, cache)
        verified = choose(model.head(hidden[:, pending.shape[1] - 1:]), seq.shape[1])  # [B, n + 1]
        commit, accepted, finished = accept_drafts(drafted, verified, finished, eos, fill)
        seq = torch.cat([seq, commit], dim=1)
        cached = seq.shape[1] - 1  # every committed token but the verifier's last one has keys/values now
        cache.crop(cached)
        if reuse == "none":
            draft_cached = min(start, cached)  # what drafting fed, minus rejected drafts
            draft_cache.crop(draft_cached)
        else:
            draft_cached = cached
        stats.rounds += 1
        stats.drafted += n_drafted
        stats.accepted += accepted
    new = _trim(seq[:, prompt_len:], eos, max_new_tokens)
    stats.new_tokens = new.shape[1]
    return torch.cat([input_ids, new], dim=1), stats


@torch.no_grad()
def early_exit_generate(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int, exit_layer: int,
                        eos_ids: tuple[int, ...] | None = None, sampling: Sampling | None = None) -> torch.Tensor:
    """Decoding with the first E layers and the shared head only (Sec. 4.2), greedy or with `sampling`:
    [B, T] -> [B, T + n]."""
    _check(model, input_ids, max_new_tokens, exit_layer)
    eos, fill, choose = stopping_and_choice(model, input_ids, max_new_tokens, eos_ids, sampling)
    cache = model.new_cache()
    tokens, start, new = input_ids, 0, []
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    for _ in range(max_new_tokens):
        hidden = _run(model, range(exit_layer), model.embed_tokens(tokens), start, cache)
        start += tokens.shape[1]
        token = torch.where(finished, fill, choose(model.head(hidden[:, -1:]), start)[:, 0])  # [B]
        new.append(token)
        finished |= torch.isin(token, eos)
        if bool(finished.all()):
            break
        tokens = token[:, None]
    return torch.cat([input_ids, torch.stack(new, dim=1)], dim=1)
