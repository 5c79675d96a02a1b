"""rlib.progress: RLIB_PROGRESS=off (set in grid worker processes) silences every bar, also one whose caller passes
disable=False (rlib.train does, on the main process of its accelerator)."""

from __future__ import annotations

from rlib.grid_workers import PROGRESS_ENV
from rlib.progress import progress


def test_off_silences_a_bar_even_when_the_caller_enables_it(monkeypatch):
    monkeypatch.setenv(PROGRESS_ENV, "off")
    assert progress(total=3, disable=False).disable
    assert progress(range(3)).disable


def test_a_bar_shows_by_default(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert not progress(total=3, disable=False).disable
