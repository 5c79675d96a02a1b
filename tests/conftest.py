"""Test set-up: the hub is offline for everything, and the book's outputs go to temp folders."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

if not torch.cuda.is_available():  # Triton kernels run in the interpreter on CPU (set before any @triton.jit runs)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture
def needs_assets():
    """Skip (with the fetch command) when an embedded asset is not in the cache."""
    from rlib import assets

    def check(*names: str) -> None:
        missing = [n for n in names if not assets.is_ready(n)]
        if missing:
            pytest.skip(f"assets {missing} not cached; run `make assets`")

    return check
