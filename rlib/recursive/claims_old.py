


def claims_table(results: list[dict[str, Any]], cfg: RecursiveConfig, wide_margin: float = 0.1) -> pd.DataFrame:
    """The chapter's claims (issue 4), each with the numbers measured here and whether it held.

    Quality is held-out NLL (nats/token) on the uptraining corpus's test split after equal uptraining; seeds are
    averaged where a variant has several, and the spread (max - min over seeds) is reported beside the margin.
    """
    df = flat(results)
    col = f"after nll[{cfg.train_corpus}]"
    home = df[(df["corpus"] == cfg.train_corpus) & (df["norm_init"] == "average")]
    rec = home[(home["kind"] == "recursive") & (home["n_loops"] == cfg.init_loops) & ~home["kd"]]
    by_init = rec.groupby("init")[col].agg(["mean", "min", "max", "count"])
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    pretrained = [i for i in by_init.index if i in PRETRAINED_INITS]
    if "random" in by_init.index and pretrained:
        rand = by_init.loc["random", "mean"]
        gaps = {i: rand - by_init.loc[i, "mean"] for i in pretrained}
        add(f"Every pretrained initialization beats Random by a wide margin (> {wide_margin} nats)",
            all(g > wide_margin for g in gaps.values()),
            "; ".join(f"{i}: {by_init.loc[i, 'mean']:.3f} ({gaps[i]:+.3f} vs random {rand:.3f})" for i in pretrained))
    else:
        add("Every pretrained initialization beats Random by a wide margin", None, "random or pretrained inits missing")

    if "stepwise" in by_init.index and len(pretrained) > 1:
        others = {i: by_init.loc[i, "mean"] for i in pretrained if i != "stepwise"}
        best_other = min(others, key=others.get)
        step = by_init.loc["stepwise"]
        spread = max(float(by_init.loc[i, "max"] - by_init.loc[i, "min"]) for i in ["stepwise", best_other])
        add("Stepwise reaches the lowest loss among the initializations (no LoRA)",
            bool(step["mean"] < others[best_other]),
            f"stepwise {step['mean']:.4f} (n={int(step['count'])}) vs best other {best_other} "
            f"{others[best_other]:.4f}; margin {others[best_other] - step['mean']:+.4f}, seed spread {spread:.4f}; "
            + ", ".join(f"{i} {v:.4f}" for i, v in sorted(others.items(), key=lambda kv: kv[1])))

    first = home[home["seed"] == cfg.seeds[0]]
    pick = lambda kind, b, init="stepwise": first[(first["kind"] == kind) & (first["n_loops"] == b) & ~first["kd"]  # noqa: E731
                                                  & ((first["init"] == init) if kind == "recursive" else True)]
    rec_main, trunc, scratch = (pick("recursive", cfg.init_loops), pick("truncated", cfg.init_loops),
                                pick("scratch", cfg.init_loops))
    if len(rec_main) and len(trunc) and len(scratch):
        r, t, s = (float(x[col].iloc[0]) for x in (rec_main, trunc, scratch))
        add(f"The recursive model (B={cfg.init_loops}) beats the same-size truncated and from-scratch models",
            r < t and r < s, f"recursive {r:.4f} vs truncated {t:.4f} vs scratch {s:.4f}")

    full = first[(first["kind"] == "full") & ~first["kd"]]
    chain = [(1, float(full[col].iloc[0]))] if len(full) else []
    for b in sorted(set(cfg.loops) | {cfg.init_loops}):
        sel = pick("recursive", b)
        if len(sel):
            chain.append((b, float(sel[col].iloc[0])))
    if len(chain) >= 3:
        monotone = all(a[1] < b[1] for a, b in zip(chain, chain[1:]))
        add("More loops (fewer unique parameters) cost quality monotonically", monotone,
            " < ".join(f"B={b}: {v:.4f}" for b, v in chain))

    kd = home[(home["kind"] == "recursive") & (home["init"] == "stepwise") & (home["n_loops"] == cfg.init_loops)]
    with_kd, without = kd[kd["kd"]][col], kd[~kd["kd"] & kd["seed"].isin(cfg.seeds)][col]
    if len(with_kd) and len(without):
        add("Distillation from the uptrained full model helps at equal tokens", bool(with_kd.mean() < without.mean()),
            f"with KD {with_kd.mean():.4f} (seeds {', '.join(f'{v:.4f}' for v in with_kd)}) vs without "
            f"{without.mean():.4f} (seeds {', '.join(f'{v:.4f}' for v in without)})")
    return pd.DataFrame(rows)
