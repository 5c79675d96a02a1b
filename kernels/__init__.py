"""The book's Triton GPU kernels, each a quartet: PyTorch reference, Triton kernel, test against the reference,
benchmark.

    kernels.lora_batch     depth-indexed multi-LoRA linear (Relaxed Recursive Transformers, Sec. 2.3-2.4)

A note on the name: transformers probes for a PyPI package called `kernels` (the Hugging Face kernel hub). This
package is a different one. Importing it must stay cheap and side-effect free (no triton import here), it has no
`__version__`, and `tests/test_lora_batch.py` checks that transformers still reports the hub package as
unavailable and loads models exactly as before.
"""
