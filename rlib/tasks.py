"""The book's local lm-eval task suite, built from the held-out splits of the embedded corpora.

Four tasks, written as JSONL + YAML under `paths.CACHE / "tasks"` (see data/tasks/README.md):

    book_cloze     LAMBADA-style: a passage of held-out verse (Shakespeare, Gutenberg poetry) whose final
                   word is the target, a word that already occurs earlier in the passage (loglikelihood;
                   acc = the word is the greedy continuation, perplexity)
    book_nextline  HellaSwag-style: a few lines of verse, then 4 candidate next lines; the 3 distractors are
                   lines of other held-out documents of the same corpus (multiple_choice; acc, acc_norm)
    book_ppl       rolling log-likelihood of held-out documents of all four corpora, cut to `PPL_CHARS`
                   (loglikelihood_rolling; word_perplexity, byte_perplexity, bits_per_byte)
    book_code      code multiple choice: a HumanEval prompt with its canonical solution among 3 solutions of
                   other problems, or the next line of held-out stdlib code among lines of other held-out
                   files, re-indented like the true line (multiple_choice; acc)

Test items come from the "test" split only, few-shot examples from "validation" only (HumanEval has no
validation split, so book_code's few-shot pool is stdlib lines). Every random choice goes through one
`random.Random(seed)` per task and split, so a build is reproducible. `build()` writes the folder atomically
and skips the work when its key (recipe, sizes, seed, corpus fingerprints, this file) is unchanged.

    python -m rlib.tasks build [--n-items 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

from rlib import assets, corpora, paths
from rlib.fsutil import atomic_folder, file_lock

__all__ = ["STANDARD_TASKS", "TASKS", "build", "default_dir", "is_built", "read_items", "resolve_suite",
           "standard_tasks_missing"]

TASKS = ("book_cloze", "book_nextline", "book_ppl", "book_code")
# The zero-shot suite of the Relaxed Recursive Transformers paper (Table D.1 and later), as lm-eval names it.
STANDARD_TASKS = ("lambada_openai", "hellaswag", "piqa", "winogrande", "arc_easy", "arc_challenge", "openbookqa")
SUITES = ("local", "standard")
# chance accuracy of the local multiple-choice tasks scored from scratch-trained models (rlib.scratch_eval; book_cloze
# has no choices: its target is any word)
CHANCE = {"book_nextline": 0.25}
# The metric a summary table reports per task: accuracy, length-normalised where lm-eval offers it for
# multiple choice with free-text options, and bits per byte for the rolling perplexity task.
PRIMARY_METRIC = {"book_cloze": "acc", "book_nextline": "acc_norm", "book_ppl": "bits_per_byte", "book_code": "acc",
                  "lambada_openai": "acc", "hellaswag": "acc_norm", "piqa": "acc_norm", "winogrande": "acc",
                  "arc_easy": "acc", "arc_challenge": "acc_norm", "openbookqa": "acc_norm"}
# Accuracy (%) of guessing uniformly among the choices; cloze tasks have no fixed choice set.
CHANCE_ACCURACY = {"book_nextline": 25.0, "book_code": 25.0, "hellaswag": 25.0, "piqa": 50.0,
                   "winogrande": 50.0, "arc_easy": 25.0, "arc_challenge": 25.0, "openbookqa": 25.0}
RECIPE_VERSION = 1
SEED = 1234
N_ITEMS = 200  # test items per task
N_FEWSHOT = 20  # validation items per task (the few-shot pool)
N_CHOICES = 4
CLOZE_LINES = 12  # lines of a cloze passage, the target line included
NEXTLINE_CONTEXT = 4  # lines of verse before the candidate next lines
CODE_CONTEXT = 12  # lines of code before the candidate next lines
PPL_CHARS = 1_500  # a perplexity document is cut (at a line end) to at most this many characters
MIN_LINE_CHARS = 20  # verse lines used as targets or distractors
MIN_CODE_CHARS = 12  # stripped code lines used as targets or distractors
KEY_FILE = "build.json"

_WORD_AT_END = re.compile(r"(?<=\s)([A-Za-z][A-Za-z']*[A-Za-z])[^A-Za-z0-9\s]*$")
_VERSE_CORPORA = ("shakespeare", "gutenberg-poetry")
_SPEAKER = re.compile(r"^[A-Z][A-Za-z']*( [A-Z][A-Za-z']*){0,3}:$")  # "BRUTUS:", "First Murderer:", "Provost:"


def default_dir() -> Path:
    return paths.CACHE / "tasks"


# ----------------------------------------------------------------------------------------------
# sources: held-out documents as lists of lines


def _lines(text: str) -> list[str]:
    """Non-empty lines, trailing blanks removed."""
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _is_speech(line: str) -> bool:
    """A line of verse or prose: not a Shakespeare speaker label, stage direction or heading."""
    s = line.strip()
    if s.startswith("[") or s.isupper() or _SPEAKER.match(s):
        return False
    return not s.startswith(("ACT ", "SCENE ", "Scene "))


def _docs(corpus: str, split: str) -> list[tuple[str, str, list[str]]]:
    """(corpus, doc_id, lines) of every document of one split."""
    return [(corpus, d.doc_id, _lines(d.text)) for d in corpora.documents_in(corpus, split)]


def _humaneval_problems() -> list[dict]:
    """HumanEval problems (all in the test split) with task_id, prompt and canonical_solution."""
    with gzip.open(assets.path("humaneval") / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        problems = [json.loads(line) for line in fh if line.strip()]
    return [p for p in problems if corpora.split_of("humaneval", p["task_id"]) != "train"]


def _sample_positions(rng: random.Random, docs: list, n: int, ok: Callable[[list[str], int], bool]) -> list:
    """Up to n distinct (doc, line index) pairs with ok(lines, i), drawn uniformly over documents."""
    chosen: dict[tuple[str, int], tuple] = {}
    for _ in range(n * 50):
        if len(chosen) >= n:
            break
        doc = rng.choice(docs)
        i = rng.randrange(len(doc[2])) if doc[2] else 0
        if doc[2] and ok(doc[2], i) and (doc[1], i) not in chosen:
            chosen[(doc[1], i)] = (doc, i)
    return list(chosen.values())


def _distractors(rng: random.Random, pool: list[tuple[str, str]], doc_id: str, avoid: set[str], k: int) -> list[str]:
    """k distinct lines from `pool` [(doc_id, line)] of documents other than doc_id, none in `avoid`."""
    picked: list[str] = []
    while len(picked) < k:
        other_id, line = rng.choice(pool)
        if other_id != doc_id and line not in avoid and line not in picked:
            picked.append(line)
    return picked


def _with_choices(rng: random.Random, item: dict, correct: str, wrong: list[str]) -> dict:
    choices = [correct, *wrong]
    rng.shuffle(choices)
    return {**item, "choices": choices, "label": choices.index(correct)}


# ----------------------------------------------------------------------------------------------
# the four tasks: each builder maps (split, n, rng) -> items


def _cloze_ok(lines: list[str], i: int) -> bool:
    """A speech line ending in a word that already occurs in the passage (LAMBADA's targets are guessable)."""
    match = _WORD_AT_END.search(lines[i]) if i >= CLOZE_LINES - 1 and _is_speech(lines[i]) else None
    if match is None:
        return False
    before = " ".join([*lines[i - CLOZE_LINES + 1 : i], lines[i][: match.start()]]).lower()
    return re.search(rf"\b{re.escape(match[1].lower())}\b", before) is not None


def _cloze(split: str, n: int, rng: random.Random) -> list[dict]:
    items = []
    for corpus_index, corpus in enumerate(_VERSE_CORPORA):
        share = n // 2 + (n % 2 if corpus_index == 0 else 0)
        for (corpus_, doc_id, lines), i in _sample_positions(rng, _docs(corpus, split), share, _cloze_ok):
            match = _WORD_AT_END.search(lines[i])
            head = lines[i][: match.start()].rstrip()
            context = "\n".join([*lines[i - CLOZE_LINES + 1 : i], head])
            items.append({"corpus": corpus_, "doc_id": doc_id, "line": i, "context": context, "target": match[1]})
    rng.shuffle(items)
    return items


def _verse_pool(docs: list) -> list[tuple[str, str]]:
    return [(doc_id, line.strip()) for _, doc_id, lines in docs for line in lines
            if _is_speech(line) and len(line.strip()) >= MIN_LINE_CHARS]


def _nextline_ok(lines: list[str], i: int) -> bool:
    return i >= NEXTLINE_CONTEXT and _is_speech(lines[i]) and len(lines[i].strip()) >= MIN_LINE_CHARS


def _nextline(split: str, n: int, rng: random.Random) -> list[dict]:
    items = []
    for corpus_index, corpus in enumerate(_VERSE_CORPORA):
        docs = _docs(corpus, split)
        pool = _verse_pool(docs)
        share = n // 2 + (n % 2 if corpus_index == 0 else 0)
        for (_, doc_id, lines), i in _sample_positions(rng, docs, share, _nextline_ok):
            correct = lines[i].strip()
            wrong = _distractors(rng, pool, doc_id, {correct}, N_CHOICES - 1)
            context = "\n".join(lines[i - NEXTLINE_CONTEXT : i]) + "\n"
            items.append(_with_choices(rng, {"corpus": corpus, "doc_id": doc_id, "line": i, "context": context},
                                       correct, wrong))
    rng.shuffle(items)
    return items


def _cut(text: str, limit: int = PPL_CHARS) -> str:
    """At most `limit` characters, ending at a line end where there is one."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return head[: head.rfind("\n")] if "\n" in head else head


def _ppl_units(corpus: str, split: str) -> list[dict]:
    """Documents of one corpus as rolling-perplexity units; plays are cut into PPL_CHARS segments."""
    units = []
    for doc in corpora.documents_in(corpus, split):
        start = 0
        while start < len(doc.text):
            segment = _cut(doc.text[start:])
            text = segment.strip("\n")
            if len(text) >= PPL_CHARS // 4:
                units.append({"corpus": corpus, "doc_id": doc.doc_id, "offset": start, "text": text})
            if corpus != "shakespeare":
                break
            start += len(segment) + 1
    return units


def _ppl(split: str, n: int, rng: random.Random) -> list[dict]:
    per_corpus = [_ppl_units(corpus, split) for corpus in corpora.CORPORA]
    per_corpus = [rng.sample(units, min(len(units), n)) for units in per_corpus if units]
    rounds = itertools.zip_longest(*per_corpus)  # round robin: a small --limit covers every corpus
    interleaved = [unit for group in rounds for unit in group if unit is not None]
    return interleaved[:n]


def _humaneval_items(split: str, n: int, rng: random.Random) -> list[dict]:
    problems = _humaneval_problems() if split == "test" else []
    items = []
    for p in rng.sample(problems, min(n, len(problems))):
        wrong = rng.sample([q["canonical_solution"] for q in problems if q["task_id"] != p["task_id"]
                            and q["canonical_solution"] != p["canonical_solution"]], N_CHOICES - 1)
        item = {"corpus": "humaneval", "doc_id": p["task_id"], "line": 0, "context": p["prompt"]}
        items.append(_with_choices(rng, item, p["canonical_solution"], wrong))
    return items


def _code_ok(lines: list[str], i: int) -> bool:
    s = lines[i].strip()
    return i >= CODE_CONTEXT and len(s) >= MIN_CODE_CHARS and not s.startswith(("#", '"', "'"))


def _reindent(line: str, like: str) -> str:
    return like[: len(like) - len(like.lstrip())] + line.strip()


def _stdlib_items(split: str, n: int, rng: random.Random) -> list[dict]:
    docs = _docs("python-stdlib", split)
    pool = [(doc_id, line.strip()) for _, doc_id, lines in docs for j, line in enumerate(lines) if _code_ok(lines, j)]
    items = []
    for (_, doc_id, lines), i in _sample_positions(rng, docs, n, _code_ok):
        correct = lines[i]
        wrong = [_reindent(w, correct) for w in _distractors(rng, pool, doc_id, {correct.strip()}, N_CHOICES - 1)]
        context = "\n".join(lines[i - CODE_CONTEXT : i]) + "\n"
        items.append(_with_choices(rng, {"corpus": "python-stdlib", "doc_id": doc_id, "line": i, "context": context},
                                   correct, wrong))
    return items


def _code(split: str, n: int, rng: random.Random) -> list[dict]:
    humaneval = _humaneval_items(split, n // 2, rng)
    items = humaneval + _stdlib_items(split, n - len(humaneval), rng)
    rng.shuffle(items)
    return items


_BUILDERS: dict[str, Callable[[str, int, random.Random], list[dict]]] = {
    "book_cloze": _cloze, "book_nextline": _nextline, "book_ppl": _ppl, "book_code": _code,
}
_MC_METRICS = [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
               {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}]
_TASK_CONFIG = {
    "book_cloze": {
        # lm-eval scores doc_to_target as is for loglikelihood tasks: the space goes into the target
        "output_type": "loglikelihood", "doc_to_text": "{{context}}", "doc_to_target": "{{' ' + target}}",
        "target_delimiter": "",
        "metric_list": [{"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
                        {"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    },
    "book_nextline": {
        "output_type": "multiple_choice", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "label", "target_delimiter": "", "metric_list": _MC_METRICS,
    },
    "book_ppl": {
        "output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
        "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
    },
    "book_code": {
        "output_type": "multiple_choice", "doc_to_text": "{{context}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "label", "target_delimiter": "", "metric_list": _MC_METRICS,
    },
}


# ----------------------------------------------------------------------------------------------
# writing


def _key(n_items: int, n_fewshot: int, seed: int) -> str:
    digest = hashlib.sha256(json.dumps([RECIPE_VERSION, n_items, n_fewshot, seed]).encode())
    for corpus in corpora.CORPORA:
        digest.update(corpora.fingerprint(corpus).encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def _task_seed(seed: int, task: str, split: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{task}:{split}".encode()).digest()[:8], "big")


def _write_jsonl(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(item, ensure_ascii=False, sort_keys=True) + "\n" for item in items))


def _yaml(task: str, final_dir: Path, counts: dict[str, int], seed: int, key: str) -> str:
    import yaml

    config = {
        "task": task,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {split: str(final_dir / f"{task}.{split}.jsonl") for split in counts}},
        "test_split": "test",
        "fewshot_split": "validation",
        **_TASK_CONFIG[task],
        "metadata": {"version": RECIPE_VERSION, "n_test": counts["test"], "n_validation": counts["validation"],
                     "seed": seed, "key": key},
    }
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def _write_all(tmp: Path, final_dir: Path, n_items: int, n_fewshot: int, seed: int, key: str) -> dict:
    summary = {}
    for task, builder in _BUILDERS.items():
        counts = {}
        for split, n in (("test", n_items), ("validation", n_fewshot)):
            items = builder(split, n, random.Random(_task_seed(seed, task, split)))
            _write_jsonl(tmp / f"{task}.{split}.jsonl", items)
            counts[split] = len(items)
        (tmp / f"{task}.yaml").write_text(_yaml(task, final_dir, counts, seed, key))
        summary[task] = counts
    return summary


def is_built(out_dir: Path | None = None) -> bool:
    out_dir = Path(out_dir or default_dir())
    return (out_dir / KEY_FILE).exists() and all((out_dir / f"{t}.yaml").exists() for t in TASKS)


def _current_key(out_dir: Path) -> str | None:
    try:
        return json.loads((out_dir / KEY_FILE).read_text())["key"]
    except (OSError, ValueError, KeyError):
        return None


def build(out_dir: Path | str | None = None, n_items: int = N_ITEMS, n_fewshot: int = N_FEWSHOT,
          seed: int = SEED, force: bool = False) -> Path:
    """Write the four tasks (JSONL per split + YAML) into `out_dir`; returns it. Skipped when up to date."""
    out_dir = Path(out_dir or default_dir()).resolve()
    key = _key(n_items, n_fewshot, seed)
    if not force and _current_key(out_dir) == key and is_built(out_dir):
        return out_dir
    with file_lock(out_dir.parent / f".{out_dir.name}.lock"):
        if not force and _current_key(out_dir) == key and is_built(out_dir):
            return out_dir
        with atomic_folder(out_dir) as tmp:
            summary = _write_all(tmp, out_dir, n_items, n_fewshot, seed, key)
            meta = {"key": key, "recipe": RECIPE_VERSION, "seed": seed, "n_items": n_items,
                    "n_fewshot": n_fewshot, "counts": summary}
            (tmp / KEY_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out_dir


def read_items(task: str, split: str = "test", out_dir: Path | None = None) -> list[dict]:
    """The items of one built task and split."""
    path = Path(out_dir or default_dir()) / f"{task}.{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _dataset_cached(dataset_path: str) -> bool:
    """Whether `datasets` has a local copy of hub dataset `dataset_path` (its cache folder `org___name`)."""
    import datasets.config

    return any(Path(datasets.config.HF_DATASETS_CACHE).glob(dataset_path.replace("/", "___") + "*"))


def _hub_answers(dataset_path: str, timeout_s: float) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"https://huggingface.co/api/datasets/{dataset_path}", timeout=timeout_s):
            return True
    except OSError:
        return False


def standard_tasks_missing(tasks: tuple[str, ...] = STANDARD_TASKS, timeout_s: float = 3.0) -> dict[str, str]:
    """{task: why it cannot run here} for the lm-eval tasks whose dataset is neither cached nor downloadable.

    Offline (HF_DATASETS_OFFLINE=1 or HF_HUB_OFFLINE=1) only the `datasets` cache counts; online, one
    request per dataset with `timeout_s`. An empty dict means every task can run.
    """
    import os

    from lm_eval.tasks import TaskManager

    offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
    index, missing = TaskManager().task_index, {}
    for task in tasks:
        if task not in index:
            missing[task] = "not an lm-eval task"
            continue
        dataset_path = index[task].cfg.get("dataset_path", "")
        if _dataset_cached(dataset_path):
            continue
        if offline:
            missing[task] = f"dataset {dataset_path} is not cached and the hub is offline"
        elif not _hub_answers(dataset_path, timeout_s):
            missing[task] = f"dataset {dataset_path} is not cached and the hub did not answer"
    return missing


def resolve_suite(suite: str) -> tuple[tuple[str, ...], str]:
    """The task names to run for `suite` ("local" or "standard") on this machine, and a note why.

    "standard" is the paper's suite where every dataset is cached or the hub answers; otherwise it falls back
    to the local suite and the note names what was missing, so a run without the hub still produces the table.
    """
    if suite not in SUITES:
        raise ValueError(f"task suite {suite!r} unknown; choose from {list(SUITES)}")
    if suite == "local":
        return TASKS, "local suite (held-out splits of the embedded corpora)"
    missing = standard_tasks_missing()
    if not missing:
        return STANDARD_TASKS, "standard suite (lm-eval task names of the paper)"
    first = next(iter(missing.items()))
    return TASKS, (f"local suite: the standard suite cannot run here ({len(missing)} of {len(STANDARD_TASKS)} tasks "
                   f"missing, e.g. {first[0]}: {first[1]})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.tasks", description="Build the book's local lm-eval tasks.")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--out", type=Path, default=None, help=f"output folder (default {default_dir()})")
    parser.add_argument("--n-items", type=int, default=N_ITEMS)
    parser.add_argument("--n-fewshot", type=int, default=N_FEWSHOT)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    out = build(args.out, args.n_items, args.n_fewshot, args.seed, args.force)
    print(json.loads((out / KEY_FILE).read_text())["counts"])
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
