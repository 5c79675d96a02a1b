"""Serving: the book's one engine for continuous depth-wise batching, and the paper's throughput simulation.

    engine      ServingEngine (queue, admission, prefill, slots, emit), Request, Completion, EngineResult
    rows        running a decoder's plan depths on rows: row-addressed KV stores, per-row depth geometry
    looped      LoopedProgram: plain / recursive / relaxed decoders, with early exit (RRT Sec. 2.4, 3.8)
    exits       exit rules: softmax confidence and a linear exit classifier, calibrated on held-out text
    memory      weights + KV bytes of a served model, and the largest batch under a memory budget (App. K.3)
    workload    requests with a real corpus's prompt and reply lengths (RRT App. K's varied test-set lengths), and
                normally distributed generation lengths (MoR App. D)
    simulate    the paper's scheduler simulation and closed form (RRT App. K, Tables K.1 / K.2)

MoR's program lives with MoR (`rlib.mor.serving.MoRProgram`); `make_engine` picks the program for a model.
"""

from __future__ import annotations

from rlib.serving.engine import ADMISSIONS, Completion, EngineResult, Request, ServingEngine, check_requests
from rlib.serving.looped import LoopedProgram

__all__ = ["ADMISSIONS", "Completion", "EngineResult", "LoopedProgram", "Request", "ServingEngine",
           "check_requests", "make_engine"]


def make_engine(model, max_batch: int, max_len: int, admission: str = "continuous",
                exit_threshold: float | None = None, lora_impl: str | None = None,
                exit_rule=None) -> ServingEngine:
    """A ServingEngine over `model`: a MoR model through its own program, any Decoder through LoopedProgram (early
    exit by `exit_threshold`, a SoftmaxExit, or any `exit_rule` of `rlib.serving.exits`)."""
    from rlib.model import Decoder
    from rlib.mor.model import MoRDecoder

    if isinstance(model, Decoder):
        program = LoopedProgram(model, exit_threshold=exit_threshold, lora_impl=lora_impl, exit_rule=exit_rule)
    elif isinstance(model, MoRDecoder):
        from rlib.mor.serving import MoRProgram

        if exit_threshold is not None or exit_rule is not None:
            raise ValueError("exit_threshold applies to looped decoders; MoR's routers decide each token's depth")
        program = MoRProgram(model)
    else:
        raise TypeError(f"no serving program for {type(model).__name__}; pass a Decoder or a MoRDecoder")
    return ServingEngine(program, max_batch, max_len, admission=admission)
