"""The book's decoder: Llama and Gemma 3 written here, loaded exactly from transformers, exportable back.

    config.py    DecoderConfig (both families as values) and DecoderConfig.from_hf
    layers.py    RMSNorm, rotary embeddings, attention (GQA/MQA, sliding window), gated MLP, decoder block
    cache.py     KVCache addressed by execution-plan slot (per-depth or shared caches)
    decoder.py   Decoder: unique blocks + an ExecutionPlan (looping is a plan, not a fork), generate()
    convert.py   from_transformers / to_transformers, save / load (safetensors + json, per-depth adapters too)
    lora.py      per-depth adapters: LoRA on a linear map, NormDelta on a norm weight (relaxed recursion)

    from rlib.model import Decoder, ExecutionPlan, from_transformers
    decoder = from_transformers(assets.load_model("smollm2-135m"))
    looped = Decoder(decoder.config.with_layers(range(10)), ExecutionPlan.cycle(10, n_loops=3))
"""

from rlib.model.cache import KVCache
from rlib.model.config import DecoderConfig
from rlib.model.convert import from_transformers, load, save, to_transformers
from rlib.model.decoder import Decoder, DecoderOutput, ExecutionPlan, Step, sample_next

__all__ = [
    "Decoder",
    "DecoderConfig",
    "DecoderOutput",
    "ExecutionPlan",
    "KVCache",
    "Step",
    "from_transformers",
    "load",
    "sample_next",
    "save",
    "to_transformers",
]
