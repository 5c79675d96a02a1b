"""The RT paper's Table 2 (Sec. 6.2): per-layer latency of the RT layer on an H100 without and with CUDA graphs
(D 1024, 16 heads; the paper does not state N). Read by the gpu-check's `prefill_batch` section and the chapter's
`rt.table2.cuda_graphs` claim; imports nothing, so the gpu-check runner stays light until a section runs."""

__all__ = ["PAPER_TABLE2_MS"]

# batch size -> (ms per layer without CUDA graphs, with them)
PAPER_TABLE2_MS = {32: (277.08, 38.85), 64: (279.23, 42.28), 128: (279.42, 48.95), 256: (276.05, 61.39),
                   512: (277.33, 81.73), 1024: (275.49, 134.09), 2048: (293.70, 240.83)}
