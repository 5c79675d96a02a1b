"""The static HTML report of a profile: `runs/<profile>/index.html`.

One index page lists every figure and table of every chapter (inline, with links to the SVG, CSV
and Markdown files) and links each chapter's full executed notebook, rendered by nbconvert. All
links are relative, so the folder opens in a browser from disk with no server, and can be copied
or zipped as it is. The report never executes anything: it reads what the runner left.

Nothing is loaded from a network: the notebooks are rendered with `templates/offline` (nbconvert's
lab template without require.js and mermaid), and MathJax 2 with its fonts is copied from the
`jupyter-server-mathjax` package into `runs/<profile>/_static/mathjax/`. A failed chapter shows its
reason, the command that fixes it and links to its log and partial notebook; a figure whose tick or
axis labels overlap (checked when the chapter saved it) says so; a profile's `figure_note` (smoke:
the numbers are noise) stands under every figure.
"""

from __future__ import annotations

import html
import json
import shutil
import time
from pathlib import Path

from rlib.book.layout import FAILURE_FILE, LOG_FILE, STATIC, failed_dir, profile_dir, run_command
from rlib.book.manifest import Chapter, Manifest
from rlib.book.session import FIGURE_CHECKS
from rlib.config import get_profile
from rlib.fsutil import atomic_folder, atomic_path

TEMPLATES = Path(__file__).resolve().parent / "templates"
MATHJAX = f"{STATIC}/mathjax"


def mathjax_source() -> Path | None:
    """MathJax 2 as the `jupyter-server-mathjax` package ships it (a pinned requirement), or None."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    folder = Path(jupyter_server_mathjax.__file__).resolve().parent / "static"
    return folder if (folder / "MathJax.js").is_file() else None


def vendor_static(root: Path) -> bool:
    """Copy MathJax into `root/_static/mathjax/` once (atomically); False when the package is missing."""
    source = mathjax_source()
    if source is None:
        return False
    from importlib import metadata

    target = root / MATHJAX
    stamp, want = target / ".source", f"{source}\n{metadata.version('jupyter-server-mathjax')}\n"
    if stamp.exists() and stamp.read_text() == want:
        return True
    with atomic_folder(target) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
        (tmp / ".source").write_text(want)
    return True


def offline_html_options(depth: int = 1) -> dict:
    """nbconvert `HTMLExporter` options for a notebook page `depth` folders below `runs/<profile>/`."""
    return {"template_name": "offline", "extra_template_basedirs": [str(TEMPLATES)],
            "mathjax_url": "../" * depth + f"{MATHJAX}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"}

_CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}
body{color:#222}
h1{font-size:1.7em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
figure{margin:1em 0 2em} figure img{max-width:min(100%,760px);border:1px solid #eee}
.scroll{overflow-x:auto} figcaption{font-size:13px;color:#555}
.status-complete{color:#1a7f37} .status-missing,.status-failed{color:#b42318}
.meta{font-size:13px;color:#555} code{background:#f6f6f6;padding:0 3px} nav li{margin:2px 0}
.note{background:#fff8e1;border-left:4px solid #f0b429;padding:.4em .8em;font-size:13px}
.fail{background:#fdecea;border-left:4px solid #b42318;padding:.4em .8em}
"""


def _table_html(csv: Path, max_rows: int = 60) -> str:
    import pandas as pd

    df = pd.read_csv(csv)
    note = f"<p class=meta>first {max_rows} of {len(df)} rows</p>" if len(df) > max_rows else ""
    return df.head(max_rows).to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0) + note


def _failure_html(profile: str, ch: Chapter, rel_root: str) -> str:
    """The reason of the chapter's last failed attempt, its fix and links, or '' if it has none."""
    folder = failed_dir(profile, ch.id)
    info_file = folder / FAILURE_FILE
    if not folder.exists():
        return ""
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    base = f"{rel_root}{folder.parent.name}/{folder.name}"
    links = [f'<a href="{base}/{name}">{label}</a>' for name, label in
             ((LOG_FILE, "log"), (info.get("html"), "partial notebook"), (info.get("notebook"), ".ipynb"))
             if name and (folder / name).exists()]
    reason = info.get("reason") or "the run was interrupted or failed before it could record a reason"
    fix = info.get("fix") or f"`{run_command(profile, ch.id)}`"
    return (f'<div class=fail><b>failed</b> {html.escape(info.get("failed_at", ""))}: {html.escape(reason)}'
            f"<br>fix: {_code(fix)}<br>{' · '.join(links)}</div>")


def _code(text: str) -> str:
    """Backquoted spans of `text` as <code>, the rest escaped."""
    parts = text.split("`")
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


def _figure_warning(checks: dict, name: str) -> str:
    overlaps = (checks.get(name) or {}).get("overlaps") or []
    if not overlaps:
        return ""
    pairs = "; ".join(" / ".join(pair) for pair in overlaps[:6])
    return f'<p class=note>overlapping labels in this figure: {html.escape(pairs)}</p>'


