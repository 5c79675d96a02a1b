"""CI's test selection: what `pytest -m "not slow"` leaves out is run by the smoke book, and every name in
conftest's list of tests the smoke book covers is a test that exists (a renamed test would silently lose its mark)."""

from __future__ import annotations

import importlib

from rlib import paths
from tests.conftest import COVERED_BY_THE_SMOKE_BOOK


def test_every_test_the_smoke_book_covers_exists():
    for node, reason in COVERED_BY_THE_SMOKE_BOOK.items():
        file, name = node.split("::")
        assert (paths.ROOT / file).is_file(), node
        module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, name, None)), f"{node} is listed as covered by the smoke book but is gone"
        assert reason


def test_ci_runs_the_unmarked_tests_then_the_smoke_book():
    commands = [line.strip() for line in (paths.ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip().startswith("make ")]
    tests = [i for i, c in enumerate(commands) if c.startswith("make test")]
    smoke = [i for i, c in enumerate(commands) if c.startswith("make smoke")]
    assert len(tests) == 1 and len(smoke) == 1 and tests[0] < smoke[0], commands
    assert "-m \"not slow\"" in commands[tests[0]] and "-n auto" in commands[tests[0]]
