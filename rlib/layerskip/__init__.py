"""LayerSkip (paper 004): layer dropout, the early-exit loss and self-speculative decoding.

    schedules   the dropout rates p(l, t) and early-exit loss weights e~(t, l) with their curricula (Eq. 1-6)
    training    LayerSkipDecoder (per-sample layer dropout over a Decoder) and the LayerSkipLoss trainer hook
"""
