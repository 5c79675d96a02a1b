"""The HTML report in a real headless browser, offline: every page loads with no failed request and nothing
fetched from a network, equations render (MathJax from the report folder), every image appears, every link
resolves, and a failed chapter shows its reason, its fix with `--profile` and a link to its log.

Needs Playwright (requirements.txt) and a Chromium: the distribution's (`apt-get install chromium`, which
`scripts/install_browser.sh` runs) or `RLIB_CHROMIUM=/path/to/chrome`. Skipped, saying which is missing,
where neither can be had. The book is two copies of the tiny fixture chapter, one with equations and one
that fails, run by `python -m rlib.book run --keep-going`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from rlib import paths

TINY = paths.ROOT / "tests" / "fixtures" / "tiny_chapter.py"
MATH_CELL = '''
# %% [markdown]
# The loss of a looped model, inline $\\mathcal{L}_i = -\\log p_\\theta(x_i \\mid x_{<i})$, and displayed:
#
# $$\\bar{\\mathcal{L}} = \\frac{1}{N} \\sum_{i=1}^{N} \\mathcal{L}_i$$
'''


def chromium_executable() -> str | None:
    """A Chromium to drive: `RLIB_CHROMIUM`, the distribution's, or None."""
    if os.environ.get("RLIB_CHROMIUM"):
        return os.environ["RLIB_CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed: `pip install -r requirements.txt` (make env)")
    executable = chromium_executable()
    if executable is None:
        pytest.skip("no Chromium found: `sudo bash scripts/install_browser.sh` (apt-get install chromium) "
                    "or set RLIB_CHROMIUM to a Chrome/Chromium binary")
    with sync_api.sync_playwright() as pw:
        try:
            instance = pw.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        except Exception as exc:  # noqa: BLE001 - a browser that cannot start here is a skip, said clearly
            pytest.skip(f"Chromium at {executable} does not start headless here: {exc}")
        yield instance
        instance.close()


def _chapter_source(folder: Path, chapter_id: str, *, equations: bool, fail: bool) -> Path:
    text = TINY.read_text().replace('book.start("tiny"', f'book.start("{chapter_id}"')
    if equations:
        text = text.replace("\n# %% tags=[\"parameters\"]", MATH_CELL + "\n# %% tags=[\"parameters\"]", 1)
    if fail:
        text = text.replace("fail: bool = False", "fail: bool = True")
    path = folder / f"{chapter_id}.py"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """`runs/smoke/` of a two-chapter book: `00_math` complete (with equations), `01_broken` failed."""
    root = tmp_path_factory.mktemp("report_book")
    good = _chapter_source(root, "00_math", equations=True, fail=False)
    bad = _chapter_source(root, "01_broken", equations=True, fail=True)
    manifest = root / "book.toml"
    manifest.write_text('[book]\ntitle = "browser test book"\nkernel = "python3"\n\n' + "".join(
        f'[[chapter]]\nid = "{cid}"\nsource = "{src}"\ntitle = "{cid}"\ntables = ["numbers"]\nfigures = ["line"]\n\n'
        for cid, src in (("00_math", good), ("01_broken", bad))))
    env = {**os.environ, "RLIB_BOOK": str(manifest), "RLIB_RUNS": str(root / "runs"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "rlib.book", "run", "--profile", "smoke", "--keep-going"],
                          cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "01_broken" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    index = root / "runs" / "smoke" / "index.html"
    assert index.exists(), proc.stdout + proc.stderr
    return index


def _visit(browser, page_path: Path) -> tuple[object, list[str]]:
    """Open a report page from disk with every non-file request refused; (page, problems)."""
    problems: list[str] = []
    page = browser.new_page()

    def only_local(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            problems.append(f"network request {route.request.url}")
            route.abort()

    page.route("**/*", only_local)
    page.on("requestfailed", lambda req: problems.append(f"failed request {req.url}: {req.failure}"))
    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, problems


def _broken_images(page) -> list[str]:
    return page.evaluate("""async () => {
        const imgs = [...document.images];
        await Promise.all(imgs.map(i => i.decode().catch(() => null)));
        return imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
    }""")


def _rendered_math(page) -> dict:
    """Wait for MathJax 3 to finish typesetting; the counts of typeset and failed equations, and raw TeX left."""
    page.wait_for_function("() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise",
                           timeout=30_000)
    page.evaluate("() => MathJax.startup.promise")
    return page.evaluate("""() => ({
        typeset: document.querySelectorAll('mjx-container svg').length,
        errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
        raw: (document.body.innerText.match(/\\$\\$|\\\\frac|\\\\mathcal/g) || []).length,
    })""")


def _local_links(page, page_path: Path) -> list[Path]:
    hrefs = page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    out = []
    for href in hrefs:
        url = urlparse(href)
        if url.scheme == "file":
            out.append(Path(unquote(url.path)))
    return sorted(set(out))


def test_every_report_page_loads_offline_with_math_images_and_links(browser, report):
    index_page, problems = _visit(browser, report)
    assert problems == [], problems
    assert _broken_images(index_page) == []
    images = index_page.evaluate("() => [...document.images].map(i => i.getAttribute('src'))")
    assert "00_math/line.png" in images
    links = _local_links(index_page, report)
    missing = [str(p) for p in links if not p.exists()]
    assert missing == [], f"links to files that do not exist: {missing}"
    ledger = report.parent / "claims.html"  # the book-wide claims ledger: a plain page, no equations
    assert ledger in links
    page, problems = _visit(browser, ledger)
    assert problems == [] and _local_links(page, ledger) == [report], problems
    page.close()
    pages = [p for p in links if p.suffix == ".html" and p not in (report, ledger)]
    assert report.parent / "00_math" / "00_math.html" in pages
    assert report.parent / ".failed" / "01_broken" / "01_broken.html" in pages  # the partial notebook
    for html in pages:
        page, problems = _visit(browser, html)
        assert problems == [], (html, problems)
        math = _rendered_math(page)
        assert math["typeset"] >= 2 and math["errors"] == 0 and math["raw"] == 0, (html, math)
        assert _broken_images(page) == [], html
        page.close()


def test_a_failed_chapter_shows_its_reason_fix_and_log(browser, report):
    page, problems = _visit(browser, report)
    assert problems == []
    failure = page.inner_text(".fail")
    assert "RuntimeError: asked to fail" in failure
    assert "python -m rlib.book run --profile smoke --only 01" in failure  # the fix names the profile
    log = page.get_attribute(".fail a:text('log')", "href")
    assert log and (report.parent / log).read_text().strip()
    assert "smoke" in page.inner_text("body") and page.locator("figcaption .note").count() >= 1  # noise note
