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
# * the motivation (Fig. 2): how many of a pretrained model's layers a generated token needs;
# * training from scratch with each recipe, baseline vs LD, EE and LD+EE, exit by exit (Fig. 8), the middle exit
#   during training (Fig. 11), exponential vs constant dropout (Fig. 12) and the exit-loss curricula;
# * LayerSkip on a pretrained model (SmolLM2-135M): continual pretraining read against the untouched model
#   (Table 1, Fig. 6) and code fine-tuning against plain fine-tuning (Fig. 10a), perplexity and task accuracy per exit;
# * task fine-tuning on a TOPv2-like semantic parsing task, plain vs LD+EE, exact match at every exit (Fig. 10b);
# * self-speculative decoding over exit layer E and draft length d: acceptance, time per token and speedup
#   (Tables 2-5, 10), cache reuse on and off (Table 6), and transformers' own `assistant_early_exit` side by side.

# %% tags=["parameters"]
profile: str = "smoke"  # smoke | cpu | gpu (presets: rlib.layerskip.config LayerSkipConfig, AdaptConfig,
# ParseConfig)
out_dir: str | None = None  # output folder; None = runs/interactive/<profile>/05_layerskip
seed: int = 0  # seeds python, numpy and torch (the runs' own seeds are in the presets)

# %%
from rlib.book import check_parameters

check_parameters(globals())  # the parameters above and papermill's -p values: names, types, ranges

# %%
from rlib import assets, book, gpu_results
from rlib import experiments as grid
from rlib.layerskip import (
    adapt,
    budget,
    claims,
    config,
    decode_costs,
    decode_study,
    exit_heads,
    experiments,
    generations,
    lr_study,
    paper_rate,
    parse_study,
    plots,
    quality,
    sampling,
    tables,
)
from rlib.layerskip.decoding import OutputLog, TimingLog
from rlib.layerskip.speculative import draft_head, self_speculative_generate
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss
from rlib.model.decode_matmul import decode_linear

cfg = config.LayerSkipConfig.preset(profile)
acfg = config.AdaptConfig.preset(profile)
pcfg = config.ParseConfig.preset(profile)
lcfg = lr_study.LRStudyConfig.preset(profile)
run = book.start("05_layerskip", profile, out_dir, seed, cfg)
work = grid.work_dir(profile, "05_layerskip")
cfg

# %%
acfg

# %%
pcfg

# %% [markdown]
# ## Why exit early? The layers a token needs (Fig. 2)
#
# The paper feeds HumanEval's first prompt to Llama1 7B, lets it complete greedily, and applies the final norm and
# LM head to every layer's output: on average a generated token is first predicted at layer 23.45 of 32, so even a
# perfect exit oracle saves at most 26 %. Here is the same probe on the embedded SmolLM2-135M (30 layers). Each
# column is a generated token; a filled cell means the exit after that layer already gives the model's final
# choice. "First" is the first such layer, "stable" the layer from which every later exit agrees (the paper's
# wording fits both):

# %%
tokenizer = assets.load_tokenizer(acfg.model)
source = adapt.load_source(acfg)
n_layers = source.config.n_layers
probe = decode_study.probe_models({"pretrained": source}, tokenizer, acfg.probe_tokens)["pretrained"]
print(repr(probe["text"]))
run.figure(plots.plot_layer_grid(probe["agree"], probe["tokens"], "SmolLM2-135M on HumanEval/0: which exits "
                                    "already predict each generated token"), "layer_grid_pretrained")
tables.probe_summary({"pretrained": probe["table"]}, n_layers)

# %% [markdown]
# ## The schedules (Eq. 1-6)
#
# Layer l skips its block for a sample with probability p(l, t) = S(t) D(l) p_max, D(l) = 2^(l/(L-1)) - 1 (zero at
# the first layer, one at the last), S(t) ramping the same way over training when pretraining from scratch. The
# exit after layer l gets loss weight e(l) ∝ l(l+1)/2 (scaled by e_scale, the last layer kept heavy), normalised
# over the layers the curriculum enables at step t. For the from-scratch model, at the end of training:

# %%
run.table(tables.schedule_table(cfg), "schedules");

# %% [markdown]
# Dropped samples skip the block entirely and pass through unchanged; only the kept rows run it, with masks drawn
# from a generator that every data-parallel rank seeds alike:

# %%
book.show_source(LayerSkipDecoder.forward)
book.show_source(LayerSkipLoss.loss)

