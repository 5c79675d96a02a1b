"""The promoted folders' README inlines short tables whole and cuts long ones to their head with a link."""

from __future__ import annotations

from rlib.book.promote import README_TABLE_ROWS, _inline_table


def _table(path, rows: int):
    path.write_text("\n".join(["| a |", "|--:|", *(f"| {i} |" for i in range(rows))]))
    return path


def test_a_short_table_is_inlined_whole(tmp_path):
    text = _inline_table(_table(tmp_path / "t.md", README_TABLE_ROWS), "ch/t")
    assert text.count("\n") == README_TABLE_ROWS + 2 and "whole table" not in text


def test_a_long_table_keeps_its_head_and_links_the_file(tmp_path):
    text = _inline_table(_table(tmp_path / "t.md", README_TABLE_ROWS + 1), "ch/t")
    assert f"| {README_TABLE_ROWS - 1} |" in text and f"| {README_TABLE_ROWS} |" not in text
    assert f"First {README_TABLE_ROWS} of {README_TABLE_ROWS + 1} rows" in text and "(ch/t.md)" in text
