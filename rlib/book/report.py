"""The static HTML report of a profile: `runs/<profile>/index.html`.

One index page lists every figure and table of every chapter (inline, with links to the SVG, CSV
and Markdown files) and links each chapter's full executed notebook, rendered by nbconvert. All
links are relative, so the folder opens in a browser from disk with no server, and can be copied
or zipped as it is. The report never executes anything: it reads what the runner left.
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path

from rlib.book.manifest import Chapter, Manifest
from rlib.fsutil import atomic_path

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
"""


def _table_html(csv: Path, max_rows: int = 60) -> str:
    import pandas as pd

    df = pd.read_csv(csv)
    note = f"<p class=meta>first {max_rows} of {len(df)} rows</p>" if len(df) > max_rows else ""
    return df.head(max_rows).to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0) + note


def _chapter_section(ch: Chapter, folder: Path) -> tuple[str, list[str]]:
    prov_file = folder / "provenance.json"
    prov = json.loads(prov_file.read_text()) if prov_file.exists() else None
    failed = folder.parent / ".failed" / ch.id
    status = "complete" if prov else ("failed" if failed.exists() else "missing")
    rel = folder.name
    toc: list[str] = []
    out = [f'<h2 id="{ch.id}">{html.escape(ch.id)} · {html.escape(ch.title)}</h2>']
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
            f"<br>parameters: {params}</p>"
        )
    else:
        out.append(f'<p class="status-{status}">{status}: run <code>python -m rlib.book run --only '
                   f"{ch.id.split('_')[0]}</code> to produce this chapter.</p>")
        return "\n".join(out), toc
    for name in ch.figures:
        anchor = f"{ch.id}-fig-{name}"
        toc.append(f'<li><a href="#{anchor}">figure {ch.id}/{name}</a></li>')
        out.append(f'<figure id="{anchor}"><img src="{rel}/{name}.png" alt="{name}">'
                   f'<figcaption><b>{ch.id}/{name}</b> · <a href="{rel}/{name}.svg">SVG</a> · '
                   f'<a href="{rel}/{name}.png">PNG</a></figcaption></figure>')
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
    from rlib.book.runner import profile_dir

    manifest = manifest or manifest_mod.load()
    root = profile_dir(profile)
    root.mkdir(parents=True, exist_ok=True)
    sections, toc = [], []
    for ch in manifest.chapters:
        body, entries = _chapter_section(ch, root / ch.id)
        sections.append(body)
        toc.append(f'<li><a href="#{ch.id}">{ch.id} · {html.escape(ch.title)}</a><ul>{"".join(entries)}</ul></li>')
    page = (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(manifest.title)} · {profile}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(manifest.title)}</h1>"
        f"<p class=meta>profile <b>{profile}</b> · report written {time.strftime('%Y-%m-%d %H:%M')}</p>"
        f"<nav><ul>{''.join(toc)}</ul></nav>{''.join(sections)}</body></html>"
    )
    index = root / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(page)
    return index
