"""The book-wide claims ledger (rlib.book.ledger_page): gathered from every chapter's claims.csv, counted per paper
with ours apart, rendered as HTML and Markdown, with ledger problems shown."""

from __future__ import annotations

import pandas as pd

from rlib.book import ledger_page
from rlib.book.claims import ClaimSpec, Ledger

SPECS = (ClaimSpec("rrt.a", "000", "Fig. 6", "relaxation helps", "ppl drops", artifact="relaxation"),
         ClaimSpec("rrt.a.ours", "000", "Fig. 6", "relaxation helps", "ppl drops by 5 % (threshold ours)", ours=True),
         ClaimSpec("mor.b", "001", "Table 3", "MoR beats vanilla", "nll lower"))


def _write(folder, chapter, verdicts):
    ledger = Ledger(chapter, "cpu", SPECS)
    for claim, held in verdicts:
        ledger.judge(claim, held, "x", diagnosis=("budget", "more steps close the gap") if held is False else None)
    folder.mkdir(parents=True)
    ledger.finish().to_csv(folder / "claims.csv", index=False)


def test_gather_counts_and_renders(tmp_path):
    _write(tmp_path / "02", "02_relaxed_recursion", [("rrt.a", True), ("rrt.a.ours", False), ("mor.b", None)])
    (tmp_path / "03").mkdir()  # a chapter without a ledger is skipped
    table = ledger_page.gather({"02_relaxed_recursion": tmp_path / "02", "03": tmp_path / "03"})
    assert list(table["id"]) == ["rrt.a", "rrt.a.ours", "mor.b"] and table["ours"].tolist() == [False, True, False]
    counts = ledger_page.summary(table).set_index("source")
    assert counts.loc["000 (paper)", "held"] == 1 and counts.loc["000 (ours)", "not held"] == 1
    assert counts.loc["001 (paper)", "not measured"] == 1
    page = ledger_page.ledger_html(table, lambda ch, art: f"index.html#{ch}-tab-{art}")
    assert '<a href="index.html#02_relaxed_recursion-tab-relaxation">relaxation</a>' in page
    assert "rrt.a.ours</code> <span class=meta>(ours)" in page and "more steps close the gap" in page
    assert "ledger problems" not in page
    md = ledger_page.ledger_markdown(table)
    assert "## 02_relaxed_recursion" in md and "rrt.a.ours (ours)" in md


def test_a_not_held_without_diagnosis_is_flagged(tmp_path):
    _write(tmp_path / "01", "01", [("rrt.a", True), ("rrt.a.ours", True), ("mor.b", True)])
    frame = pd.read_csv(tmp_path / "01" / "claims.csv")
    frame.loc[0, "verdict"] = "not held"
    frame.to_csv(tmp_path / "01" / "claims.csv", index=False)
    page = ledger_page.ledger_html(ledger_page.gather({"01": tmp_path / "01"}))
    assert "ledger problems" in page and "rrt.a: not held without a diagnosis" in page


def test_old_style_ledgers_and_no_ledgers_are_handled(tmp_path):
    (tmp_path / "old").mkdir()
    pd.DataFrame({"claim": ["x"], "held": ["held"]}).to_csv(tmp_path / "old" / "claims.csv", index=False)
    table = ledger_page.gather({"old": tmp_path / "old"})
    assert table.empty and "no chapter has written" in ledger_page.ledger_html(table)


def test_rejudging_the_promoted_tables_covers_every_chapter_without_problems():
    from pathlib import Path

    from rlib.book.claims import check_ledger
    from rlib.book.rejudge import JUDGES, rejudge

    figures = Path(__file__).resolve().parents[1] / "figures"
    table = rejudge(figures, "cpu")
    assert list(dict.fromkeys(table["chapter"])) == [c for c in JUDGES if (figures / c).is_dir()]
    assert not check_ledger(table)
    assert set(rejudge(figures, "cpu", only=["00"])["chapter"]) == {"00_models_and_data"}


def test_the_cpu_ledger_takes_the_rows_only_cpu_long_measured(tmp_path, monkeypatch):
    from rlib import paths
    from rlib.book import rejudge

    monkeypatch.setattr(paths, "FIGURES", tmp_path)
    columns = ["id", "verdict", "measured", "profile"]
    cpu = pd.DataFrame([["a", "held", "1", "cpu"], ["b", "not measured", "needs: cpu-long", "cpu"],
                        ["c", "not measured", "needs: more", "cpu"]], columns=columns)
    longer = pd.DataFrame([["a", "not held", "2", "cpu-long"], ["b", "not held", "3", "cpu-long"],
                           ["c", "not measured", "needs: more", "cpu-long"]], columns=columns)
    assert rejudge.with_extensions(cpu, "cpu").equals(cpu)  # nothing promoted from cpu-long: unchanged
    (tmp_path / "cpu-long").mkdir()
    monkeypatch.setattr(rejudge, "rejudge", lambda folder, profile, only=None: longer if profile == "cpu-long" else cpu)
    merged = rejudge.with_extensions(cpu, "cpu").set_index("id")
    # a row cpu measured stays cpu's; a row only cpu-long measured comes from it and names it; unmeasured stays
    assert merged.loc["a", "verdict"] == "held" and merged.loc["a", "profile"] == "cpu"
    assert merged.loc["a", "measured"] == "1 [cpu-long, with its added runs: not held: 2]"  # both measured: shown
    assert merged.loc["b"].tolist() == ["not held", "3", "cpu-long"]
    assert merged.loc["c", "verdict"] == "not measured"


