"""Training speed: the book's Decoder against the transformers model it was converted from.

Forward + backward (next-token cross-entropy, computed the same way for both) on the same batch, on CPU, in fp32
and under bf16 autocast. Both models hold the same weights (the real SmolLM2-135M when its asset is cached,
otherwise a random model of the same config). Steps of the two models are interleaved so that drifts in the
machine's speed hit both; the median step time is reported.

    python benchmarks/train_speed.py                      # SmolLM2-135M, batch 4 x 256, 2 threads
    python benchmarks/train_speed.py --model gemma3-270m --batch 2 --seq 256 --steps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from rlib import assets  # noqa: E402
from rlib.model import from_transformers  # noqa: E402


def load_reference(name: str):
    """The transformers model: real weights if the asset is cached, else a random SmolLM2-135M-shaped Llama."""
    if assets.is_ready(name):
        return assets.load_model(name), "real weights"
    if name != "smollm2-135m":
        raise SystemExit(f"asset {name!r} is not cached; run `python -m rlib.assets fetch {name}`")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, bos_token_id=1)
    return LlamaForCausalLM(config), "random weights (asset not cached)"


def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [B, T, V] against input_ids shifted by one, in fp32."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), input_ids[:, 1:].reshape(-1))


def train_step(forward, model: torch.nn.Module, input_ids: torch.Tensor, bf16: bool) -> float:
    """One forward + backward; returns its wall time in seconds."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = forward(input_ids)
    next_token_loss(logits, input_ids).backward()
    return time.perf_counter() - start


def measure(models: dict, input_ids: torch.Tensor, bf16: bool, steps: int, warmup: int) -> dict[str, float]:
    times = {name: [] for name in models}
    for i in range(warmup + steps):
        for name, (forward, model) in models.items():
            seconds = train_step(forward, model, input_ids, bf16)
            if i >= warmup:
                times[name].append(seconds)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    hf_model, weights = load_reference(args.model)
    hf_model.train()
    decoder = from_transformers(hf_model).train()
    config = decoder.config
    input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    if config.bos_id is not None:
        input_ids[:, 0] = config.bos_id
    models = {
        "transformers": (lambda ids: hf_model(ids).logits, hf_model),
        "rlib": (decoder, decoder),
    }
    tokens = args.batch * args.seq
    print(f"{args.model} ({weights}), {config.n_layers} layers, batch {args.batch} x {args.seq} = {tokens} tokens, "
          f"{args.threads} threads, torch {torch.__version__}, forward+backward, median of {args.steps} steps")
    print(f"{'dtype':6} {'transformers tok/s':>19} {'rlib tok/s':>11} {'ratio rlib/transformers':>24}")
    for dtype in args.dtypes.split(","):
        median = measure(models, input_ids, dtype == "bf16", args.steps, args.warmup)
        hf_speed, our_speed = tokens / median["transformers"], tokens / median["rlib"]
        print(f"{dtype:6} {hf_speed:19.1f} {our_speed:11.1f} {our_speed / hf_speed:24.3f}", flush=True)


if __name__ == "__main__":
    main()