# %% [markdown]
# ## Training from scratch: what each ingredient does (Figs. 8, 11, 12)
#
# Every recipe trains the same deep, narrow Llama-style model (untied head) on the same tokens and steps, here on
# Python code (Fig. 11's held-out set is The Stack). The recipes that the claims read with a seed spread run with
# every seed of the preset, the others with the first. The cpu profile trains the baseline and LD+EE, the two models
# the decoding tables need; cpu-long adds LD and EE alone, the ablations (among them LD with S(t) = 1, the setting
# Sec. 4.1.1 keeps for continual pretraining, against S_exp from scratch) and three seeds. The next section's runs on
# the pretrained model, and Table 8's runs at a higher learning rate, train in the same pool of workers (one per
# core), so that these short runs fill the cores while those long ones finish; those sections read them back.

# %%
results = experiments.run_grid(cfg, work, also=(adapt.grid(acfg, work / "pretrained"),
                                                *lr_study.grids(cfg, lcfg, work)))
exits = run.table(tables.exit_table(results), "exits")
run.figure(plots.plot_exit_curves(exits, "From scratch: held-out perplexity at every exit"), "exit_curves")
run.table(tables.mid_last_table(results, cfg.middle_exit, cfg.n_layers), "middle_vs_last");

# %% [markdown]
# `agree_last` is the share of held-out positions where an exit's greedy token is the last exit's: the acceptance a
# draft from that exit would get on real text, teacher-forced, so unaffected by what the model does when it
# generates on its own (below).
#
# Fig. 11 tracks the middle exit during training: without an exit loss nothing ties the middle layers' states to
# the head, and the paper sees their perplexity rise as training goes on. Fig. 12 compares the exponential
# per-layer dropout with a constant rate of the same mean. The curricula trade exit quality against the cost of
# one extra head per enabled exit:

# %%
probe_curves = run.table(tables.probe_curves(results), "probe_curves", show=False)
run.figure(plots.plot_probe(probe_curves, "Middle (dashed) and last (solid) exit during training"), "probe")
run.table(tables.train_curves(results), "train_curves", show=False)
run.table(tables.step_times(results), "step_times", show=False)
fig12 = [r for r in ("ld", "ld_const", "baseline") if r in cfg.recipes]
run.figure(plots.plot_train_loss(tables.train_curves(results, tuple(fig12)), "Training loss: dropout schedules"),
           "train_loss")
run.table(tables.curriculum_table(results, cfg.middle_exit, cfg.n_layers), "curricula");

# %% [markdown]
# ### One head for every exit (Sec. 2.1)
#
# Every exit here unembeds through the model's own head. The paper chose that over a dedicated head per layer, as
# earlier early-exit work trained, because it "makes training faster, require less memory consumption for both
# training and inference"; it gives no measurement. The chapter's LD+EE model trains a few steps with the shared
# head and again with a head of its own for each early exit (copies of the model's head, after the shared final
# norm; nothing else differs), in paired rounds, each model's steps in a fresh process so that its peak memory is
# its own (`rlib.layerskip.exit_heads` on `rlib.train_cost`). Ratios are the dedicated heads' over the same round's
# shared head, under the chapter's rotational curriculum and under the all-exits one, where every head gets a
# gradient at every step:

# %%
if cfg.cost_rounds:
    head_cost = run.table(exit_heads.head_cost_table(cfg), "exit_head_cost", show=False)
    run.table(exit_heads.head_cost_summary(head_cost), "exit_head_cost_summary")
    run.figure(plots.plot_head_cost(head_cost, f"A head per early exit vs one shared head, {cfg.n_layers} layers"),
               "exit_head_cost")
else:
    print("exit_head_cost: not measured (the preset's cost_rounds = 0)")

# %% [markdown]
# ### A higher learning rate for layer dropout? (Table 8)
#
# The paper pretrains from scratch at a higher peak rate when layer dropout is on, 8e-4 against 4e-4 (Llama 1.5B)
# and 3e-4 (Llama2 7B), because "layer dropout leads to higher accuracy when trained on higher learning rate"; it
# reports no run of the baseline at the higher rate. Here the baseline, LD and LD+EE train again at half and at
# twice the chapter's rate, each paired with its run at 1x (same weights, batches and schedule). The baseline's best
# rate stands for the paper's tuned one, and each layer-dropout recipe is compared there and at twice it; the
# baseline at twice its best is the control: if it gains as much, that rate was low for every recipe, not for layer
# dropout (`rlib.layerskip.lr_study`; the cpu profile leaves it to cpu-long). Every recipe trains at the same rate,
# 1.5e-3: the first such study, at the chapter's former 3e-3 (`benchmarks/results/ls_lr_cpu_long.md`), found every
# recipe best at the lowest rate it tried, half of that:

