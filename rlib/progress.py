"""Progress bars that suit where the book runs: a terminal, JupyterLab, or a papermill batch run.

Interactively `tqdm.auto` picks a widget (JupyterLab) or a terminal bar. Under the book runner
(`RLIB_BOOK_RUNNER=1`) a widget would be lost in the executed notebook and a `\\r` bar collapses
into one unreadable log line, so bars are plain ASCII lines on stderr, at most one every 5 s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["progress"]


class _Lines:
    """A stderr stand-in that turns tqdm's `\\r` redraws into whole lines for papermill's log."""

    def write(self, s: str) -> None:
        line = s.replace("\r", "").rstrip()
        if line:
            sys.stderr.write(line + "\n")

    def flush(self) -> None:
        sys.stderr.flush()


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str | None = None, **kw: Any):
    """A tqdm bar for the current environment; keyword arguments go to tqdm and win over defaults. RLIB_PROGRESS=off
    silences every bar (grid worker processes set it: the parent's bar counts their runs)."""
    if os.environ.get("RLIB_PROGRESS", "") == "off":
        kw = {**kw, "disable": True}  # over a caller's disable=False too (rlib.train passes one)
    if os.environ.get("RLIB_BOOK_RUNNER", "") not in ("", "0"):
        from tqdm.std import tqdm

        kw = {"file": _Lines(), "mininterval": 5.0, "ascii": True, "ncols": 100, **kw}
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, **kw)
