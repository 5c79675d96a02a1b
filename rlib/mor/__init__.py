"""Mixture-of-Recursions (paper 001): routed recursion depth per token over a shared block.

    spec     MoRSpec: routing (expert | token | none), KV strategy (cache | share), sharing, router options
    routers  the routers, their losses (BCE aux, balancing, z) and metrics (sampling accuracy, MaxVio, entropy)
    model    MoRDecoder over an rlib Decoder; build / vanilla constructors; the MoRLoss training hook
    flops    the paper's forward-FLOPs formula (App. C), isoFLOP token and step counts, KV-cache cost model
"""

from rlib.mor.model import MoRDecoder, MoRLoss, build, vanilla
from rlib.mor.spec import MoRSpec

__all__ = ["MoRDecoder", "MoRLoss", "MoRSpec", "build", "vanilla"]