# %%
if lcfg.multipliers:
    lr_runs = run.table(lr_study.lr_table(lr_study.run(cfg, lcfg, work), cfg.n_layers), "lr_sensitivity")
    run.figure(plots.plot_lr_sensitivity(lr_runs, "From scratch: the last exit against the peak learning rate"),
               "lr_sensitivity")
else:
    print(config.left_out("Table 8's learning-rate study", profile, "05"))

# %% [markdown]
# ## LayerSkip on a pretrained model (Table 1, Figs. 6 and 10a)
#
# The paper continually pretrains Llama2 with LD+EE and reads every exit against the original model, and fine-tunes
# Llama1 on code with and without LayerSkip. Each study here starts every recipe from the same SmolLM2 weights and
# trains it on the same windows; "plain" is the same training without dropout or exit loss, the fair control for the
# last exit. Unlike the paper's Llamas, SmolLM2 ties its embedding and head. The continual study trains at Table 8's
# 3e-5 (Llama2 7B's rate), the code study at 1e-4 (Llama1 7B's; both measured against 3e-4 below). The runs:

# %%
adapt_results = adapt.run_grid(acfg, work / "pretrained", source=source)
run.table(tables.runs_table(adapt_results), "pretrained_runs");

# %% [markdown]
# Table 1's layout for each study: perplexity on each held-out corpus and accuracy on the book's local tasks, at the
# last and the middle exit. The task accuracies come from one pass per item over every exit, equal to lm-eval's own
# run with `--model_args ...,exit_layer=E` (`rlib.layerskip.exit_tasks`):

# %%
middle = n_layers // 2
for study in acfg.studies:
    run.table(tables.table_1(adapt_results, study.name, middle, n_layers), f"table_1_{study.name}",
              floatfmt=".3g")
    labels = {r: tables.label(r) for r in (config.SOURCE, *study.recipes)}
    exits_long, tasks_long = tables.exit_long(adapt_results), tables.task_long(adapt_results)
    run.figure(plots.plot_study_exits(exits_long[exits_long["study"] == study.name],
                                         tasks_long[tasks_long["study"] == study.name], labels,
                                         f"{study.name}: every exit of SmolLM2-135M"), f"exits_{study.name}")
run.table(tables.exit_long(adapt_results), "pretrained_exits", show=False)
run.table(tables.task_long(adapt_results), "pretrained_tasks", show=False);

# %% [markdown]
# ### The last exit's cost against the token budget (Table 1)
#
# After 52B tokens the paper's LayerSkip Llama2 has a last layer within +0.5 % of the original's perplexity. After our
# few minutes of training the LD+EE model's last exit costs far more than that against plain training on the same
# tokens. Whether that gap closes with tokens is what the paper's number implies and what a budget sweep measures: the
# same study trained again at multiples of its steps, everything else equal (`rlib.layerskip.budget`; the cpu
# profile leaves it to cpu-long):

# %%
bcfg = budget.BudgetConfig.preset(profile)
if bcfg.factors:
    sweep = budget.run_sweep(acfg, bcfg, work / "pretrained", source=source)
    budget_runs = run.table(budget.budget_table(adapt_results + sweep, acfg, bcfg, n_layers), "last_exit_budget")
    run.figure(plots.plot_last_exit_budget(budget_runs, {r: tables.label(r) for r in acfg.study(bcfg.study).recipes},
                                           f"{bcfg.study}: the last exit against the token budget"),
               "last_exit_budget")
else:
    print(config.left_out("the token-budget sweep", profile, "05"))

