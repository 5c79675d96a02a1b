# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · LayerSkip: layer dropout, the early-exit loss and self-speculative decoding
#
# LayerSkip (Elhoushi et al.; `shared/papers/004_*.txt`) trains one model to be an ensemble of depths that share
# a single LM head: layer dropout that grows with depth, plus a cross-entropy loss at every layer's exit through
# the shared head. The shallow exits then draft tokens and the remaining layers verify them in one pass, reusing
# the drafts' KV cache and layer-E states, so greedy output stays exactly the full model's. This chapter builds
# the whole path in one library (`rlib.layerskip`) and regenerates, at our scale:
#
# * per-exit quality after training from scratch with each recipe, baseline vs LD, EE and LD+EE (Figs. 8, 10),
#   Table 1's middle-vs-last layer, the middle exit during training (Fig. 11), exponential vs constant dropout
#   (Fig. 12) and the exit-loss curricula;
# * self-speculative decoding over exit layer E and draft length d: acceptance, time per token and speedup
#   (Tables 2-5, 10), cache reuse on and off (Table 6), and transformers' own `assistant_early_exit` side by side.
#
# Not yet here (see the chapter's issue): continual pretraining of SmolLM2 and code fine-tuning with LayerSkip.

# %% tags=["parameters"]
profile: str = "smoke"  # smoke | cpu | gpu (presets in rlib.layerskip.grid.LayerSkipConfig)
out_dir: str | None = None  # output folder; None = runs/interactive/<profile>/05_layerskip
seed: int = 0  # seeds python, numpy and torch (the runs' own seeds are in the presets)

# %%
import pandas as pd

from rlib import book, experiments
from rlib.layerskip import grid, schedules, tables
from rlib.layerskip import plots as ls_plots
from rlib.layerskip.speculative import self_speculative_generate
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss

cfg = grid.LayerSkipConfig.preset(profile)
run = book.start("05_layerskip", profile, out_dir, seed, cfg)
work = experiments.work_dir(profile, "05_layerskip")
cfg

# %% [markdown]
# ## The schedules (Eq. 1-6)
#
# Layer l skips its block for a sample with probability p(l, t) = S(t) D(l) p_max, D(l) = 2^(l/(L-1)) - 1 (zero at
# the first layer, one at the last), S(t) ramping the same way over training when pretraining from scratch. The
# exit after layer l gets loss weight e(l) ∝ l(l+1)/2 (scaled by e_scale, the last layer kept heavy), normalised
# over the layers the curriculum enables at step t. For this chapter's model, at the end of training:

# %%
layers = cfg.n_layers
weights = schedules.exit_loss_weights(layers, cfg.e_scale, "all")
rotation = schedules.exit_loss_weights(layers, cfg.e_scale, "rotational", step=layers // 2, total_steps=cfg.steps,
                                       rotation=cfg.rotation or layers - 1)
run.table(pd.DataFrame({"layer": range(layers),
                        "dropout_rate": schedules.dropout_rates(layers, cfg.p_max),
                        "dropout_rate_const": schedules.dropout_rates(layers, cfg.p_max, layer_schedule="constant"),
                        "exit_weight_all": weights, f"exit_weight_rotational_step_{layers // 2}": rotation}),
          "schedules");

# %% [markdown]
# Dropped samples skip the block entirely and pass through unchanged; only the kept rows run it, with masks drawn
# from a generator that every data-parallel rank seeds alike:

# %%
book.show_source(LayerSkipDecoder.forward)
book.show_source(LayerSkipLoss.loss)

# %% [markdown]
# ## Training from scratch: what each ingredient does (Figs. 8, 11, 12)
#
# Every recipe trains the same deep, narrow Llama-style model (untied head) on the same tokens and steps:

# %%
results = grid.run_grid(cfg, work)
exits = run.table(tables.exit_table(results), "exits")
run.figure(ls_plots.plot_exit_curves(exits, "Held-out perplexity at every exit"), "exit_curves")
run.table(tables.mid_last_table(results, cfg.middle_exit, cfg.n_layers), "middle_vs_last");

# %% [markdown]
# Fig. 11 tracks the middle exit during training: without an exit loss nothing ties the middle layers' states to
# the head, and the paper sees their perplexity rise as training goes on. Fig. 12 compares the exponential
# per-layer dropout with a constant rate of the same mean. The curricula trade exit quality against the cost of
# one extra head per enabled exit:

# %%
run.figure(ls_plots.plot_probe(tables.probe_curves(results), "Middle (dashed) and last (solid) exit during training"),
           "probe")
fig12 = [r for r in ("ld", "ld_const", "baseline") if r in cfg.recipes]
run.figure(ls_plots.plot_train_loss(tables.train_curves(results, tuple(fig12)), "Training loss: dropout schedules"),
           "train_loss")
run.table(tables.curriculum_table(results, cfg.middle_exit, cfg.n_layers), "curricula");

# %% [markdown]
# ## Self-speculative decoding (Tables 2-6, 10)
#
# Draft d tokens with the first E layers, verify them with one pass of the rest, commit the agreeing prefix plus the
# verifier's next token. With the shared KV cache and the exit-query cache ("kvq") the verifier starts at layer E;
# "kv" reruns layers below E for the drafted tokens, "none" gives the draft its own cache (as transformers'
# `assistant_early_exit` does, timed alongside on the exported weights). Batch 1, greedy, EOS ignored:

# %%
book.show_source(self_speculative_generate)

# %%
decoding = run.table(grid.decoding_table(cfg, work), "decoding")

# %% [markdown]
# ## Claims

# %%
claims = run.table(pd.concat([tables.training_claims(results, cfg.middle_exit, cfg.n_layers),
                              tables.decoding_claims(decoding)], ignore_index=True), "claims")
for row in claims.itertuples():
    run.metric(f"claim/{row.claim}", row.held)
run.finish()
