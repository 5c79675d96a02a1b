"""The gate ablation of chapter 03 on its own (ours; issue 24 item 3): `python -m rlib.mor.gates --profile cpu-long`.

MoR-EC adds each recursion as x + g f(x) (g the router's score) while the Recursive baseline runs x <- f(x), so the
two differ in routing and in a gate. This runs only the chapter grid's runs that separate them (the main Nr's
isoFLOP Recursive and MoR-EC runs and `MoRConfig.gate_ablations`, every seed), in the chapter's own work folder, so a
later chapter run reuses them (cpu-long's runs live in cpu's folder), then prints the `gates` table and the ledger's
verdict of `mor.ours.gate_ablation`.
"""

from __future__ import annotations

from rlib.mor.config import MoRConfig, MoRVariant, variants

__all__ = ["gate_runs", "main"]

CHAPTER = "03_mixture_of_recursions"


def gate_runs(cfg: MoRConfig) -> list[MoRVariant]:
    """The runs of `variants(cfg)` the gate ablation compares, in grid order."""
    return [v for v in variants(cfg) if v.budget == "flops" and v.spec is not None
            and v.spec.n_recursions == cfg.n_recursions and v.spec.kv == "cache" and v.spec.sharing == "middle_cycle"
            and (v.tag in cfg.gate_ablations or (v.tag == "" and v.spec.routing in ("none", "expert")))]


def main(argv: list[str] | None = None) -> int:
    from rlib.experiments import work_dir
    from rlib.mor import experiments, tables
    from rlib.mor.study_cli import run_study

    def gates(cfg: MoRConfig, profile: str):
        results = experiments.run_grid(cfg, work_dir(profile, CHAPTER), gate_runs(cfg))
        return tables.gate_table(results, cfg.n_recursions)

    return run_study(argv, "python -m rlib.mor.gates", __doc__.splitlines()[0],
                     lambda profile: bool(MoRConfig.preset(profile).gate_ablations), gates, "gates",
                     "mor.ours.gate_ablation")


if __name__ == "__main__":
    raise SystemExit(main())