# %% [markdown]
# ### The last exit's cost against the learning rate (Table 8)
#
# Table 8 gives each experiment's rate: continual pretraining of Llama2 7B at 3e-5, the code fine-tune at 1e-4. A higher
# rate moves the last layer further from the pretrained model by itself, so before the budget is blamed for the last
# exit's cost, a study trained at another rate trains again at Table 8's, everything else equal
# (`rlib.layerskip.paper_rate`). Its runs on the continual study at the chapter's former 3e-4
# (`benchmarks/results/ls_paper_rate_cpu_long.md`) and on the code study at its former 3e-4
# (`benchmarks/results/ls_paper_rate_code_cpu_long.md`) found plain training better at Table 8's rate on every corpus
# and LD+EE's last exit far less damaged (continual on python-stdlib +9.8 % against +95.5 %; code on shakespeare +4.4 %
# against +27.5 %), so both studies above train at Table 8's rates. Where a profile still trains a study at another
# rate, the last-exit claims' diagnosis reads this comparison: setup where the paper's rate keeps the last exit within
# the claim's bound, budget where it does not:

# %%
rcfg = paper_rate.PaperRateConfig.preset(profile)
if rcfg.studies:
    rated = paper_rate.run_sweep(acfg, rcfg, work / "pretrained", source=source)
    rates = run.table(paper_rate.rate_table(adapt_results + rated, acfg, rcfg, n_layers), "paper_rate", floatfmt=".4g")
    labels = {r: tables.label(r) for study in rcfg.studies for r in acfg.study(study).recipes}
    run.figure(plots.plot_paper_rate(rates, labels, "The chapter's learning rate and Table 8's"), "paper_rate")
else:
    print(paper_rate.rates_line(acfg, pcfg))

# %% [markdown]
# Fig. 2's probe again, on the LayerSkip models: an ensemble of depths should settle on its final token earlier.

# %%
layerskip_models = {f"{s.name} LD+EE": adapt.load_model(work / "pretrained", config.AdaptRun(s.name, "ld_ee").name)
                    for s in acfg.studies if "ld_ee" in s.recipes}
probes = {"pretrained": probe, **decode_study.probe_models(layerskip_models, tokenizer, acfg.probe_tokens)}
probe_table = run.table(tables.probe_summary({k: v["table"] for k, v in probes.items()}, n_layers),
                        "layers_needed")
if layerskip_models:
    name = list(layerskip_models)[-1]
    run.figure(plots.plot_layer_grid(probes[name]["agree"], probes[name]["tokens"],
                                        f"{name} on HumanEval/0"), "layer_grid_layerskip")

# %% [markdown]
# ## Task fine-tuning: a TOPv2-like parsing task (Fig. 10b)
#
# The paper fine-tunes a 24-layer Llama on TOPv2 (utterances to semantic parses, post-processed into JSON) with
# LD+EE (p_max 0.2, e_scale 1.0, the gradual curriculum) and reads every exit's exact match: plain fine-tuning's
# early exits give 0 %, LayerSkip's layer 12 gives 77 % at a 3 % last-layer cost. TOPv2 cannot be fetched offline,
# so `rlib.layerskip.parse_data` writes utterances of the same kind from templates, eight assistant intents with
# slot values copied verbatim into a JSON parse. Its two fine-tunes alone take longer than the cpu profile's budget
# for the whole chapter, so the cpu profile leaves this study to `cpu-long` (`pcfg.recipes` is empty there; every
# cell below that needs its models says so and moves on):

# %%
print(config.left_out("the parsing study", profile, "05") if not pcfg.recipes else f"recipes: {pcfg.recipes}")
tables.parse_examples(4, pcfg.seed)

# %% [markdown]
# Both recipes start from SmolLM2 and see the same examples, steps and learning rate. Each exit is scored by
# teacher-forced exact match: the head's argmax after E layers must give every target token and the EOS. That is
# exactly when greedy early-exit generation at E reproduces the parse and stops (a test checks the equivalence):

# %%
book.show_source(parse_study.exit_match_ids)

# %%
if pcfg.recipes:
    parse_results = parse_study.run_grid(pcfg, work / "parse", source=source)
    run.table(tables.runs_table(parse_results), "parse_runs")
    parse_exits = run.table(tables.parse_exits(parse_results), "parse_exits", floatfmt=".3f")
    run.table(tables.parse_pairs(parse_results), "parse_pairs", show=False)  # utterance by utterance, for the claims
    run.figure(plots.plot_parse_exits(parse_exits, {r: tables.label(r) for r in pcfg.recipes},
                                      "parsing: exact match at every exit of SmolLM2-135M"), "parse_exits")

# %% [markdown]
# Table 8 fine-tunes on TOPv2 at 1e-4, with and without layer dropout; the study above trains at its profile's rate. As
# for the continual and code studies, both recipes train again at Table 8's rate, everything else equal
# (`paper_rate.run_parse`), before the step budget is blamed for the exits' exact match: the Fig. 10b claims'
# diagnosis reads setup where the claim holds at the paper's rate.

