"""LayerSkip (paper 004): layer dropout, the early-exit loss and self-speculative decoding (chapter 05).

    config        LayerSkipConfig (from scratch), AdaptConfig (continual pretraining / code fine-tuning of SmolLM2),
                  ParseConfig (the TOPv2-like parsing study): presets per profile, and their run lists
    experiments   chapter 05's recipes from scratch (baseline, LD, EE, LD+EE, constant-rate LD, EE curricula), cached
    adapt         the studies on the pretrained model; parse_data / parse_study: the parsing task and its fine-tunes
    decode_study  every decoding measurement of the chapter; decode_costs: the measured cost model
    tables        per-exit tables, Table 1's middle vs last layer, Fig. 11 / 12 curves, decoding and cost tables
    claims        the claims ledger (a package: specs, the checks per group of sections, judge)
    plots         the chapter's figures

The paper's methods:
    schedules     the dropout rates p(l, t) and early-exit loss weights e~(t, l) with their curricula (Eq. 1-6)
    training      LayerSkipDecoder (per-sample layer dropout over a Decoder) and the LayerSkipLoss trainer hook
    speculative   greedy self-speculative decoding (draft with E layers, verify with the rest; kvq / kv / no cache
                  reuse; batches) and plain early-exit decoding
    draft_verify  Draft & Verify (Zhang et al. 2023), Table 2's comparison: the plain model drafts with searched
                  attention / MLP sublayers skipped and verifies with all of them
    decoding      the side-by-side timing of every decoder (ms/token, acceptance, speedup, the layer-count model)
    analysis      per-exit NLL / perplexity / accuracy, and the layers-needed probe of Fig. 2 (both readings)
    exit_tasks    task accuracy at every exit in one pass; peer: transformers' assistant_early_exit side by side
"""