def _chapter_section(ch: Chapter, folder: Path, profile: str) -> tuple[str, list[str]]:
    prov_file = folder / "provenance.json"
    prov = json.loads(prov_file.read_text()) if prov_file.exists() else None
    failure = _failure_html(profile, ch, "")
    rel = folder.name
    toc: list[str] = []
    out = [f'<h2 id="{ch.id}">{html.escape(ch.id)} · {html.escape(ch.title)}</h2>']
    if failure:
        out.append(failure + ("<p class=meta>below: the last complete run</p>" if prov else ""))
    if prov:
        git = prov.get("git") or {}
        env = prov.get("environment") or {}
        device = (env.get("device") or {}).get("name", "?")
        params = ", ".join(f"<code>{html.escape(k)}={html.escape(repr(v))}</code>"
                           for k, v in prov.get("parameters", {}).items())
        out.append(
            f'<p class=meta><span class="status-complete">complete</span> · {prov["wall_s"]:.0f} s on '
            f'{html.escape(device)} · started {prov.get("started", "?")} · git '
            f'<code>{(git.get("sha") or "?")[:10]}{"+dirty" if git.get("dirty") else ""}</code> · '
            f'<a href="{rel}/{ch.id}.html">full notebook</a> · <a href="{rel}/provenance.json">provenance</a>'
            + (f' · <a href="{rel}/{LOG_FILE}">log</a>' if (folder / LOG_FILE).exists() else "")
            + f"<br>parameters: {params}<br>re-run: <code>{html.escape(run_command(profile, ch.id, ' --force'))}"
            f"</code></p>"
        )
    elif not failure:
        out.append(f'<p class="status-missing">not run yet: <code>{html.escape(run_command(profile, ch.id))}</code> '
                   f"produces this chapter.</p>")
    if not prov:
        return "\n".join(out), toc
    note = get_profile(profile).figure_note
    checks_file = folder / FIGURE_CHECKS
    checks = json.loads(checks_file.read_text()) if checks_file.exists() else {}
    for name in ch.figures:
        anchor = f"{ch.id}-fig-{name}"
        toc.append(f'<li><a href="#{anchor}">figure {ch.id}/{name}</a></li>')
        out.append(f'<figure id="{anchor}"><img src="{rel}/{name}.png" alt="{name}">'
                   f'<figcaption><b>{ch.id}/{name}</b> · <a href="{rel}/{name}.svg">SVG</a> · '
                   f'<a href="{rel}/{name}.png">PNG</a>'
                   + (f'<br><span class=note>{html.escape(note)}</span>' if note else "")
                   + f"</figcaption>{_figure_warning(checks, name)}</figure>")
    for name in ch.tables:
        anchor = f"{ch.id}-tab-{name}"
        toc.append(f'<li><a href="#{anchor}">table {ch.id}/{name}</a></li>')
        csv = folder / f"{name}.csv"
        body = _table_html(csv) if csv.exists() else "<p class=status-missing>missing</p>"
        out.append(f'<h3 id="{anchor}">{ch.id}/{name} <span class=meta>· <a href="{rel}/{name}.csv">CSV</a> · '
                   f'<a href="{rel}/{name}.md">Markdown</a></span></h3><div class=scroll>{body}</div>')
    metrics = folder / "metrics.json"
    if metrics.exists():
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                       for k, v in json.loads(metrics.read_text()).items())
        out.append(f"<h3>metrics</h3><table><tr><th>metric</th><th>value</th></tr>{rows}</table>")
    return "\n".join(out), toc


def write_report(profile: str, manifest: Manifest | None = None) -> Path:
    """(Re)write `runs/<profile>/index.html` from whatever chapters have complete outputs."""
    from rlib.book import manifest as manifest_mod

    manifest = manifest or manifest_mod.load()
    prof = get_profile(profile)
    root = profile_dir(profile)
    root.mkdir(parents=True, exist_ok=True)
    has_math = vendor_static(root)
    sections, toc = [], []
    for ch in manifest.chapters:
        body, entries = _chapter_section(ch, root / ch.id, profile)
        sections.append(body)
        toc.append(f'<li><a href="#{ch.id}">{ch.id} · {html.escape(ch.title)}</a><ul>{"".join(entries)}</ul></li>')
    banner = f"<p class=note>{html.escape(prof.figure_note)}</p>" if prof.figure_note else ""
    if not has_math:
        banner += ("<p class=note>MathJax is not installed (the pinned <code>jupyter-server-mathjax</code> of "
                   "requirements.txt), so equations in the notebooks show as TeX: <code>make env</code>, then "
                   f"<code>python -m rlib.book report --profile {profile}</code></p>")
    page = (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(manifest.title)} · {profile}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(manifest.title)}</h1>"
        f"<p class=meta>profile <b>{profile}</b> ({html.escape(prof.description)}) · report written "
        f"{time.strftime('%Y-%m-%d %H:%M')}</p>{banner}"
        f"<nav><ul>{''.join(toc)}</ul></nav>{''.join(sections)}</body></html>"
    )
    index = root / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(page)
    return index