# %%
if pcfg.recipes and rcfg.parse:
    parse_rated = paper_rate.run_parse(pcfg, work, source=source)
    parse_rates = run.table(paper_rate.parse_rate_table(parse_results, parse_rated, pcfg), "parse_paper_rate",
                            floatfmt=".4g")
    run.figure(plots.plot_parse_rate(parse_rates, {r: tables.label(r) for r in pcfg.recipes},
                                     "parsing: the chapter's learning rate and Table 8's"), "parse_paper_rate")
elif pcfg.recipes:
    print(paper_rate.rates_line(acfg, pcfg))
else:
    print(config.left_out("the parsing study at Table 8's learning rate", profile, "05"))

# %% [markdown]
# ## Self-speculative decoding (Tables 2-6, 10)
#
# Draft d tokens with the first E layers, verify them with one pass of the rest, commit the agreeing prefix plus the
# verifier's next token. With the shared KV cache and the exit-query cache ("kvq") the verifier starts at layer E;
# "kv" reruns layers below E for the drafted tokens, "none" gives the draft its own cache (as transformers'
# `assistant_early_exit` does, timed alongside on the exported weights). Batch 1, greedy, EOS ignored; the
# autoregressive row runs through the same code and cache:

# %%
book.show_source(self_speculative_generate)

# %% [markdown]
# The from-scratch models (baseline and LD+EE). Small models trained for minutes fall into greedy loops, and a loop
# is easy for any exit to draft, so its acceptance says nothing about the exit. `greedy_check` measures it on this
# run's models: `greedy_distinct_2` is the distinct bigrams over bigrams of each model's greedy continuation, mean
# over the prompts, against the chapter's gate of 0.5 (ours). The paper decodes greedily; here the profile's
# `decode_temperature` samples instead, in a way self-speculation reproduces token for token (ours): every token is
# the argmax of its logits / T plus Gumbel noise fixed for its position, for the drafts and the verifier alike. The
# output is a true sample at temperature T, and `identical_to_greedy` then checks it against autoregressive sampling
# with the same noise. transformers' decoders cannot share that noise, so they run with greedy studies only:

# %%
book.show_source(sampling.TokenChooser)

# %%
if cfg.decode_temperature > 0:  # a sampled study: why it samples, measured
    run.table(decode_study.scratch_greedy_check(cfg, work), "greedy_check", floatfmt=".3g")

# %%
scratch_times, scratch_outputs = TimingLog(), OutputLog()
decoding = run.table(decode_study.scratch_decoding(cfg, work, timings=scratch_times, outputs=scratch_outputs),
                     "decoding")
run.table(scratch_times.frame(), "decoding_rounds", show=False)

# %% [markdown]
# Table 6's cache modes differ by a few per cent, less than one timing's noise on a shared CPU. Every decode above is
# logged (`decoding_rounds`), and a round decodes one prompt with every method back to back, so kvq's time over kv's
# in the same round is a paired measurement; the claims take the median over rounds with a distribution-free interval
# (`rlib.rounds`). What reuse can save here at all, the cost model says: each piece of a round timed on its own on
# this machine, every LD+EE row predicted from those times and the row's counts of rounds and drafts:

# %%
scratch_costs, scratch_predicted = decode_study.scratch_costs(cfg, work, decoding)
run.table(scratch_costs, "decoding_costs_scratch", floatfmt=".3g", show=False)
run.table(tables.cost_table(scratch_predicted), "cost_model_scratch", floatfmt=".3g");

# %% [markdown]
# The paper's other argument for drafting with the model's own first layers is memory (abstract, Sec. 4.3.3): one
# model and one KV cache serve both stages. Here every cache the decoder creates is measured in bytes after greedy
# decoding, for each cache mode, beside a two-model decoder whose separate draft model has the same E layers
# (`rlib.layerskip.decode_memory`; `total_over_kvq` is each decoder's bytes over self-speculation's):

# %%
run.table(decode_study.scratch_memory(cfg, work), "decoding_memory", floatfmt=".4g");

