


def claims_table(results: list[dict[str, Any]], step0: pd.DataFrame, measured: pd.DataFrame,
                 cfg: RelaxedConfig) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    source_ppl = float(step0.loc[step0["init"] == "source", "ppl"].iloc[0])
    parts, monotone, exact = [], True, True
    for init in cfg.inits:
        curve = step0[(step0["init"] == init) & (step0["norms"] != True)].sort_values("rank")  # noqa: E712
        values = curve["ppl"].tolist()
        monotone &= all(a > b for a, b in zip(values, values[1:]))
        with_norms = float(step0[(step0["init"] == init) & (step0["norms"] == True)]["ppl"].iloc[0])  # noqa: E712
        exact &= abs(with_norms / source_ppl - 1) < 1e-2
        parts.append(f"{init}: " + " > ".join(f"{v:.4g}" for v in values)
                     + f"; full rank + norm deltas {with_norms:.4g}")
    add("SVD-LoRA at step 0 lowers held-out perplexity monotonically with rank; full rank equals the source",
        monotone and exact, "; ".join(parts) + f"; source {source_ppl:.4g} (full rank with the paper's tied norms "
        "stays above it)")

    df = flat(results)
    home = df[(df["phase"] == "uptrain") & ~df["kd"] & (df["steps_factor"] == 1) & (df["prefix"] == 0)]
    col = f"after nll[{cfg.train_corpus}]"
    nll = {(r.init, r.rank, r.lora_init): df.loc[r.Index, col] for r in home.itertuples()}
    top = max(cfg.ranks)
    improves = all(nll[(i, r, "svd")] < nll[(i, 0, "svd")] for (i, r, li) in nll if r and li == "svd")
    more = all(nll[(i, top, "svd")] <= nll[(i, min(cfg.ranks), "svd")] for i in cfg.rank_inits)
    svd_wins = all(nll[(i, top, "svd")] < nll[(i, top, "zero")] for i in cfg.zero_inits if (i, top, "zero") in nll)
    add("Relaxation improves quality, more with higher rank; SVD beats zero init for Average and Lower",
        improves and more and svd_wins,
        "; ".join(f"{i}: r0 {nll[(i, 0, 'svd')]:.3f}, "
                  + ", ".join(f"r{r} {nll[(i, r, 'svd')]:.3f}" for r in cfg.ranks if (i, r, "svd") in nll)
                  + (f", zero r{top} {nll[(i, top, 'zero')]:.3f}" if (i, top, "zero") in nll else "")
                  for i in cfg.inits))
    if {"stepwise", "average"} <= set(cfg.inits):
        plain = nll[("stepwise", 0, "svd")] < nll[("average", 0, "svd")]
        lora = nll[("average", top, "svd")] < nll[("stepwise", top, "svd")]
        add("With LoRA the best initialization moves from Stepwise to Average", plain and lora,
            f"r=0: stepwise {nll[('stepwise', 0, 'svd')]:.3f} vs average {nll[('average', 0, 'svd')]:.3f}; "
            f"r={top}: stepwise {nll[('stepwise', top, 'svd')]:.3f} vs average {nll[('average', top, 'svd')]:.3f}")

    exits = exit_table(results, cfg)
    last = f"nll loop {cfg.n_loops}"
    verdicts, evidence = [], []
    for model, group in exits[exits["phase"] == "post"].groupby("model", sort=False):
        by = group.set_index("exit")
        for schedule in ("aggressive", "aggressive_kd"):
            if "none" not in by.index or schedule not in by.index:
                continue
            keeps = by.loc[schedule, last] <= by.loc["none", last] + 0.05
            lifts = by.loc[schedule, "nll loop 1"] < by.loc["none", "nll loop 1"] - 0.05
            verdicts.append(keeps and lifts)
            evidence.append(f"{model}, {schedule} vs none: loop 1 {by.loc['none', 'nll loop 1']:.3f} -> "
                            f"{by.loc[schedule, 'nll loop 1']:.3f}, final {by.loc['none', last]:.3f} -> "
                            f"{by.loc[schedule, last]:.3f}")
    add("The aggressive early-exit schedule (with or without self-distillation) keeps final-loop quality (within "
        "0.05 nats) while lifting first-loop quality (by > 0.05 nats), against post-training without exit losses",
        all(verdicts) if verdicts else None, "; ".join(evidence) or "no exit runs")

    if len(measured):
        best = lambda frame: float(frame["decode_tokens_per_s"].max()) if len(frame) else float("nan")  # noqa: E731
        vanilla = best(measured[measured["model"].str.startswith("vanilla")])
        rec = measured[measured["model"] == "recursive"]
        with_exit, without = best(rec[rec["exit_threshold"].notna()]), best(rec[rec["exit_threshold"].isna()])
        add("Measured throughput: continuous depth-wise batching with early exit > without > vanilla",
            with_exit > without > vanilla, f"decode tokens/s (prefill excluded): recursive CDB with exit (best "
            f"threshold) {with_exit:.1f}, without {without:.1f}, vanilla (best of static/CSB) {vanilla:.1f}")
    return pd.DataFrame(rows)
