"""How repetitive a generated text is: distinct bigrams over bigrams (distinct-2, Li et al. 2016).

Greedy decoding of a small model often falls into a loop ("the the the ..."); on a looping continuation every early
exit agrees with the last layer or loop, so exit rates, acceptance rates and speedups measured there say little. The
book measures distinct-2 beside every such number (LayerSkip's decoding studies, `rlib.layerskip.decoding`; chapter
02's serving study, `rlib.relaxed.throughput`).

    distinct_2([1, 2, 1, 2, 1, 2])  # 2 distinct bigrams of 5 -> 0.4
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["distinct_2"]


def distinct_2(tokens: Sequence[int]) -> float:
    """Distinct bigrams over bigrams of a token sequence (1.0 for fewer than two tokens)."""
    pairs = list(zip(tokens[:-1], tokens[1:]))
    return len(set(pairs)) / len(pairs) if pairs else 1.0
