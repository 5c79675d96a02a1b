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
# # 3 · Mixture-of-Recursions: routed depth per token
#
# Chapters 1 and 2 gave every token the same number of loops. *Mixture-of-Recursions* (Bae, Kim et al.;
# `shared/papers/001_*.txt`) trains a router per recursion that lets only some tokens continue, so that hard
# tokens get more depth and the batch shrinks as it goes deeper; it caches keys and values only for the tokens
# that reach each depth (or shares recursion 1's). Models are trained from scratch at SmolLM-like shapes scaled
# down by the profile, on the poetry corpus. This chapter regenerates, at that scale:
#
# * Table 3 and Fig. 3: vanilla, the fixed-depth Recursive model, MoR expert-choice and token-choice at equal
#   training FLOPs and at equal tokens, with validation loss against FLOPs spent;
# * Sec. 3.1's training time and peak memory of MoR-2 against vanilla at equal tokens, measured step by step;
# * Tables 4/10/11: router design rows; Table 8 / Fig. 6: parameter-sharing strategies; Table 12: KV sharing;
# * Fig. 5c: test-time depth scaling; Fig. 5b and 9: router outputs; Table 14: depth per token over real text;
# * Figs. 7 and 8: key/value norms and similarities across depths; Table 2's KV-memory model against real bytes;
# * Table 9: up-training the book's pretrained SmolLM2-135M with each sharing strategy and initialization;
# * the decode-time question the paper leaves open: does the causal router reproduce the training top-k?
#
# The `cpu` profile keeps this chapter within 40 minutes on 2 cores: Table 3's isoFLOP grid, Fig. 3 at two budgets and
# the analyses of the trained models. The `cpu-long` profile reads its runs back and adds the studies that do not fit:
# every run at the ablation budget (the router designs of Tables 4/10/11 with Fig. 5b / 9, the sharing strategies of
# Table 8, the KV sharing of Table 12), Fig. 3's middle budget, the gate ablation (ours), Table 13's relaxations,
# Fig. 5a's compute-optimal grid and Table 9's up-training. The book's claims ledger takes each of their rows from
# the promoted `cpu-long` run and names that profile.

# %% tags=["parameters"]
profile: str = "smoke"  # smoke | cpu | cpu-long | gpu (presets in rlib.mor.config.MoRConfig)
out_dir: str | None = None  # output folder; None = runs/interactive/<profile>/03_mixture_of_recursions
seed: int = 0  # seeds python, numpy and torch (the runs' own seeds are in the variants)
budget: float | None = None  # isoFLOP budget (forward FLOPs, paper convention); None keeps the preset

# %%
from rlib.book import check_parameters

check_parameters(globals())  # the parameters above and papermill's -p values: names, types, ranges

# %%
from rlib import book, gpu_results
from rlib import experiments as grid
from rlib.config import runs_profile
from rlib.mor import (
    analysis,
    budget_sweep,
    claims,
    compute_optimal,
    config,
    experiments,
    plots,
    tables,
    throughput,
    train_cost,
    uptrain,
    vanilla_kv,
)
from rlib.mor.model import MoRDecoder
from rlib.mor.serving import MoRProgram
from rlib.recursive.config import RecursiveConfig
from rlib.recursive.experiments import work_dir as recursive_work_dir

cfg = config.MoRConfig.preset(profile).override(budget=budget)
run = book.start("03_mixture_of_recursions", profile, out_dir, seed, cfg)
work = grid.work_dir(profile, "03_mixture_of_recursions")
cfg

# %% [markdown]
# ## The model: a router before every recursion
#
# Middle-Cycle sharing keeps a unique first and last layer around a block of shared layers applied Nr times.
# Before recursion r, expert-choice keeps the top-k_r tokens (k_r = (Nr - r + 1)/Nr of the sequence) among
# those kept at r - 1, and updates them as x + g·f(x) with g = 0.1·sigmoid(router logit). The kept tokens are
# gathered with their original positions, run through the shared layers, and scattered back:

