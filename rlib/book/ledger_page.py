"""The book-wide claims ledger: every chapter's `claims.csv` on one page (`runs/<profile>/claims.html`) and as
Markdown (`figures/CLAIMS.md` when the cpu run is promoted).

Each row is one finding of a paper (or the book's own test beside it, marked `ours`) with the paper's section,
table or figure, what the paper says, the book's test and numbers, the verdict, and for every "not held" its
diagnosis (scale, budget, setup, or a real disagreement with the paper) and the measurement behind it. The summary
counts verdicts per paper, the paper's claims and ours apart, so a reader sees at once how much of each paper
holds at the book's scale.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from rlib.book.claims import COLUMNS, PAPERS, check_ledger, verdict_counts

LEDGER_FILE = "claims.csv"
SHOWN = ("id", "where", "paper_says", "test", "measured", "verdict", "diagnosis", "evidence", "profile")


def gather(folders: dict[str, Path]) -> pd.DataFrame:
    """Every chapter's ledger (chapter id -> its output folder), in chapter order; chapters without one are
    skipped."""
    frames = []
    for chapter, folder in folders.items():
        path = Path(folder) / LEDGER_FILE
        if path.exists():
            frame = pd.read_csv(path, keep_default_na=False, dtype={"paper": str})
            if "verdict" not in frame.columns:  # a ledger from before claims were tied to the papers
                continue
            frames.append(frame.assign(chapter=chapter))
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    table = pd.concat(frames, ignore_index=True)
    table["ours"] = table["ours"].astype(str).str.lower().isin(("true", "1"))
    return table


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Verdict counts per paper, the paper's claims and ours apart, with the paper's name."""
    if table.empty:
        return pd.DataFrame()
    counts = verdict_counts(table)
    counts.insert(1, "title", [PAPERS.get(s.split()[0], "") for s in counts["source"]])
    return counts


def _cell(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _verdict_class(verdict: str) -> str:
    return {"held": "status-complete", "not held": "status-failed"}.get(verdict, "meta")


def ledger_html(table: pd.DataFrame, link: Callable[[str, str], str | None] | None = None) -> str:
    """The ledger's body: the summary, the problems `check_ledger` finds, then one table per chapter. `link(chapter,
    artifact)` gives the address of the table or figure that holds a claim's numbers (None: no link)."""
    if table.empty:
        return "<p class=status-missing>no chapter has written a claims ledger yet</p>"
    out = ["<h2>Summary</h2>", summary(table).to_html(index=False, border=0)]
    problems = check_ledger(table)
    if problems:
        out.append("<div class=fail><b>ledger problems</b><br>" + "<br>".join(map(_cell, problems)) + "</div>")
    for chapter, rows in table.groupby("chapter", sort=False):
        out.append(f'<h2 id="{_cell(chapter)}">{_cell(chapter)}</h2><div class=scroll><table><tr>'
                   + "".join(f"<th>{c}</th>" for c in (*SHOWN, "artifact")) + "</tr>")
        for row in rows.itertuples():
            tag = " <span class=meta>(ours)</span>" if row.ours else ""
            cells = [f"<td><code>{_cell(row.id)}</code>{tag}</td>"]
            cells += [f"<td>{_cell(getattr(row, c))}</td>" for c in SHOWN[1:5]]
            cells.append(f'<td class="{_verdict_class(row.verdict)}">{_cell(row.verdict)}</td>')
            cells += [f"<td>{_cell(getattr(row, c))}</td>" for c in SHOWN[6:]]
            address = link(row.chapter, row.artifact) if (link and row.artifact) else None
            cells.append(f'<td><a href="{html.escape(address)}">{_cell(row.artifact)}</a></td>' if address
                         else f"<td>{_cell(row.artifact)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table></div>")
    return "\n".join(out)


def ledger_markdown(table: pd.DataFrame, title: str = "Claims ledger") -> str:
    """The same ledger as Markdown, for `figures/CLAIMS.md`."""
    lines = [f"# {title}", "", "Verdict counts per paper (the paper's claims and the book's own apart):", ""]
    if table.empty:
        return "\n".join([*lines, "no chapter has written a claims ledger yet", ""])
    lines += [summary(table).to_markdown(index=False), ""]
    for chapter, rows in table.groupby("chapter", sort=False):
        shown = rows.assign(id=[f"{i} (ours)" if o else i for i, o in zip(rows["id"], rows["ours"])])
        lines += [f"## {chapter}", "", shown[list(SHOWN)].to_markdown(index=False), ""]
    return "\n".join(lines)
