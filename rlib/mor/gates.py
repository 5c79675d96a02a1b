"""The gate ablation of chapter 03 on its own (ours; issue 24 item 3): `python -m rlib.mor.gates --profile cpu-long`.

MoR-EC adds each recursion as x + g f(x) (g the router's score) while the Recursive baseline runs x <- f(x), so the
two differ in routing and in a gate. This runs only the chapter grid's runs that separate them (the main Nr's
isoFLOP Recursive and MoR-EC runs and `MoRConfig.gate_ablations`, every seed), in the chapter's own work folder, so a
later chapter run reuses them (cpu-long's runs live in cpu's folder), then prints the `gates` table and the ledger's
verdict of `mor.ours.gate_ablation`.
"""

from __future__ import annotations

import argparse

from rlib.config import ConfigError
from rlib.mor.config import MoRConfig, MoRVariant, variants

__all__ = ["gate_runs", "main"]

CHAPTER = "03_mixture_of_recursions"


def gate_runs(cfg: MoRConfig) -> list[MoRVariant]:
    """The runs of `variants(cfg)` the gate ablation compares, in grid order."""
    return [v for v in variants(cfg) if v.budget == "flops" and v.spec is not None
            and v.spec.n_recursions == cfg.n_recursions and v.spec.kv == "cache" and v.spec.sharing == "middle_cycle"
            and (v.tag in cfg.gate_ablations or (v.tag == "" and v.spec.routing in ("none", "expert")))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.mor.gates", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu-long",
                        help="the MoRConfig preset (smoke, cpu-long, gpu; cpu leaves the ablation to cpu-long)")
    args = parser.parse_args(argv)
    from rlib import threads
    from rlib.experiments import work_dir
    from rlib.mor import claims, experiments, tables

    threads.configure()
    try:
        cfg = MoRConfig.preset(args.profile)
    except ConfigError as err:
        parser.error(str(err))
    if not cfg.gate_ablations:
        parser.error(f"the {args.profile} preset has no gate_ablations to run (the cpu profile leaves them to "
                     "cpu-long: --profile cpu-long)")
    results = experiments.run_grid(cfg, work_dir(args.profile, CHAPTER), gate_runs(cfg))
    gates = tables.gate_table(results, cfg.n_recursions)
    print(gates.to_markdown(index=False))
    row = claims.judge({"gates": gates}, cfg, args.profile).finish().set_index("id").loc["mor.ours.gate_ablation"]
    print(f"\nmor.ours.gate_ablation: {row['verdict']}\n{row['measured']}\n{row['evidence'] or ''}".rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