# %% [markdown]
# SmolLM2 after each study, plain vs LD+EE: the code study (cpu-long) decodes HumanEval prompts greedily (Table 4's
# setting), the continual study held-out poetry, sampled (`decode_sampled_studies`: greedily it loops, as its
# `greedy_check_continual` table measures).
#
# Table 2 also sets LayerSkip beside **Draft & Verify** (Zhang et al. 2023): the plain model drafts with some of its
# attention and MLP sublayers skipped, and verifies with all of them. It needs no training, but it cannot reuse the
# draft's cache (Sec. 3): verification reruns every layer. Which sublayers to skip is searched on validation windows,
# by Bayesian optimisation of measured tokens/s as in the official code (`rlib.layerskip.draft_verify`; three probes
# and `dv_search_iters` suggestions, 19 tries in the cpu profile, 1000 there); the best set then decodes the same test
# prompts as the other decoders, in the same rounds as the plain model's autoregressive decoding:

# %%
pretrained_decoding, pretrained_outputs = {}, {}
for study in acfg.studies:
    recipes = tuple(r for r in ("baseline", "ld_ee") if r in study.recipes)
    skip_set = None
    if "baseline" in recipes:
        search = decode_study.adapt_skip_search(acfg, work / "pretrained", study.name)
        run.table(search.trace, f"draft_verify_search_{study.name}", floatfmt=".3g", show=False)
        skip_set = search.best
        print(f"{study.name}: Draft & Verify skips {skip_set.text()}")
    if acfg.decode_sampling(study.name) is not None:
        run.table(decode_study.adapt_greedy_check(acfg, work / "pretrained", study.name, recipes),
                  f"greedy_check_{study.name}", floatfmt=".3g")
    study_times, pretrained_outputs[study.name] = TimingLog(), OutputLog()
    pretrained_decoding[study.name] = run.table(decode_study.adapt_decoding(
        acfg, work / "pretrained", study.name, recipes, timings=study_times,
        outputs=pretrained_outputs[study.name], draft_verify=skip_set), f"decoding_{study.name}")
    run.table(study_times.frame(), f"decoding_{study.name}_rounds", show=False)

# %% [markdown]
# ### What the decoders write: ROUGE-2 (Tables 2-4)
#
# The paper scores every generation by ROUGE-2 against its dataset's reference (torchmetrics, lowercased, as its
# official benchmark does): early exit collapses it (7B CNN/DM 0.012 vs 0.079), self-speculation keeps it (0.078).
# Its autoregressive row decodes the baseline model, the other two the LayerSkip model. Our prompts are held-out
# windows, so each one's reference is the corpus's own continuation of it (HumanEval's canonical solution for the code
# study); every output decoded above is scored, and `ratio_to_baseline` is a row's mean over the baseline's
# autoregressive mean on the same prompts, with a 95 % paired bootstrap interval (`ratio_lo`, `ratio_hi`). Every
# self-speculative setting makes its model's own output (exact), so one row stands for them:

# %%
quality_tables = {"decoding": decode_study.scratch_quality(cfg, scratch_outputs.frame())}
for study in acfg.studies:
    quality_tables[f"decoding_{study.name}"] = decode_study.adapt_quality(acfg, study.name,
                                                                          pretrained_outputs[study.name].frame())
for name, scored in quality_tables.items():
    run.table(scored, f"{name}_quality", floatfmt=".4g", show=False)
    run.table(quality.quality_summary(scored, one_speculative=True), f"{name}_quality_summary", floatfmt=".4g")

# %% [markdown]
# ### Early exit makes errors, self-speculation fixes them (Figs. 7 and 9)
#
# The paper shows a few continuations by a model exiting early, with the wrong phrases in red, judged by hand
# (Fig. 7: continual pretraining, 7B exiting at layer 20 of 32; Fig. 9: from scratch, layer 24 of 32), and states
# that verifying with the remaining layers fixes them. Here the red tokens are chosen by a rule (ours): an early-exit
# token is wrong where the full model, given the same prefix (and, for a sampled study, the same noise), would have
# chosen another. The exit is at the figure's relative depth; the self-speculative line is checked to be the full
# model's own output (greedy, or its sample under the same noise).

# %%
continual = acfg.studies[0]
fig7 = decode_study.adapt_generations(acfg, work / "pretrained", continual.name,
                                      tuple(r for r in ("baseline", "ld_ee") if r in continual.recipes))
run.table(fig7[0], "generations_continual", show=False)
run.table(fig7[1], "generations_continual_tokens", show=False)
run.html(generations.generations_html(*fig7), "generations_continual");

