


def claims_table(exact: pd.DataFrame, traffic: pd.DataFrame, tasks: pd.DataFrame, lm: pd.DataFrame,
                 latency: pd.DataFrame | None = None) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    fp32 = exact[exact["dtype"] == "float32"]
    fp64 = exact[exact["dtype"] == "float64"]
    add("Tiled equals the naive loop: max abs diff <= 1e-5 in fp32, gradients too",
        bool((fp32["max_abs_dz"] <= 1e-5).all() and (fp32["grad_rel_sq_err"] <= 1e-10).all()),
        f"fp32 max |dz| {fp32['max_abs_dz'].max():.2e}, worst gradient ||dg||^2/||g||^2 "
        f"{fp32['grad_rel_sq_err'].max():.1e}; fp64 max |dz| {fp64['max_abs_dz'].max():.1e} "
        f"(tiles: {', '.join(sorted(set(exact['tiles'])))}; N = {sorted(set(exact['n']))})")
    last = traffic.iloc[-1]
    add("Tile traffic grows as N log N while naive grows as N^2 (counted)",
        bool(abs(last["naive_slope"] - 2) < 0.1 and last["tiled_slope"] < 1.25),
        f"log-log slope between N = {int(traffic['n'].iloc[-2])} and {int(last['n'])}: naive "
        f"{last['naive_slope']:.2f}, tiled {last['tiled_slope']:.2f}; naive/tiled at N = {int(last['n'])}: "
        f"{last['naive_over_tiled']:.0f}x")
    recall_copy = tasks[tasks["task"].isin(["in_context_recall", "noisy_recall", "fuzzy_recall", "selective_copying",
                                            "copy"])]
    if len(recall_copy):
        wide = recall_copy.pivot(index="task", columns="block", values="seq_acc")
        margin = wide["recurrent"] - wide["transformer"]
        add("One RT layer clearly beats one Transformer layer on recall and copy tasks (sequence accuracy, by >= 0.1 "
            "on every task)", bool((margin >= 0.1).all()),
            "; ".join(f"{t}: RT {wide.loc[t, 'recurrent']:.2f} vs T {wide.loc[t, 'transformer']:.2f}"
                      for t in wide.index))
    else:
        add("One RT layer clearly beats one Transformer layer on recall and copy tasks", None, "no such task run")
    if len(lm):
        idx = lm.set_index(["block", "depth"])
        rt, tf = idx.loc[("recurrent", "shallow")], idx.loc[("transformer", "deep")]
        spread = max(float(rt["test_nll_sd"]) if rt["seeds"] > 1 else 0.0,
                     float(tf["test_nll_sd"]) if tf["seeds"] > 1 else 0.0)
        add("At fixed parameters, the shallower-wider RT is no worse than the deeper Transformer (direction; within "
            "one seed s.d.)", bool(rt["test_nll"] <= tf["test_nll"] + spread),
            f"RT L={int(rt['n_layers'])} D={int(rt['d_model'])} ({rt['params_m']:.2f} M): {rt['test_nll']:.4f}; "
            f"Transformer L={int(tf['n_layers'])} D={int(tf['d_model'])} ({tf['params_m']:.2f} M): "
            f"{tf['test_nll']:.4f}; seed s.d. {spread:.4f} ({int(rt['seeds'])} seeds); KV floats per token "
            f"{int(rt['kv_floats_per_token'])} vs {int(tf['kv_floats_per_token'])}")
    if latency is not None and len(latency):
        biggest = latency["n"].max()
        tiled = latency[(latency["n"] == biggest) & (latency["mode"] == "tiled-reference")]
        if len(tiled):
            add(f"CPU: tiled PyTorch vs naive loop at N = {biggest} (goal >= 5x)",
                bool(tiled["speedup_vs_naive"].iloc[0] >= 5), f"{tiled['speedup_vs_naive'].iloc[0]:.2f}x measured in "
                f"one run ({tiled['threads'].iloc[0]} threads)")
    return pd.DataFrame(rows)