# %%
book.show_source(MoRDecoder._run_subset)

# %% [markdown]
# ## FLOPs-matched budgets
#
# The paper counts forward FLOPs only, linear maps as 2 × parameters and attention over the causal half
# (App. C). `rlib.mor.flops` reproduces the paper's per-token FLOPs and every isoFLOP step count of the
# released 360M configs to within one step (`tests/test_mor_flops.py`). At this chapter's shapes:

# %%
run.table(tables.budgets_table(cfg), "budgets")
run.table(tables.paper_budget_table(), "paper_budgets");

# %% [markdown]
# ## Training every model (Table 3, Fig. 3)
#
# Each run is cached under `runs/.work/<profile>/03_mixture_of_recursions/<run>/`; an interrupted chapter resumes
# where it stopped. Validation NLL (top-k routing, as the paper evaluates) is logged during training. The missing
# runs train one per core, and the budget sweep's shorter runs (further down) train in the same pool after them.

# %%
runs = config.variants(cfg)
sweep_cfg = config.BudgetSweepConfig.preset(profile)
print(f"{len(runs)} runs:", ", ".join(v.name for v in runs))
kv_study = vanilla_kv.VanillaKVConfig.preset(profile)  # Table 12's vanilla rows (below; cpu-long)
results = experiments.run_grid(cfg, work, also=(*budget_sweep.grids(cfg, sweep_cfg, work),
                                                *vanilla_kv.grids(cfg, kv_study, work)))
main = run.table(tables.main_table(results), "main")
curves = tables.curves(results)
run.figure(plots.plot_curves(curves, f"Validation NLL vs training FLOPs (isoFLOP budget {cfg.budget:.2g})"),
           "loss_vs_flops");

# %% [markdown]
# Table 3 also reports average few-shot accuracy over six benchmarks. The book scores the first seed of each main
# run on its two verse tasks with their standard 0 shots (the next line among four, length-normalised as the paper
# normalises by byte length; the cloze word, plain as for LAMBADA); routed models decide causally here:

# %%
if cfg.fewshot_items:
    run.table(tables.fewshot_table(results), "fewshot");

# %% [markdown]
# The curves above show one schedule per model. Figure 3 instead trains each model anew at several budgets;
# the sweep below retrains Vanilla, Recursive and MoR at fractions of the budget (first seed; the cpu profile at a
# quarter, `cpu-long` also at half):

# %%
sweep = budget_sweep.run_sweep(cfg, sweep_cfg, work)
budgets = run.table(tables.budget_sweep_table(results, sweep, cfg), "budget_sweep")
run.figure(plots.plot_budgets(budgets, "Test NLL against the isoFLOP budget"), "budget_sweep");

# %% [markdown]
# ## Compute-optimal model size (Fig. 5a)
#
# Figure 5a fits, for each model and budget, a polynomial to NLL against model size and marks its minimum: the
# compute-optimal size N*(C). The paper's claim is that MoR's path of optima is the flattest, so that under a fixed
# budget MoR should be made larger and trained shorter. The book trains Vanilla, Recursive and MoR at several widths
# (depth, head size and FFN ratio fixed) and budget fractions, first seed; the chapter's own width reads its runs
# back from the main grid and the sweep above. A star is hollow when the fitted minimum lies outside the sampled
# widths, i.e. extrapolated. The grid is the `cpu-long` profile's (`rlib.mor.compute_optimal.ComputeOptimalConfig`).

# %%
study = compute_optimal.ComputeOptimalConfig.preset(profile)
if study.widths:
    grid = run.table(tables.compute_optimal_table(compute_optimal.run_grid(cfg, study, work)), "compute_optimal")
    fits = run.table(compute_optimal.fit_optima(grid), "compute_optimal_fit")
    path = run.table(compute_optimal.optimal_path(fits), "optimal_path")
    run.figure(plots.plot_compute_optimal(grid, fits, path, "Test NLL against model size per budget; stars: fitted "
                                          "optima"), "compute_optimal");

