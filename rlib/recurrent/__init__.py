"""The Recurrent Transformer (paper 002): layer-wise recurrent keys/values, its exact tiled prefill, decoding.

    config     RTConfig: shapes, ALiBi/RoPE, GQA, the pre-KV norm switch (App. E.2), recurrent or Transformer block;
               RecurrentConfig: the chapter's presets; the task and language-model runs
    layer      RTLayer: the maps of one layer (queries, temporary and persistent pairs, post-attention block)
    naive      the position-by-position loop: the definition and the reference
    tiled      the dyadic tile schedule (Algorithm 1) with a custom backward; tiles run in kernels.tiled_prefill
    token_maps the layer's per-position step and its hand-written VJPs, as the tiled loops call them
    graphed    GraphedPrefill: one layer's whole tiled schedule captured in one CUDA graph (Sec. 6.2, Table 2)
    latency    one layer's prefill latency: naive loop, PyTorch / Triton tiles, Transformer, eager or graphed (Fig. 4)
    model      RTModel (embeddings, layers, head), KV-cached decoding, greedy generation
    theory     Theorem 4.1's closed-form gradient, checked against autograd
    tasks      the synthetic suite's generators (MAD tasks and copy)
    synthetic  one-layer task models, training and token/sequence accuracy
    experiments  the live checks (exactness, traffic, decoding) and the cached task and language-model grids
    tables     Figs. 5-6's task table, Table 1, Fig. 7's ablation, the loss curves
    claims     the chapter's ledger
    plots      the chapter's figures
"""
