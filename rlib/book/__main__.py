"""Command line of the book runner: `python -m rlib.book {run,plan,params,report,promote,ledger,check,list,speed}`."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

from rlib.config import PROFILES, ConfigError


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rlib.book", description="Run and report the experiment book.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    profiles = ", ".join(f"{p.name} ({p.description})" for p in PROFILES.values())

    run = sub.add_parser("run", help="execute chapters with papermill into runs/<profile>/<chapter>/")
    run.add_argument("--profile", default="cpu", choices=list(PROFILES), help=profiles)
    run.add_argument("--only", nargs="+", metavar="CHAPTER", help="chapter ids or numbers, e.g. 00 03")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                     help="override a chapter parameter (repeatable); see `params`")
    run.add_argument("--keep-going", action="store_true", help="continue after a failed chapter")
    run.add_argument("--force", action="store_true", help="re-run chapters even if up to date")
    run.add_argument("--cell-timeout", type=float, metavar="SECONDS",
                     help="seconds any one cell may run (default: twice the profile's chapter budget, times the "
                          "machine's measured speed factor; see `speed`)")

    pln = sub.add_parser("plan", help="each chapter's expected time from the last run, and what is cached")
    pln.add_argument("--profile", default="cpu", choices=list(PROFILES))
    pln.add_argument("--only", nargs="+", metavar="CHAPTER")
    pln.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")

    prm = sub.add_parser("params", help="list each chapter's parameters, types, defaults and help")
    prm.add_argument("--only", nargs="+", metavar="CHAPTER")

    rep = sub.add_parser("report", help="(re)write runs/<profile>/index.html from existing outputs")
    rep.add_argument("--profile", default="cpu", choices=list(PROFILES))

    pro = sub.add_parser("promote", help="copy a profile's artifacts into figures/ with MANIFEST.json")
    pro.add_argument("--profile", default="cpu", choices=list(PROFILES))
    pro.add_argument("--only", nargs="+", metavar="CHAPTER")

    led = sub.add_parser("ledger", help="judge every chapter's claims again from tables already written (no re-run)")
    led.add_argument("--profile", default="cpu", choices=list(PROFILES), help="whose presets judge the tables")
    led.add_argument("--from", dest="source", metavar="FOLDER",
                     help="folder of chapter folders (default: figures/ for cpu, runs/<profile>/ otherwise)")
    led.add_argument("--only", nargs="+", metavar="CHAPTER")
    led.add_argument("--write", metavar="FILE.md", help="also write the book-wide ledger as Markdown here")

    sub.add_parser("check", help="static checks: manifest, parameters cells, no tracked .ipynb")
    sub.add_parser("list", help="chapters and their declared artifacts")
    sub.add_parser("speed", help="measure this machine's speed factor (what scales the cell timeouts)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("papermill").setLevel(logging.INFO)
    from rlib.book import manifest as manifest_mod
    from rlib.book import params as params_mod

    try:
        if args.cmd == "run":
            from rlib.book.runner import run_book

            return run_book(args.profile, args.only, args.param, args.keep_going, args.force, args.cell_timeout)
        if args.cmd == "plan":
            from rlib.book.estimate import estimate, format_estimate

            print(format_estimate(args.profile, estimate(args.profile, args.only, args.param)))
            return 0
        if args.cmd == "ledger":
            return ledger(args)
        if args.cmd == "speed":
            from rlib import threads
            from rlib.book.speed import REFERENCE_S, speed_factor

            info = threads.configure()
            factor, seconds = speed_factor()
            print(f"seconds {seconds:.4f} (reference {REFERENCE_S}) -> speed factor {factor:.2f} "
                  f"with {info['torch']} torch thread(s) of {info['available_cores']} available core(s)")
            return 0
        manifest = manifest_mod.load()
        if args.cmd == "params":
            for ch in manifest.select(args.only):
                print(f"{ch.id}:")
                for p in params_mod.declared(ch.source).values():
                    print(f"  {p.name:22s} {p.type_text:12s} = {p.default!r:14}  # {p.help}")
        elif args.cmd == "list":
            for ch in manifest.chapters:
                print(f"{ch.id:28s} {ch.title}\n  tables: {', '.join(ch.tables)}\n  figures: {', '.join(ch.figures)}")
        elif args.cmd == "report":
            from rlib.book.report import write_report

            print(write_report(args.profile, manifest))
        elif args.cmd == "promote":
            from rlib.book.promote import promote

            copied = promote(args.profile, args.only)
            print(f"promoted {len(copied)} files into figures/ (see figures/MANIFEST.json)")
        elif args.cmd == "check":
            return check(manifest)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: completed chapters and earlier outputs are kept; run again to resume", file=sys.stderr)
        return 130
    return 0


def ledger(args) -> int:
    """`ledger`: re-judge the claims from written tables; print the verdict counts (and write Markdown)."""
    from pathlib import Path

    from rlib.book import ledger_page
    from rlib.book.layout import profile_dir, promoted_dir
    from rlib.book.rejudge import rejudge, with_extensions
    from rlib.fsutil import atomic_path

    source = args.source or (promoted_dir(args.profile) if args.profile == "cpu" else profile_dir(args.profile))
    table = rejudge(source, args.profile, args.only)
    if args.source is None:  # the promoted ledger: with the rows only an extending profile (cpu-long) measured
        table = with_extensions(table, args.profile, args.only)
    if table.empty:
        raise ConfigError(f"no chapter tables under {source}; run the book or pass --from FOLDER")
    print(ledger_page.summary(table).to_string(index=False))
    if args.write:
        with atomic_path(Path(args.write)) as tmp:
            tmp.write_text(ledger_page.ledger_markdown(
                table, f"Claims ledger: the tables in `{_shown(source)}` judged again by the code at git "
                       f"`{_git_sha()}` with the `{args.profile}` presets (`python -m rlib.book ledger`)"))
        print(f"wrote {args.write}")
    return 0


def _shown(folder) -> str:
    """`folder` relative to the repository when inside it (what a reader of the Markdown can follow)."""
    from pathlib import Path

    from rlib import paths

    folder = Path(folder).resolve()
    return str(folder.relative_to(paths.ROOT)) if folder.is_relative_to(paths.ROOT) else str(folder)


def _git_sha() -> str:
    from rlib import paths

    done = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=paths.ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def check(manifest) -> int:
    from rlib import paths
    from rlib.book import params as params_mod

    for ch in manifest.chapters:
        params_mod.declared(ch.source)  # raises on a bad parameters cell
    tracked = subprocess.run(["git", "ls-files", "notebooks/*.ipynb"], cwd=paths.ROOT,
                             capture_output=True, text=True).stdout.split()
    if tracked:
        print(f"error: tracked notebooks (the percent .py is the source): {tracked}", file=sys.stderr)
        return 2
    print(f"ok: {len(manifest.chapters)} chapter(s), parameters cells valid, no tracked .ipynb")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
