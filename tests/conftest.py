"""Test set-up: the hub is offline for everything, and the book's outputs go to temp folders."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
_workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
if _workers and not (os.environ.get("RLIB_THREADS") or os.environ.get("OMP_NUM_THREADS")):
    # `pytest -n N`: the workers share the cores (their subprocesses and kernels inherit the setting)
    from rlib.threads import available_cores

    os.environ["RLIB_THREADS"] = str(max(1, available_cores() // int(_workers)))

import torch  # noqa: E402

if not torch.cuda.is_available():  # Triton kernels run in the interpreter on CPU (set before any @triton.jit runs)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from rlib import threads  # noqa: E402

threads.configure()

# Tests whose work the smoke book repeats (`make smoke`, CI's second half, runs every chapter end to end): they get
# the `slow` mark, so CI's `pytest -m "not slow"` leaves them to the smoke book; a plain `pytest` still runs them.
# test_ci_selection.py checks that every name here is a test that exists.
COVERED_BY_THE_SMOKE_BOOK = {
    "tests/test_lm_eval.py::test_evaluate_smollm2_on_the_local_suite":
        "chapter 00 evaluates smollm2-135m on the local suite through lm-eval (basemodels.task_suite_table)",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("[")[0] in COVERED_BY_THE_SMOKE_BOOK:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def needs_assets():
    """Skip (with the fetch command) when an embedded asset is not in the cache."""
    from rlib import assets

    def check(*names: str) -> None:
        missing = [n for n in names if not assets.is_ready(n)]
        if missing:
            pytest.skip(f"assets {missing} not cached; run `make assets`")

    return check
