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