# %% [markdown]
# ## Router design (Tables 4, 10, 11)
#
# All at the ablation budget (equal tokens): the `cpu-long` profile's runs (the cpu profile has none of them).
# Expert-choice rows report the dead-token ratio (positions never
# selected at the last step) and the sampling accuracy (the causal decision sigmoid ≥ 0.5 agrees with the
# top-k); token-choice rows report MaxVio and the entropy of the mean routing distribution.

# %%
if cfg.router_rows:
    run.table(tables.router_table(results), "routers");

# %% [markdown]
# ### Token-choice load against training steps (App. F.3)
#
# Table 11 reports MaxVio at the end of training; the text adds that token-choice "often struggles to balance loads
# among its heterogeneous experts, even for nearly half of the training steps" (Sec. 4.2) and "still struggles to
# achieve balance during quite long initial stage" (App. F.3). Every token-choice run logs the MaxVio of each
# training step's tokens (the recursion depth each token was routed to); the figure shows the final design's runs
# (and, in `cpu-long`, the router rows), against the paper's end-of-training 0.266 and a random router's 0.007.

# %%
load_trace = run.table(tables.load_trace_table(results), "load_trace", show=False)
if len(load_trace):
    run.table(tables.load_imbalance_table(load_trace), "load_imbalance")
    run.figure(plots.plot_load_trace(load_trace, "Token-choice MaxVio per training step",
                                     tables.PAPER_FINAL_MAXVIO, tables.PAPER_RANDOM_MAXVIO), "load_trace");

# %% [markdown]
# ## The gate or the routing? (ours)
#
# MoR-EC adds each recursion as x + g f(x), with the router's score g (alpha 0.1 times a sigmoid), while the
# Recursive baseline runs x <- f(x): the two differ in routing *and* in a gate. The paper has no ablation that
# separates them, so the book trains, at the same isoFLOP budget and seeds as the main comparison: MoR-EC with the
# gate scaled by 1, MoR-EC with no gate (x <- f(x) for the kept tokens; its router then learns only from its
# auxiliary loss), and the Recursive model with MoR's gate on every token (capacity 1 at every recursion). Six runs:
# the `cpu-long` profile's.

# %%
if cfg.gate_ablations:
    run.table(tables.gate_table(results, cfg.n_recursions), "gates");

# %% [markdown]
# ## Parameter sharing (Table 8) and KV sharing (Table 12)
#
# At the ablation budget: the `cpu-long` profile's runs.

# %%
if cfg.sharings:
    run.table(tables.sharing_table(results), "sharing")
if cfg.kv_share_rows or cfg.router_rows:  # recursion-wise caching rows at least
    run.table(tables.kv_table(results), "kv_sharing");

# %% [markdown]
# Table 12 also pretrains vanilla models whose layers share keys and values across depth, in groups of 2 or 3
# consecutive (Seq) or cyclic (Cyc) layers, and finds that sharing "even improves the performance of vanilla models".
# Each shared model here starts from its unshared reference's weights (same seed, same depth: the loop-3 pair at
# the multiple of 3 nearest L, as the paper trains 30 layers beside 32) and reads the same batches
# (`rlib.mor.vanilla_kv`). Figure 4c puts every architecture's pair side by side:

# %%
if kv_study.loops:
    kv_vanilla = run.table(vanilla_kv.kv_table(vanilla_kv.run_grid(cfg, kv_study, work)), "kv_sharing_vanilla")
    run.figure(plots.plot_kv_sharing(run.tables.get("kv_sharing"), kv_vanilla,
                                     "Fig. 4c: NLL without and with KV sharing"), "kv_sharing");

