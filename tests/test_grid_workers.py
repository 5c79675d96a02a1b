"""rlib.grid_workers through rlib.experiments.run_grid: missing runs computed in spawned worker processes (one torch
thread each), results in the grid's order and stored as a sequential grid stores them, read back on the next call,
clear errors for a compute a worker cannot import and for a failing run."""

from __future__ import annotations

import json
import multiprocessing
import os
from dataclasses import dataclass

import pytest
import torch

from rlib import experiments
from rlib.grid_workers import layout_throughput, resolve_workers


@dataclass(frozen=True)
class Item:
    name: str
    value: int


def square(item: Item, slot: experiments.RunSlot) -> dict:
    """A module-level compute: a worker imports it by name."""
    if item.value < 0:
        raise ValueError(f"negative value {item.value}")
    return {"name": item.name, "square": item.value ** 2, "pid": os.getpid(), "threads": torch.get_num_threads()}


ITEMS = [Item("a", 2), Item("b", 3), Item("c", 4)]


def start_a_process(item: Item, slot: experiments.RunSlot) -> dict:
    """A run that starts a process of its own (chapter 04's LM runs do): a daemonic worker could not."""
    child = multiprocessing.get_context("spawn").Process(target=os.getpid)
    child.start()
    child.join()
    return {"name": item.name, "child_exit": child.exitcode}


def test_workers_compute_missing_runs_in_other_processes_and_store_them(tmp_path):
    before = experiments.cache_tally()
    results = experiments.run_grid(ITEMS, tmp_path, square, workers=2)
    assert [r["square"] for r in results] == [4, 9, 16]  # the grid's order, whatever order the workers finished in
    assert all(r["pid"] != os.getpid() for r in results) and all(r["threads"] == 1 for r in results)
    after = experiments.cache_tally()
    assert after["computed"] - before["computed"] == 3
    for item, r in zip(ITEMS, results):
        stored = json.loads((tmp_path / item.name / experiments.RESULT_FILE).read_text())
        assert stored["result"] == r and stored["key"] == experiments.run_key(item)
    again = experiments.run_grid(ITEMS, tmp_path, square, workers=2)  # all current: read back, nothing computed
    assert again == results and experiments.cache_tally()["computed"] == after["computed"]


def cube(item: Item, slot: experiments.RunSlot) -> dict:
    return {"name": item.name, "cube": item.value ** 3, "pid": os.getpid()}


def test_several_grids_share_one_pool_and_each_is_stored_as_its_own_grid(tmp_path):
    before = experiments.cache_tally()
    squares = experiments.Grid(ITEMS[:1], tmp_path / "squares", square, context=("s",))
    cubes = experiments.Grid(ITEMS[1:], tmp_path / "cubes", cube, context=("c",))
    got = experiments.run_grids([squares, cubes], workers=2)
    assert [r["square"] for r in got[0]] == [4] and [r["cube"] for r in got[1]] == [27, 64]
    assert all(r["pid"] != os.getpid() for g in got for r in g)  # one missing run in a grid still went to the pool
    after = experiments.cache_tally()
    assert after["computed"] - before["computed"] == 3 and after["read"] == before["read"]
    # each grid's own later call reads its runs back under its own key
    assert experiments.run_grid(ITEMS[1:], tmp_path / "cubes", cube, context=("c",)) == got[1]
    assert experiments.cache_tally()["computed"] == after["computed"]
    stored = json.loads((tmp_path / "squares" / "a" / experiments.RESULT_FILE).read_text())
    assert stored["key"] == experiments.run_key(ITEMS[0], ("s",))


def test_a_grid_with_one_missing_run_computes_it_here(tmp_path):
    experiments.run_grid(ITEMS[:2], tmp_path, square, workers=2)
    results = experiments.run_grid(ITEMS, tmp_path, square, workers=2)
    assert results[2]["pid"] == os.getpid() and results[2]["square"] == 16


def test_a_run_in_a_worker_may_start_processes(tmp_path):
    results = experiments.run_grid(ITEMS[:2], tmp_path, start_a_process, workers=2)
    assert [r["child_exit"] for r in results] == [0, 0]


def test_a_lambda_compute_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="module-level function or a functools.partial"):
        experiments.run_grid(ITEMS, tmp_path, lambda item, slot: square(item, slot), workers=2)
    assert not any((tmp_path / item.name / experiments.RESULT_FILE).exists() for item in ITEMS)


def test_a_failing_run_is_named_and_the_finished_ones_are_kept(tmp_path):
    experiments.run_grid(ITEMS[:1], tmp_path, square)
    with pytest.raises(RuntimeError, match="run 'bad'.*negative value -1"):
        experiments.run_grid([*ITEMS[:1], Item("bad", -1), Item("d", 5)], tmp_path, square, workers=2)
    assert experiments.stored_result(tmp_path / "a", experiments.run_key(ITEMS[0]))["square"] == 4


def test_worker_counts_are_checked():
    assert resolve_workers(3) == 3
    assert resolve_workers("auto") == (1 if torch.cuda.is_available() else torch.get_num_threads())
    for bad in (0, -2, "two", True, 1.5):
        with pytest.raises(ValueError, match="workers="):
            resolve_workers(bad)


def seconds_by_threads(steps: int) -> float:
    """A 'step' whose time is 1 / (torch threads): the layout measurement must see each side's thread count."""
    return 1.0 / torch.get_num_threads()


