"""The book: chapters as papermill-executed jupytext notebooks over `rlib`.

Inside a chapter:      `run = book.start(...)`, `run.table(...)`, `run.figure(...)`, `run.finish()`
From the shell:        `python -m rlib.book run --profile cpu`  (see `python -m rlib.book -h`)
"""

from rlib.book.session import ChapterRun, show_source, start

__all__ = ["ChapterRun", "show_source", "start"]