# %%
fig9 = decode_study.scratch_generations(cfg, work)
run.table(fig9[0], "generations_scratch", show=False)
run.table(fig9[1], "generations_scratch_tokens", show=False)
run.html(generations.generations_html(*fig9), "generations_scratch");

# %% [markdown]
# The parsing models decode the first test utterances until EOS, as in Tables 5 and 10 (E = L/4, L/2, 3L/4 and
# d = 7 there): `em` is the exact match of the generated parse, so early exit's lost quality and self-speculation's
# kept quality show side by side with their times. The LayerSkip model also gets every cache mode (Table 6).
#
# One step beyond the paper. Every drafted token pays the shared head, and SmolLM2's 576 x 49,152 head holds as many
# weights as 8 of its 30 layers, a far larger share than in the paper's billion-parameter models. A parse uses
# few distinct tokens, so the `vocab` rows (`draft` column of Table 10) draft over the training parses' tokens plus
# the prompt's only (slot values are copied from the utterance). The verifier still reads the whole head, so the
# output stays the greedy output; only the drafting cost and the acceptance move:

# %%
book.show_source(draft_head)

# %%
if pcfg.recipes:
    parse_times = TimingLog()
    parse_decoding = run.table(decode_study.parse_decoding(pcfg, work / "parse", timings=parse_times),
                               "decoding_parse")
    run.table(parse_times.frame(), "decoding_parse_rounds", show=False)
    run.table(tables.table_10(parse_decoding), "table_10", floatfmt=".3g")
    run.figure(plots.plot_self_speculation(parse_decoding, "ld_ee", "Parsing, LD+EE model: self-speculation vs "
                                           "autoregressive, batch 1, CPU"), "self_speculation_parse")

# %% [markdown]
# A second step beyond the paper, about the machine rather than the method. Every decoding step multiplies a handful
# of token vectors (1 when drafting, d + 1 when verifying) by every weight matrix, so the step should cost the
# weights' bytes over the memory bandwidth. On our CPU `F.linear` reaches a third of that for such shapes, and up to
# 8x less for the head at 2 or 3 tokens (`benchmarks/decode_matmul.py`). Every decoding table above runs our decoders
# inside `fast_decoding`, which picks the faster of three BLAS calls per shape; the baseline gets it too, so the
# speedups stay fair. The ablation times the parsing model's baseline and first (E, d) with it off and on:

# %%
book.show_source(decode_linear)

# %%
if pcfg.recipes:
    run.table(decode_study.parse_matmul_ablation(pcfg, work / "parse"), "decoding_matmul", floatfmt=".3g")

# %% [markdown]
# ### Why the paper's drafting reaches less here: a measured cost model
#
# The layer-count model of the paper's numbers (column `predicted_speedup`) counts layers and leaves out the head. In
# the paper's 1.5B model a 32,000 x 2,048 head weighs about one of its 24 layers, so that is fair there; SmolLM2's
# head weighs 8 of its 30 layers, and every drafted token pays it. Here each piece of a round is timed on its own
# inside `fast_decoding` (`decoding_costs`; `layers` is the cost in layers on one token), and every decoding row of the
# LayerSkip parsing model is predicted from those times and the row's own counts of rounds and drafts:

# %%
book.show_source(decode_costs.round_ms)

# %%
if pcfg.recipes:
    costs, predicted = decode_study.parse_costs(pcfg, work / "parse", parse_decoding)
    run.table(costs, "decoding_costs", floatfmt=".3g")
    run.table(tables.cost_table(predicted), "cost_model", floatfmt=".3g")
    run.figure(plots.plot_cost_model(predicted, costs, pcfg.decode_prompts, "Parsing, LD+EE model: measured vs "
                                     "predicted speedup, and what acceptance would buy"), "cost_model_parse")
else:
    print(config.left_out("the parsing study's decoding, fast_decoding ablation and cost model", profile, "05"))

# %% [markdown]
# ## On a GPU
#
# `make gpu-check` measures self-speculative against autoregressive decoding (Tables 2-3 on real hardware). The table
# shows the newest GPU results folder (`benchmarks/results/gpu/`) with its device, date and commit, or says "not
# measured on a GPU": a CPU number never stands in a GPU column.

# %%
run.table(gpu_results.chapter_table("05"), "gpu_results");

# %% [markdown]
# ## Claims

# %%
run.ledger(claims.judge(run.tables, cfg, acfg, pcfg, profile))
run.finish()
