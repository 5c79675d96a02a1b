"""The one output API of a chapter: `run = book.start(...)`, then `run.table`, `run.figure`,
`run.metric`, and `run.finish()`.

Everything a chapter produces lands in its output folder (`runs/<profile>/<chapter>/` under the
runner; `runs/interactive/<profile>/<chapter>/` from JupyterLab):

    <name>.csv + <name>.md     a table, full precision and rendered
    <name>.png + <name>.svg    a figure, with stable metadata so re-runs diff cleanly
    figure_checks.json         per figure, the labels that overlap (`rlib.book.figcheck`; empty lists when clean)
    metrics.json               scalar headline numbers (read by tests, `promote`, the report)
    config.json                the chapter config the run used
    environment.json           versions, device and threads, written by `finish()`

Each file is written under a temporary name and renamed into place, so an interrupted run never
leaves a half-written artifact.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import random
import sys
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

from rlib import paths, precision, threads
from rlib.config import Preset, check_resources, get_profile
from rlib.experiments import cache_tally
from rlib.fsutil import atomic_path

FIGURE_CHECKS = "figure_checks.json"

RUNNER_ENV = "RLIB_BOOK_RUNNER"


def write_json(path: Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def environment() -> dict[str, Any]:
    """Versions, device and threads of the running process (the chapter's kernel)."""
    import torch

    versions = {}
    for pkg in ("torch", "triton", "transformers", "tokenizers", "datasets", "accelerate", "numpy", "pandas",
                "matplotlib", "seaborn", "papermill", "jupytext", "lm_eval"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    if torch.cuda.is_available():
        device = {"kind": "cuda", "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    else:
        device = {"kind": "cpu", "name": _cpu_name(), "count": os.cpu_count()}
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "threads": threads.describe(),
        "precision": precision.describe(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


class ChapterRun:
    """Handle returned by `start`; writes every artifact of one chapter run."""

    def __init__(self, out_dir: Path, chapter: str, profile: str, config: Preset | None, seed: int):
        self.out_dir = out_dir
        self.chapter = chapter
        self.profile = profile
        self.config = config
        self.seed = seed
        self.metrics: dict[str, Any] = {}
        self.written: list[str] = []
        self.tables: dict[str, Any] = {}  # every table written, by name: what the chapter's claims are judged from
        self.figure_checks: dict[str, Any] = {}
        self._t0 = time.perf_counter()
        out_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            write_json(out_dir / "config.json", {"class": type(config).__name__, **config.to_dict()})

    def __repr__(self) -> str:
        return f"ChapterRun({self.chapter!r}, profile={self.profile!r}, out_dir={str(self.out_dir)!r})"

    def path(self, name: str) -> Path:
        """A path inside the output folder, for chapter-specific files (caches, checkpoints)."""
        return self.out_dir / name

    def table(self, df, name: str, floatfmt: str = ".4g", show: bool = True):
        """Write `df` as `<name>.csv` (full precision) and `<name>.md`; display it in the notebook."""
        with atomic_path(self.out_dir / f"{name}.csv") as tmp:
            df.to_csv(tmp, index=False)
        with atomic_path(self.out_dir / f"{name}.md") as tmp:
            tmp.write_text(_markdown_safe(df).to_markdown(index=False, floatfmt=floatfmt) + "\n")
        self.written += [f"{name}.csv", f"{name}.md"]
        self.tables[name] = df
        if show:
            _display(df)
        return df

    def ledger(self, ledger, show: bool = True):
        """Write the chapter's claims ledger (`rlib.book.claims.Ledger`) as the `claims` table, one metric per claim
        (`claim/<id>` = its verdict), and print the counts per verdict."""
        table = ledger.finish()
        self.table(table, "claims", show=show)
        for row in table.itertuples():
            self.metric(f"claim/{row.id}", row.verdict)
        counts = table["verdict"].value_counts()
        print(f"[ledger] {self.chapter}: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
        return table

    def figure(self, fig, name: str, show: bool = True):
        """Write `fig` as `<name>.png` (150 dpi) and `<name>.svg`, with stable metadata; warn (and record in
        `figure_checks.json`, which the report shows) when tick, axis or title labels overlap."""
        import matplotlib

        from rlib.book.figcheck import overlapping_labels

        matplotlib.rcParams["svg.hashsalt"] = "rlib"
        for ext, meta in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
            with atomic_path(self.out_dir / f"{name}.{ext}") as tmp:
                fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight", metadata=meta)
        self.written += [f"{name}.png", f"{name}.svg"]
        overlaps = overlapping_labels(fig)
        self.figure_checks[name] = {"overlaps": [list(pair) for pair in overlaps]}
        write_json(self.out_dir / FIGURE_CHECKS, self.figure_checks)
        if overlaps:
            warnings.warn(f"figure {name!r}: {len(overlaps)} overlapping label pair(s), e.g. "
                          f"{overlaps[0][0]} / {overlaps[0][1]}", stacklevel=2)
        if show:
            _display(fig)
        import matplotlib.pyplot as plt

        plt.close(fig)
        return fig

    def html(self, markup: str, name: str, show: bool = True) -> str:
        """Write an HTML fragment (e.g. generated text with marked tokens) as `<name>.html`; display it rendered."""
        with atomic_path(self.out_dir / f"{name}.html") as tmp:
            tmp.write_text(markup + "\n")
        self.written.append(f"{name}.html")
        if show:
            try:
                from IPython.display import HTML
            except ImportError:
                return markup
            _display(HTML(markup))
        return markup

    def metric(self, name: str, value: Any) -> Any:
        """Record one scalar headline number for `metrics.json`."""
        self.metrics[name] = value
        return value

    def finish(self) -> dict[str, Any]:
        """Write `metrics.json` and `environment.json`; print a one-line environment stamp."""
        env = environment()
        env["wall_s"] = round(time.perf_counter() - self._t0, 2)
        env["run_cache"] = cache_tally()
        write_json(self.out_dir / "environment.json", env)
        write_json(self.out_dir / "metrics.json", self.metrics)
        v = env["versions"]
        print(
            f"[book] {self.chapter} ({self.profile}) finished in {env['wall_s']:.0f} s on {env['device']['name']}"
            f" ({cache_phrase(env['run_cache'])})"
            f" | torch {v['torch']} transformers {v['transformers']} | outputs in {self.out_dir}"
        )
        return self.metrics


def cache_phrase(tally: dict[str, Any] | None) -> str:
    """How much of a chapter's run grid was computed and how much read back from the run cache, in words."""
    if not tally or not (tally.get("read") or tally.get("computed")):
        return "no cached grid"
    read = tally["read"]
    once = f", which took {tally['read_compute_s']:.0f} s to compute" if read and tally.get("read_compute_s") else ""
    unknown = f" ({tally['read_without_time']} with no recorded time)" if tally.get("read_without_time") else ""
    return f"{tally['computed']} grid results computed, {read} read from the run cache{once}{unknown}"


def _markdown_safe(df):
    """Escape what breaks a Markdown table row inside text cells: newlines and pipes."""
    text_cols = [c for c in df.columns if df[c].dtype == object or str(df[c].dtype).startswith("str")]
    escape = lambda v: v.replace("|", "\\|").replace("\n", "\\n") if isinstance(v, str) else v
    return df.assign(**{c: df[c].map(escape) for c in text_cols})


def _display(obj) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is not None:
        display(obj)


def start(chapter: str, profile: str, out_dir: str | None, seed: int, config: Preset | None = None) -> ChapterRun:
    """Begin a chapter run: check the profile fits this machine, set torch's threads from the cores available
    (`rlib.threads`), seed everything, set the plot style.

    `out_dir` empty or None means an interactive run, written to `runs/interactive/<profile>/<chapter>/`
    so that it never overwrites the runner's outputs.
    """
    prof = get_profile(profile)
    check_resources(prof)
    threads.configure()
    folder = Path(out_dir) if out_dir else paths.RUNS / "interactive" / profile / chapter
    seed_everything(seed)
    from rlib import plotting

    plotting.style()
    return ChapterRun(folder.resolve(), chapter, profile, config, seed)


def show_source(obj) -> None:
    """Display the source of a library function or class, so chapters teach from the real code."""
    src = inspect.getsource(obj)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            where = Path(inspect.getsourcefile(obj)).resolve().relative_to(paths.ROOT)
            display(Markdown(f"`{where}`\n\n```python\n{src}```"))
            return
    except (ImportError, ValueError, TypeError):
        pass
    print(src)