# %% [markdown]
# ## Relaxing the sharing (Table 13)
#
# The paper relaxes the Recursive Middle-Cycle model trained from scratch and finds no substantial gain: a trainable
# vector per recursion times its output (Enc), a LoRA on the query and value projections at every recursion depth,
# and an adaptation prompt per depth, the last also with recursive KV sharing. The LoRA rank and the prompt length
# scale with this chapter's width and context (`relax_rank`, `relax_len`); DoRA has no adapter in the book. Four
# runs at the ablation budget: the `cpu-long` profile's.

# %%
if cfg.relaxations:
    run.table(tables.relaxation_table(results), "relaxation");

# %% [markdown]
# ## Test-time depth scaling (Fig. 5c)
#
# The same trained models, evaluated with at most d recursions.

# %%
depth = run.table(tables.depth_table(results), "depth_scaling")
run.figure(plots.plot_depth_scaling(depth, "Test NLL vs the recursion cap"), "depth_scaling");

# %% [markdown]
# ## What the routers output (Fig. 5b, Fig. 9)

# %%
vocab = cfg.text().vocabulary()
windows = experiments.windows(cfg)["test"]
if cfg.router_rows:  # the router designs' models at the ablation budget (cpu-long)
    outputs = tables.router_output_tables(cfg, work, windows)
    run.figure(plots.plot_router_outputs(outputs, "Router outputs: kept by the top-k vs not"), "router_outputs");
    run.table(tables.router_separation_table(outputs), "router_separation")

# %% [markdown]
# ## Does decoding reproduce the training top-k?
#
# Training picks the top-k over the whole sequence, which a decoder cannot see. The aux loss trains the router's
# own logit to say "top-k or not", so at decode each token decides alone (sigmoid ≥ 0.5). We decode test windows
# token by token with the KV cache and compare every token's depth with the depth the top-k gives it.

# %%
import pandas as pd  # noqa: E402

ec = experiments.main_model(cfg, work, "ec")
agreement = analysis.decode_agreement(ec, windows[: cfg.decode_windows])
run.table(pd.DataFrame([agreement]), "decode_agreement");

# %% [markdown]
# ## Depth per token over real text (Table 14)

# %%
texts, depths = tables.depth_text(cfg, ec, vocab, windows[:4])
run.table(tables.token_depth_table(texts, depths), "token_depths", show=False)
run.figure(plots.plot_token_depths(texts, depths, cfg.n_recursions, "Recursion depth per token (causal routing)"),
           "token_depths");

# %% [markdown]
# ## Keys and values across depths (Figs. 7, 8) and Table 2's KV-memory model

# %%
geometry = analysis.kv_geometry(experiments.main_model(cfg, work, "rec"), windows[:4])
run.figure(plots.plot_kv_geometry(geometry, "Recursive model: norms and cross-depth similarity"), "kv_geometry")
for name, frame in tables.kv_geometry_tables(geometry).items():
    run.table(frame, name, show=False)

# %% [markdown]
# The same prefill, counted: the bytes each trained model's cache holds, and the FLOPs it executed (torch's counter:
# every matmul and each attention call's score rectangle). Sec. 4.3's footnote says sharing attends more (its
# deeper recursions' queries see every token's keys) but projects fewer keys and values, and saves FLOPs overall:

# %%
kv_bytes = run.table(tables.kv_bytes(cfg, work, windows[:4]), "kv_bytes");

# %% [markdown]
# ## Throughput: continuous depth-wise batching for real (Fig. 4a)
#
# The book's one serving engine (`rlib.serving`) with `rlib.mor.serving.MoRProgram` runs every slot's current
# token through one pass of the shared block per iteration, whatever its recursion, and sends tokens whose router
# stops them straight to the last layer and the head. Vanilla runs the same engine with continuous sequence-wise
# batching. "B = Max" gives each MoR model the larger batch its smaller KV cache allows (Table 2), as the paper's
# relative maximum batch does.
#
# The workload follows App. D where a small run can: each request's generation length is drawn from a normal
# distribution whose mean keeps the paper's ratio of generation length to training context (256 new tokens for a
# 2,048-token context; here `seq_len / 8`), with a standard deviation of a quarter of the mean, which is ours (the
# paper gives none), and every model serves the same requests. Two things differ: the paper queues 1K requests, here
# 4 x `decode_windows`, and its requests start "without any input prefix", while these are each prompted with
# `seq_len / 8` held-out tokens, since greedy decoding from an empty prefix would give every request the same text.

