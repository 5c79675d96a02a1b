"""rlib: the library under the recursive-depth transformer book.

Chapters (notebooks/NN_*.py) are thin: every model, training, data and plotting function lives
here. Importing `rlib` pins the Hugging Face hub and datasets to offline mode unless the caller
set those variables explicitly, because a hub miss otherwise costs about 50 s of retries.

Notation used in shape comments across the library:
    B batch, T tokens, D_model hidden size, H heads, D head dim, V vocabulary,
    L layers, K shared blocks, N_rec recursions, R LoRA rank.
"""

import os as _os

_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__version__ = "0.1.0"
