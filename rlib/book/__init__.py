"""The book: chapters as papermill-executed jupytext notebooks over `rlib`.

Inside a chapter:      `check_parameters(globals())` right after the parameters cell, then
                       `run = book.start(...)`, `run.table(...)`, `run.figure(...)`, `run.finish()`
From the shell:        `python -m rlib.book run --profile cpu`  (see `python -m rlib.book -h`)
"""

from rlib.book.params import check_parameters
from rlib.book.session import ChapterRun, show_source, start

__all__ = ["ChapterRun", "check_parameters", "show_source", "start"]