# %%
book.show_source(MoRProgram._recursion_pass)
speed = run.table(throughput.throughput_table(cfg, work, results), "throughput")
run.figure(plots.plot_throughput(speed, "Quality vs measured decode throughput"), "throughput");

# %% [markdown]
# ## Training time and peak memory at equal tokens (Sec. 3.1)
#
# The paper's fixed-token MoR-2 "reduces training time by 19% and cuts peak memory usage by 25%" against vanilla.
# At equal tokens both models take the same steps on batches of the same shape, so the book times the chapter's own
# training step for each model, each in a fresh process that also reads its peak memory. The models take turns in
# paired rounds, so a slow spell hits both models of a round alike. The peak splits into the training state
# (parameters, gradients, AdamW moments) and the rest:

# %%
if cfg.cost_rounds:
    cost = run.table(train_cost.train_cost_table(cfg), "train_cost", show=False)
    run.table(train_cost.cost_summary(cost), "train_cost_summary")
    paper = {"step time": train_cost.PAPER_TIME_RATIO, "peak memory": train_cost.PAPER_MEMORY_RATIO}
    run.figure(plots.plot_train_cost(cost, paper, f"MoR-2 EC vs vanilla, {cfg.tokens_per_step():,} tokens a step"),
               "train_cost");

# %% [markdown]
# ## Up-training a pretrained model with each sharing strategy (Table 9)
#
# The paper also ties the layers of a pretrained SmolLM checkpoint and keeps training it. Here the book's SmolLM2-135M
# (30 layers) becomes a 2-loop model under each sharing order and initialization of chapter 1's converter
# (Cycle and Sequence: 15 shared layers; Middle-*: 1 + 14 + 1), and every model gets the same short up-training.
# The "loop 1" rows run the same unique layers once, without recursion; the full 30-layer model up-trained
# the same way is the reference. NLL is on the poetry test split, before and after up-training. Sixteen runs of a
# 135M model take about half an hour on 2 cores: the `cpu-long` profile's. The up-training recipe is chapter 1's, so
# the full model and the Cycle-shared Step and Avg models are chapter 1's runs: where chapter 1 has trained and kept
# them, they start from its models (`trained_by`), and only the scoring is this chapter's.

# %%
up_cfg = config.UptrainConfig.preset(profile)
if config.uptrain_runs(up_cfg):
    chapter01 = (RecursiveConfig.preset(profile), recursive_work_dir(runs_profile(profile)))
    up_results = uptrain.run_grid(up_cfg, work / "uptrain", chapter01=chapter01)
    up_table = run.table(tables.uptrain_table(up_results), "uptraining")
    run.figure(plots.plot_uptraining(up_table, f"{up_cfg.model} up-trained with each sharing "
                                         f"({up_table['tokens'].iloc[0]:,} tokens per run)"), "uptraining");

# %% [markdown]
# ## On a GPU
#
# `make gpu-check` measures MoR decoding against vanilla through the same engine (Fig. 4a on real hardware). The table
# shows the newest GPU results folder (`benchmarks/results/gpu/`) with its device, date and commit, or says "not
# measured on a GPU": a CPU number never stands in a GPU column.

# %%
run.table(gpu_results.chapter_table("03"), "gpu_results");

# %% [markdown]
# ## Claims

# %%
run.ledger(claims.judge(run.tables, cfg, profile))
run.finish()
