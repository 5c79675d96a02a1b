"""The one run grid every chapter uses (`rlib.experiments.run_grid`, `RunSlot`, `cached`): each run computes once per
key, a changed setting or code reruns it, stale training folders go, and repeated names are refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rlib import experiments


@dataclass(frozen=True)
class Item:
    name: str


def _grid(items, work, context, calls, modules=("rlib.experiments",)):
    def compute(item, slot):
        calls.append(item.name)
        assert slot.folder == work / item.name
        return {"name": item.name, "key": slot.key}

    return experiments.run_grid(items, work, compute, context=context, modules=modules, desc="test")


def test_each_run_computes_once_per_key_and_reruns_when_a_setting_changes(tmp_path):
    items, calls = [Item("a"), Item("b")], []
    first = _grid(items, tmp_path, ("x",), calls)
    again = _grid(items, tmp_path, ("x",), calls)
    assert first == again and calls == ["a", "b"]
    assert [r["name"] for r in first] == ["a", "b"]  # results come back in items order
    _grid(items[:1], tmp_path, ("y",), calls)  # a new setting: the run is stale and reruns
    assert calls == ["a", "b", "a"]
    _grid(items, tmp_path, lambda item: ("y",) if item.name == "a" else ("x",), calls)  # per-item context
    assert calls == ["a", "b", "a"]


def test_the_code_digest_is_part_of_the_key(tmp_path):
    calls = []
    _grid([Item("a")], tmp_path, (), calls, modules=("rlib.experiments",))
    _grid([Item("a")], tmp_path, (), calls, modules=("rlib.fsutil",))
    assert calls == ["a", "a"]


def test_another_chapter_finds_a_current_result_by_the_grids_own_key(tmp_path):
    """`run_key` is the key `run_grid` stores; `stored_result` returns a result only under that key and counts no
    cache hit (chapter 02 asks whether chapter 01 already trained a run it would train the same way)."""
    calls = []
    (first,) = _grid([Item("a")], tmp_path, ("x",), calls)
    key = experiments.run_key(Item("a"), ("x",), ("rlib.experiments",))
    assert first["key"] == key
    before = experiments.cache_tally()
    assert experiments.stored_result(tmp_path / "a", key) == first
    assert experiments.cache_tally() == before
    assert experiments.stored_result(tmp_path / "a", experiments.run_key(Item("a"), ("y",), ("rlib.experiments",))) \
        is None
    assert experiments.stored_result(tmp_path / "missing", key) is None


def test_repeated_run_names_are_refused_before_any_work(tmp_path):
    calls = []
    with pytest.raises(ValueError, match=r"repeated: \['a'\]"):
        _grid([Item("a"), Item("a")], tmp_path, (), calls)
    assert calls == []


def test_a_slot_removes_training_folders_of_other_keys(tmp_path):
    old = tmp_path / "run" / "train-old"
    (old / "checkpoint").mkdir(parents=True)
    slot = experiments.RunSlot(tmp_path / "run", "new")
    assert slot.train_dir == tmp_path / "run" / "train-new" and not old.exists()
    (slot.train_dir / "checkpoint").mkdir(parents=True)
    (slot.train_dir / "metrics.csv").write_text("step,loss\n")
    slot.drop_checkpoint()
    assert not (slot.train_dir / "checkpoint").exists() and (slot.train_dir / "metrics.csv").exists()


def test_an_interrupted_compute_leaves_no_result(tmp_path):
    def boom(item, slot):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        experiments.run_grid([Item("a")], tmp_path, boom)
    assert not (tmp_path / "a" / experiments.RESULT_FILE).exists()


@dataclass(frozen=True)
class Child:
    name: str
    parent: Item


def test_a_parent_read_back_without_its_saved_model_is_computed_again(tmp_path):
    """A grid whose items post-train a parent (`.parent`) needs the parent's model/: a parent stored by a grid that
    had no child of it (so kept no model) computes again, once, and its saved model is then read like any result."""
    from rlib.model import convert

    calls = []

    def compute(item, slot):
        calls.append(item.name)
        if isinstance(item, Item) and any(getattr(i, "parent", None) == item for i in grid):
            (slot.folder / "model").mkdir(parents=True, exist_ok=True)
            (slot.folder / "model" / convert.CONFIG_FILE).write_text("{}")
        return {"name": item.name}

    parent = Item("base")
    grid = [parent]
    experiments.run_grid(grid, tmp_path, compute, modules=("rlib.experiments",))  # no child: no model kept
    assert calls == ["base"] and not (tmp_path / "base" / "model").exists()
    grid = [parent, Child("post", parent)]
    first = experiments.run_grid(grid, tmp_path, compute, modules=("rlib.experiments",))
    assert calls == ["base", "base", "post"] and (tmp_path / "base" / "model" / convert.CONFIG_FILE).exists()
    again = experiments.run_grid(grid, tmp_path, compute, modules=("rlib.experiments",))
    assert again == first and calls == ["base", "base", "post"]  # the model is there now: everything is read back


def test_load_model_names_the_missing_run_and_the_fix(tmp_path):
    with pytest.raises(Exception, match="run the grid"):
        experiments.load_model(tmp_path, "nothing", how="run the grid")


def test_the_cache_tally_counts_reads_and_computes_with_their_time(tmp_path):
    import json

    before = experiments.cache_tally()
    items, calls = [Item("a"), Item("b")], []
    _grid(items, tmp_path, ("x",), calls)
    _grid(items, tmp_path, ("x",), calls)
    after = experiments.cache_tally()
    assert after["computed"] - before["computed"] == 2 and after["read"] - before["read"] == 2
    stored = json.loads((tmp_path / "a" / experiments.RESULT_FILE).read_text())
    assert stored["seconds"] >= 0 and after["read_without_time"] == before["read_without_time"]
    # a result written before the time was recorded is still read, and counted as such
    del stored["seconds"]
    (tmp_path / "a" / experiments.RESULT_FILE).write_text(json.dumps(stored))
    _grid(items[:1], tmp_path, ("x",), calls)
    assert experiments.cache_tally()["read_without_time"] == before["read_without_time"] + 1 and calls == ["a", "b"]