def test_layout_throughput_times_one_threaded_process_against_one_thread_workers():
    before = torch.get_num_threads()
    row = layout_throughput(seconds_by_threads, steps=1, workers=2)
    assert row["threaded_s"] == 0.5 and row["worker_s"] == [1.0, 1.0]  # 2 threads here, 1 in each worker
    assert row["workers_steps_per_s"] == 2.0 and row["ratio"] == 1.0
    assert torch.get_num_threads() == before


@dataclass(frozen=True)
class Step:
    name: str
    after: str = ""


def stamp(item: Step, slot: experiments.RunSlot) -> dict:
    """A run that reads the run it needs (as a distillation run loads its teacher's saved model)."""
    import time

    if item.after:
        needed = json.loads((slot.folder.parent / item.after / "stamp.json").read_text())
    else:
        time.sleep(0.5)  # the needed run is the slow one: without the wait its dependant would start first
        needed = None
    (slot.folder / "stamp.json").write_text(json.dumps({"at": time.time()}))
    return {"name": item.name, "read": needed is not None, "pid": os.getpid()}


def test_a_run_starts_only_after_the_run_it_needs(tmp_path):
    steps = [Step("teacher"), Step("student", after="teacher"), Step("other")]
    results = experiments.run_grid(steps, tmp_path, stamp, workers=2, needs=lambda s: [s.after] if s.after else [])
    assert [r["read"] for r in results] == [False, True, False]
    assert all(r["pid"] != os.getpid() for r in results)


def test_needs_that_form_a_cycle_are_refused_before_any_run(tmp_path):
    steps = [Step("a", after="b"), Step("b", after="a")]
    with pytest.raises(ValueError, match="wait on each other"):
        experiments.run_grid(steps, tmp_path, stamp, workers=2, needs=lambda s: [s.after])
    assert not any((tmp_path / s.name / experiments.RESULT_FILE).exists() for s in steps)


@dataclass(frozen=True)
class Post:
    name: str
    parent: Item


def train_or_post_train(item, slot: experiments.RunSlot) -> dict:
    """A parent saves its model only when the grid keeps models (a marker file), as chapter 02's grids do; a child
    loads its parent's saved model."""
    from rlib.model import convert

    if isinstance(item, Post):
        parent_model = slot.folder.parent / item.parent.name / "model" / convert.CONFIG_FILE
        return {"name": item.name, "base": json.loads(parent_model.read_text())["pid"]}
    if (slot.folder.parent / "keep").exists():
        (slot.folder / "model").mkdir(parents=True, exist_ok=True)
        (slot.folder / "model" / convert.CONFIG_FILE).write_text(json.dumps({"pid": os.getpid()}))
    return {"name": item.name, "pid": os.getpid()}


def test_a_child_waits_for_its_parent_and_an_unsaved_parent_is_computed_again_in_a_worker(tmp_path):
    base, other = Item("base", 1), Item("other", 2)
    experiments.run_grid([base], tmp_path, train_or_post_train)  # stored without its model
    (tmp_path / "keep").touch()
    grid = [base, Post("post", base), Post("post2", base), other]
    results = experiments.run_grid(grid, tmp_path, train_or_post_train, workers=2)
    assert results[0]["pid"] != os.getpid()  # the parent ran again, in a worker, and saved its model first
    assert results[1]["base"] == results[2]["base"] == results[0]["pid"]


def started(item: Item, slot: experiments.RunSlot) -> dict:
    """A run that records when it started, then holds its worker until two runs have started (or 20 s pass): so
    the first two runs the pool hands out are the first two to start, however slowly the second worker spawns (a
    fixed sleep raced a slow spawn in CI: a worker freed by the first run took the third before the second began)."""
    import time

    at = time.time()
    marks = slot.folder.parent.parent / "started"  # shared by both grids of the test
    marks.mkdir(exist_ok=True)
    (marks / item.name).touch()
    deadline = at + 20.0
    while len(list(marks.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.01)
    return {"name": item.name, "started": at, "pid": os.getpid()}


def test_a_pool_starts_the_costliest_runs_first_and_keeps_each_grids_result_order(tmp_path):
    cheap_first = [Item("short", 1), Item("middle", 5), Item("long", 9)]
    costed = experiments.Grid(cheap_first, tmp_path / "costed", started, cost=lambda item: item.value)
    plain = experiments.Grid([Item("x", 0), Item("y", 0)], tmp_path / "plain", started)
    plans = [(plain, None, None), (costed, None, None)]
    todo = [(0, 0, False), (0, 1, False), (1, 0, False), (1, 1, False), (1, 2, False)]
    order = [plans[g][0].items[i].name for g, i, _ in experiments.pool_order(plans, todo)]
    assert order == ["long", "middle", "short", "x", "y"]  # the costed grid's runs first, costliest first
    out_plain, out_costed = experiments.run_grids([plain, costed], workers=2)
    assert [r["name"] for r in out_costed] == ["short", "middle", "long"]  # results in the items' order
    start = {r["name"]: r["started"] for r in out_plain + out_costed}
    assert max(start["long"], start["middle"]) < min(start["short"], start["x"], start["y"])  # the pool's first two


def test_chapter_05s_pretrained_runs_are_costed_longest_first():
    from rlib.layerskip.adapt import run_cost
    from rlib.layerskip.config import AdaptConfig, adapt_runs

    cfg = AdaptConfig.preset("cpu")
    costs = {run.name: run_cost(run, cfg) for run in adapt_runs(cfg)}
    assert costs["continual-ld_ee"] > costs["continual-baseline"] > costs["source"] > 0
