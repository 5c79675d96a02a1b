"""Chapter 00: the base models and corpora every later chapter starts from (the analog of Relaxed Recursive
Transformers Table D.1, paper 000 Sec. 4 and App. D).

    config        ModelsDataConfig (presets per profile), the prompts and samples
    experiments   held-out perplexity, greedy generations, forward latency, the zero-shot task suite
    tables        tokenizers side by side, perplexity per dtype, Table D.1's layout
    claims        the chapter's ledger: the baselines the later chapters rely on (the book's own checks)
    plots         perplexity, latency and task-suite figures
"""
