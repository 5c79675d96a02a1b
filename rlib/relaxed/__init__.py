"""Chapter 02: relaxed recursion, early exits and continuous depth-wise batching (Relaxed Recursive Transformers,
paper 000, Sec. 2.3-2.4 and 3.5-3.8; Appendices C, G, H, I, J, K).

    config        RelaxedConfig (presets per profile), RelaxedVariant (one training run), variants(cfg)
    experiments   the run grid (relax, uptrain / post-train with exit losses, evaluate every loop) and the step-0 curve
    norm_folding  Sec. 3.5's full rank: the pre-norm gain ratio folded into the maps it feeds, so the full-rank SVD
                  LoRA reproduces the source with the norms tied (the `step0_folded` table)
    early_exit    the paper's early-exit training (Sec. 3.7): per-loop exits, weighted / aggressive schedules,
                  self-distillation; oracle and confidence exit rules
    throughput    Fig. 8 / Tables K.2-K.4: the real serving engine and the paper's simulation on the same prompts
    longer_study  Table I.1's longer uptraining alone (python -m rlib.relaxed.longer_study)
    average_rate  the main relaxed model at other peak rates: App. E's one rate weighed for the Average init
                  (python -m rlib.relaxed.average_rate)
    budget_study  the main models at 4x and 8x the steps and Fig. 6's rival at 2x, 4x and 8x: the gap at the paper's own
                  longer step measured (python -m rlib.relaxed.budget_study)
    plain_runs    the chapter's plainly uptrained runs and the tables the Average-gap claims read, for those studies
    post_seeds    App. J / Table J.1's post-training over seeds, on new and overlapped tokens: the paired changes that
                  judge self-KD's loop-1 lift and "overlapped vs new data" (python -m rlib.relaxed.post_seeds)
    tables        Fig. 6 / 7 / G.1-G.3, Table G.2, Tables 3 / J.1, Table I.1
    claims        the chapter's ledger
    plots         the chapter's figures

The relaxation itself (depth-wise LoRA with SVD init, norm deltas, prefixes) is `rlib.relax`; the engine is
`rlib.serving`.
"""
