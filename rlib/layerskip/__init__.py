"""LayerSkip (paper 004): layer dropout, the early-exit loss and self-speculative decoding.

    schedules    the dropout rates p(l, t) and early-exit loss weights e~(t, l) with their curricula (Eq. 1-6)
    training     LayerSkipDecoder (per-sample layer dropout over a Decoder) and the LayerSkipLoss trainer hook
    speculative  greedy self-speculative decoding (draft with E layers, verify with the rest; kvq / kv / no cache
                 reuse; batches) and plain early-exit decoding
    peer         transformers' greedy and assistant_early_exit generation on the exported weights
    analysis     per-exit NLL / perplexity / accuracy, and the layers-needed probe of Fig. 2 (both readings)
    grid         chapter 05's recipes from scratch (baseline, LD, EE, LD+EE, constant-rate LD, EE curricula), cached
    tables       per-exit tables, Table 1's middle vs last layer, Fig. 11 / 12 curves, decoding and cost tables
    claims       the claims ledger: SPECS (claim_specs) judged from the tables (claim_training, claim_adapt,
                 claim_parse, claim_decoding, claim_costs)
    plots        per-exit perplexity curves, the Fig. 11 probe and Fig. 12's training loss
    decoding     the side-by-side timing of every decoder (ms/token, acceptance, speedup, the layer-count model)
"""
