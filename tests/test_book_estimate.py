"""`python -m rlib.book plan`: expected times per chapter, and the machine they were measured on beside this one."""

from __future__ import annotations

from rlib import precision
from rlib.book import estimate, speed
from rlib.book.estimate import ChapterEstimate, format_estimate


def _rows(device: str) -> list[ChapterEstimate]:
    return [ChapterEstimate("00_models_and_data", "never run", 600.0, "promoted run", 2, 0, None, 600.0, device),
            ChapterEstimate("01_recursive_conversion", "up to date", 1200.0, "last run", 2, 15, None, 0.0, device)]


def test_plan_names_where_its_times_come_from(monkeypatch):
    monkeypatch.setattr(speed, "speed_factor", lambda: (1.0, 0.031))
    monkeypatch.setattr(precision, "bf16_native", lambda: True)
    monkeypatch.setattr("rlib.book.session._cpu_name", lambda: "Reference CPU")
    text = format_estimate("cpu", _rows("Reference CPU"))
    assert "total expected: 10.0 min" in text
    assert "the times above were measured on: Reference CPU" in text
    assert "bf16 native: yes" in text and "expect other times" not in text  # the same machine, quiet: no warning
    # an AVX2-only machine: the note says the times will not hold there, and why
    monkeypatch.setattr(precision, "bf16_native", lambda: False)
    monkeypatch.setattr(speed, "speed_factor", lambda: (1.9, 0.059))
    monkeypatch.setattr("rlib.book.session._cpu_name", lambda: "Other CPU")
    lines = estimate.machine_lines(_rows("Reference CPU"))
    assert "bf16 native: no (precision 'auto' trains in fp32), speed factor 1.90" in lines[0]
    assert "expect other times" in lines[-1]


def test_a_wall_time_over_cached_runs_counts_their_compute_when_this_cache_lacks_them():
    tally = {"computed": 0, "read": 16, "read_compute_s": 2400.0}
    assert estimate.missing_compute_s(tally, cached_here=0, workers=2) == 1200.0  # all 16 runs train here, 2 workers
    assert estimate.missing_compute_s(tally, cached_here=16, workers=2) == 0.0  # all cached here: read back again
    assert estimate.missing_compute_s(tally, cached_here=12, workers=1) == 600.0  # 4 of 16 missing
    assert estimate.missing_compute_s({"computed": 9, "read": 0}, cached_here=0, workers=2) == 0.0  # an uncached run
    assert estimate.missing_compute_s(None, cached_here=0, workers=2) == 0.0
    rows = [ChapterEstimate("02_relaxed_recursion", "never run", 800.0, "promoted run", 2, 0, None, 2000.0, None,
                            1200.0)]
    text = format_estimate("cpu", rows)
    assert "est. 33.3 min" in text and "est. = that last run read grid results" in text