# promoted rows whose claims code changed after their run (the run's own claims.csv keeps the verdict it was judged
# with; CLAIMS.md shows the re-judged one): (profile, chapter, claim) -> (claims.csv, current code). Each entry goes
# when its chapter runs again. (Chapter 05's cpu-long rows went with its cpu-long run of 2026-12-06, at 19adbe5;
# its cpu row, Fig. 9's rule fix of 52df975, with its cpu run over the cache at 5eb2b53 the same day.)
KNOWN_DRIFT: dict = {
    # claims added on 2026-12-06 from the paper's text (no promoted claims.csv has them yet); the cpu rows go with
    # the chapters' next cpu runs (chapters 02's to 05's went with their cpu runs of 2026-12-06), the cpu-long
    # rows with their next cpu-long runs (chapter 04's went with its cpu-long run of 2026-12-06, chapter 02's with
    # its cpu-long run of 2026-12-07)
    ("cpu-long", "03_mixture_of_recursions", "mor.s4_3.kv_share_fewer_flops"): (None, "not measured"),
    ("cpu-long", "03_mixture_of_recursions", "mor.tab4.tc_mlp_router_best"): (None, "held"),
    ("cpu-long", "05_layerskip", "ls.s411.exp_time_curriculum_from_scratch"): (None, "not measured"),
    ("cpu-long", "05_layerskip", "ls.s21.shared_head_cheaper"): (None, "not measured"),
    # 2026-12-07: paired timing rounds decide a claim only from rlib.rounds.DECIDING_ROUNDS (5); the continual and code
    # studies time 3 rounds (75 % coverage), so Sec. 8's 'recipe required' there reads not testable until they time
    # more (the cpu rows went with the cpu re-run of 2026-12-07; the cpu-long rows go with the next cpu-long runs)
    ("cpu-long", "05_layerskip", "ls.s8.recipe_required.code"): ("not held", "not testable at this scale"),
    ("cpu-long", "05_layerskip", "ls.s8.recipe_required.code.ours"): ("not held", "not testable at this scale"),
    ("cpu-long", "05_layerskip", "ls.s8.recipe_required.continual.sampled"): ("not held", "not testable at this scale"),
    ("cpu-long", "05_layerskip", "ls.s8.recipe_required.continual.ours"): ("not held", "not testable at this scale"),
    # 2026-12-07, MoR claims read against the paper again: Table 14's function tokens include punctuation and line
    # breaks (the paper's own examples '—' and '\n'); Sec. 3.2's MoR behind vanilla is stated at 135M, as its sister
    # claim at > 360M (not testable below); the cpu rows went with the cpu re-run of 2026-12-07
    ("cpu-long", "03_mixture_of_recursions", "mor.fig1_tab14.depth_follows_semantics"): ("held", "not held"),
    ("cpu-long", "03_mixture_of_recursions", "mor.fig3.mor_behind_vanilla_smallest"): ("not held",
                                                                                      "not testable at this scale"),
    # (chapter 02's cpu-long rows, §2.3 / §3.5's full rank posed as the paper does and its one-seed gaps judged
    # against the seed s.d., went with its cpu-long run of 2026-12-07)
    # 2026-12-07, diagnoses and verdicts the chapters' own numbers contradicted (the rows go with the chapters' next
    # runs): chapter 03's throughput decided from 5 paired rounds
    # (3 before) and Table 3's token-choice MoR-3 behind Recursive-3 (new, ours); chapter 05's Fig. 8 with one seed
    # (its s.d. unknown, not 0) and Table 4's code ROUGE-2 with every score 0 (not testable)
    ("cpu-long", "03_mixture_of_recursions", "mor.fig4a.throughput"): ("not held", "not testable at this scale"),
    ("cpu-long", "03_mixture_of_recursions", "mor.fig4a.throughput_rises_with_nr"): ("not held",
                                                                                    "not testable at this scale"),
    ("cpu-long", "03_mixture_of_recursions", "mor.tab3.tc_behind_recursive"): (None, "not held"),
    ("cpu-long", "05_layerskip", "ls.tab4.generation_quality.code"): ("not held", "not testable at this scale"),
    # Table 2's Draft & Verify comparison decided by the paired rounds (3 in the continual study: not testable)
    ("cpu-long", "05_layerskip", "ls.tab2.vs_draft_and_verify.sampled"): ("not held", "not testable at this scale"),
}


def test_the_current_claims_code_gives_every_promoted_chapter_its_own_verdicts():
    """A ledger is a pure function of a chapter's tables: judging each promoted folder again must give the verdicts
    of its own claims.csv. A change to a claim's test that flips a promoted verdict must re-run the chapter (or be
    listed in KNOWN_DRIFT until it does), so figures/ never shows a verdict the code no longer gives."""
    import pandas as pd

    from rlib.book.layout import promoted_dir
    from rlib.book.rejudge import rejudge

    drift = {}
    for profile in ("cpu", "cpu-long"):
        root = promoted_dir(profile)
        table = rejudge(root, profile)
        for chapter, rows in table.groupby("chapter"):
            own = pd.read_csv(root / chapter / "claims.csv").set_index("id")["verdict"]
            now = rows.set_index("id")["verdict"]
            for claim in own.index.union(now.index):
                if own.get(claim) != now.get(claim):
                    drift[(profile, chapter, claim)] = (own.get(claim), now.get(claim))
    assert drift == KNOWN_DRIFT
