


def training_claims(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    recipes = {r["recipe"] for r in results}
    table = mid_last_table(results, middle, last).set_index("recipe")
    if "ld_ee" in recipes:
        row = table.loc["ld_ee"]
        base = table.loc["baseline"]
        held = bool(row["middle_vs_baseline"] >= 3 and row["last_vs_baseline"] <= 1.05)
        add("LayerSkip (LD+EE) makes middle-layer exits far better than the baseline's (>= 3x lower perplexity) at "
            "a small last-layer cost (<= 5 %)", held,
            f"middle exit (layer {middle}) perplexity {base['ppl_middle']:.1f} -> {row['ppl_middle']:.1f} "
            f"({row['middle_vs_baseline']:.1f}x lower); last exit {base['ppl_last']:.2f} -> {row['ppl_last']:.2f} "
            f"({100 * (row['last_vs_baseline'] - 1):+.1f} %)")
    else:
        add("LayerSkip (LD+EE) makes middle-layer exits far better than the baseline's", None, "no ld_ee run")
    if "ld_ee" in recipes:
        ls, base = table.loc["ld_ee", "agree_middle"], table.loc["baseline", "agree_middle"]
        add("On held-out text the middle exit's greedy token matches the last exit's more often with LayerSkip (a "
            "teacher-forced acceptance rate, free of generation loops)", bool(ls > base),
            f"middle exit agrees with the last on {100 * base:.1f} % of positions (baseline) vs {100 * ls:.1f} % "
            "(LD+EE)")
    if {"ee", "ld"} <= recipes:
        ee, ld = table.loc["ee", "middle_vs_baseline"], table.loc["ld", "middle_vs_baseline"]
        add("The early-exit loss, not layer dropout, drives middle-exit quality (EE's middle-exit gain over the "
            "baseline exceeds LD's)", bool(ee > ld), f"middle-exit perplexity gain over the baseline: EE {ee:.2f}x, "
            f"LD {ld:.2f}x")
    if {"ld", "ld_const"} <= recipes:
        exp, const = _final_loss(results, "ld"), _final_loss(results, "ld_const")
        spread = max(pd.Series(exp).std() if len(exp) > 1 else 0.0, pd.Series(const).std() if len(const) > 1 else 0.0)
        mean_exp, mean_const = sum(exp) / len(exp), sum(const) / len(const)
        gap = mean_const - mean_exp
        add("Exponential per-layer dropout trains to a lower loss than constant dropout of equal mean (by more than "
            "the seed s.d.)", bool(gap > spread), f"final training loss (last 10 % of steps): Exp {mean_exp:.4f}, "
            f"Const {mean_const:.4f}, gap {gap:+.4f}, seed s.d. {spread:.4f} ({len(exp)} seeds)")
    if {"ee", "ee_all"} <= recipes:
        seconds = {r: pd.Series([x["step_seconds"] for x in results if x["recipe"] == r]).mean()
                   for r in ("ee", "ee_all")}
        add("Early-exit loss on every layer at every step hurts the last layer and costs time (vs the rotational "
            "curriculum)", bool(table.loc["ee_all", "ppl_last"] > table.loc["ee", "ppl_last"]
                                and seconds["ee_all"] > seconds["ee"]),
            f"last-exit perplexity: all {table.loc['ee_all', 'ppl_last']:.2f} vs rotational "
            f"{table.loc['ee', 'ppl_last']:.2f}; seconds per step {seconds['ee_all']:.3f} vs {seconds['ee']:.3f} "
            "(mean over seeds)")
    curves = probe_curves(results)
    if len(curves) and {"baseline", "ee"} <= recipes:
        mid = curves[curves["exit_layer"] == middle].groupby(["recipe", "step"])["nll"].mean()
        rise = {r: float(mid.loc[r].iloc[-1] - mid.loc[r].min()) for r in ("baseline", "ee")}
        add("The baseline's middle-exit NLL rises (or stalls) during training while EE's keeps falling (Fig. 11)",
            bool(rise["baseline"] > 0.05 and rise["ee"] <= 0.05),
            f"final minus best middle-exit NLL: baseline {rise['baseline']:+.3f}, EE {rise['ee']:+.3f} nats")
    return pd.DataFrame(rows)


def decoding_claims(table: pd.DataFrame, layerskip: str = "ld_ee", goal: float = 1.5, scope: str = "",
                    min_distinct: float = 0.5) -> pd.DataFrame:
    """Claims from a `rlib.layerskip.decode_study` table (rows per recipe and decoder); `scope` prefixes each claim
    (which models they are about). The speedup goal counts only on greedy output with distinct-2 >= `min_distinct`:
    a model stuck in a repetition loop is easy for any exit to draft, so its speedup says nothing about LayerSkip
    (a condition added after the first cpu run showed such loops; it can only turn a claim from held to not held)."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": f"{scope}: {claim}" if scope else claim,
                     "held": {True: "held", False: "not held", None: "not measured"}[held], "evidence": evidence})

    exact = table[table["method"].isin(["self_speculative", "hf_early_exit", "hf_greedy"])]
    add("Self-speculative output equals greedy output token for token (every E, d and cache mode tried)",
        bool(exact["identical_to_greedy"].all()),
        f"{int(exact['identical_to_greedy'].sum())} of {len(exact)} decoder settings identical on every prompt")
    vocab = vocab_rows(table)
    paper = table[~vocab]  # the paper's drafting: the whole shared head
    spec = paper[(paper["method"] == "self_speculative") & (paper["reuse"] == "kvq")]
    ours = spec[spec["recipe"] == layerskip]
    by_exit = ours.groupby("exit_layer")["acceptance"].mean()
    add("Acceptance rises with the exit layer E (LayerSkip model, mean over d)", bool(by_exit.is_monotonic_increasing),
        "; ".join(f"E={e}: {a:.2f}" for e, a in by_exit.items()))
    best = spec.groupby("recipe")["speedup"].max()
    loops = table[table["method"] == "autoregressive"].set_index("recipe")["distinct_2"]
    if "baseline" in best.index:
        add("The baseline model gets little or no speedup from self-speculation (best <= 1.1x, and below "
            "LayerSkip's best)", bool(best["baseline"] <= 1.1 and best["baseline"] < best[layerskip]),
            f"best speedup over (E, d): baseline {best['baseline']:.2f}x, LayerSkip {best[layerskip]:.2f}x; greedy "
            f"output distinct-2 (1 = no repeated bigram): baseline {loops.get('baseline', float('nan')):.2f}, "
            f"LayerSkip {loops.get(layerskip, float('nan')):.2f} (a looping output is easy for any exit to draft)")
    modes = paper[(paper["method"] == "self_speculative") & (paper["recipe"] == layerskip)]
    wide = modes.pivot_table(index=["exit_layer", "n_draft"], columns="reuse", values="ms_per_token")
    others = [c for c in wide.columns if c != "kvq"]
    if others:
        wins = {c: int((wide["kvq"] < wide[c]).sum()) for c in others}
        add("Cache reuse lowers time per token (kvq faster than each other mode at most (E, d))",
            all(w > len(wide) / 2 for w in wins.values()),
            "; ".join(f"kvq faster than {c} at {w} of {len(wide)} settings, mean ms/token {wide['kvq'].mean():.2f} "
                      f"vs {wide[c].mean():.2f}" for c, w in wins.items()))
    top = ours.loc[ours["speedup"].idxmax()]
    fluent = loops.get(layerskip, float("nan"))
    add(f"Self-speculation vs autoregressive on the same LayerSkip model, batch 1 (goal >= {goal}x at the best E, "
        f"on greedy output that is not a loop: distinct-2 >= {min_distinct})",
        bool(top["speedup"] >= goal and fluent >= min_distinct), f"best {top['speedup']:.2f}x at "
        f"E={int(top['exit_layer'])}, d={int(top['n_draft'])} (acceptance {top['acceptance']:.2f}, layer-count "
        f"model {top['predicted_speedup']:.2f}x); greedy output distinct-2 {fluent:.2f}")
    narrow = table[vocab & (table["method"] == "self_speculative") & (table["recipe"] == layerskip)]
    if len(narrow):
        best_narrow = narrow.loc[narrow["speedup"].idxmax()]
        add(f"Beyond the paper: drafting over the task vocabulary only (the whole head verifies) reaches >= {goal}x "
            f"at the best (E, d), output still exact and not a loop", bool(best_narrow["speedup"] >= goal
                                                                          and fluent >= min_distinct
                                                                          and narrow["identical_to_greedy"].all()),
            f"best {best_narrow['speedup']:.2f}x at E={int(best_narrow['exit_layer'])}, "
            f"d={int(best_narrow['n_draft'])} (acceptance {best_narrow['acceptance']:.2f}) vs {top['speedup']:.2f}x "
            f"drafting with the whole head; identical to greedy at {int(narrow['identical_to_greedy'].sum())} of "
            f"{len(narrow)} settings")
    peer = table[(table["method"] == "hf_early_exit") & (table["recipe"] == layerskip)].set_index(
        ["exit_layer", "n_draft"])["ms_per_token"]
    mine = ours.set_index(["exit_layer", "n_draft"])["ms_per_token"].reindex(peer.index)
    if len(peer):
        add("Ours is faster than transformers' assistant_early_exit at the same (E, d)", bool((mine < peer).all()),
            f"mean ms/token ours {mine.mean():.2f} vs transformers {peer.mean():.2f}; faster at "
            f"{int((mine < peer).sum())} of {len(peer)} settings")
    return pd.DataFrame(rows)


def matmul_claims(ablation: pd.DataFrame, scope: str = "") -> pd.DataFrame:
    """One claim from `decode_study.parse_matmul_ablation`'s table: with `fast_decoding` on, the autoregressive
    baseline is faster and every self-speculative output is still the greedy output; the evidence gives both halves'
    baseline ms/token and exact match and each self-speculation row's speedup over its own half's baseline."""
    half = {fast: ablation[ablation["fast_matmul"] == fast] for fast in (False, True)}
    base = {fast: frame[frame["method"] == "autoregressive"].iloc[0] for fast, frame in half.items()}
    spec = ablation[ablation["method"] == "self_speculative"]
    fast_speedup = half[True].set_index("label")["speedup"]
    speedups = "; ".join(f"{row.label}: {row.speedup:.2f}x off, {fast_speedup[row.label]:.2f}x on"
                         for row in half[False][half[False]["method"] == "self_speculative"].itertuples())
    score = f", exact match {base[False]['score']:.2f} vs {base[True]['score']:.2f}" if "score" in ablation else ""
    held = bool(base[True]["ms_per_token"] < base[False]["ms_per_token"] and spec["identical_to_greedy"].all())
    claim = ("Beyond the paper: few-token products (fast_decoding) make the autoregressive baseline faster, and every "
             "self-speculative output stays the greedy output")
    return pd.DataFrame([{"claim": f"{scope}: {claim}" if scope else claim, "held": "held" if held else "not held",
                          "evidence": f"baseline {base[False]['ms_per_token']:.1f} ms/token off vs "
                                      f"{base[True]['ms_per_token']:.1f} on{score}; speedup over each half's own "
                                      f"baseline: {speedups}; identical to greedy at "
                                      f"{int(spec['identical_to_greedy'].sum())} of {len(spec)} settings"}])


def _final_loss(results: list[dict[str, Any]], recipe: str, tail: float = 0.1) -> list[float]:
    """Per seed: the mean training loss over the last `tail` of the run (one step's loss is noisy)."""
    out = []
    for r in results:
        if r["recipe"] == recipe:
            losses = r["train_curve"]["loss"]
            out.append(sum(losses[-max(1, int(tail * len(losses))):]) / max(1, int(tail * len(losses))))
    return out


def adapt_claims(results: list[dict[str, Any]], corpora: dict[str, str], middle: int, last: int,
                 probe: pd.DataFrame | None = None, layerskip: str = "ld_ee") -> pd.DataFrame:
    """corpora: {study: the corpus its claims read (its own training corpus)}."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    studies = _studies(results)
    exits = exit_long(results) if studies else None
    tasks = task_long(results) if studies else None
    for study in studies:
        recipes = set(exits[exits["study"] == study]["recipe"])
        corpus = corpora[study]
        if not {layerskip, "baseline"} <= recipes:
            add(f"{study}: LayerSkip vs plain training on the same tokens", None,
                f"needs {layerskip} and baseline runs")
            continue
        ppl = {(r, where): _ppl(exits, study, r, corpus, layer)
               for r in (SOURCE, "baseline", layerskip) for where, layer in (("middle", middle), ("last", last))}
        vs_source = ppl[SOURCE, "middle"] / ppl[layerskip, "middle"]
        vs_plain = ppl["baseline", "middle"] / ppl[layerskip, "middle"]
        add(f"{study}: LayerSkip makes the middle exit (layer {middle}) far better than the pretrained model's and "
            f"than plain training on the same tokens (>= 3x lower perplexity on {corpus})",
            bool(vs_source >= 3 and vs_plain >= 3),
            f"middle-exit perplexity: pretrained {ppl[SOURCE, 'middle']:.3g}, plain {ppl['baseline', 'middle']:.3g}, "
            f"LayerSkip {ppl[layerskip, 'middle']:.3g} ({vs_source:.3g}x and {vs_plain:.3g}x lower)")
        cost = ppl[layerskip, "last"] / ppl["baseline", "last"] - 1
        add(f"{study}: at a small last-exit cost (perplexity within 5 % of plain training on the same tokens)",
            bool(cost <= 0.05),
            f"last-exit perplexity on {corpus}: plain {ppl['baseline', 'last']:.2f}, LayerSkip "
            f"{ppl[layerskip, 'last']:.2f} ({100 * cost:+.1f} %); the pretrained model {ppl[SOURCE, 'last']:.2f}")
        part = tasks[(tasks["study"] == study) & (tasks["exit_layer"] == middle)].set_index(["recipe", "task"])
        better = [t for t in dict.fromkeys(part.index.get_level_values("task"))
                  if part.loc[(layerskip, t), "value"] > part.loc[("baseline", t), "value"]]
        n_tasks = len(set(part.index.get_level_values("task")))
        add(f"{study}: the middle exit's task accuracy is higher with LayerSkip than with plain training on every "
            "local task", bool(n_tasks and len(better) == n_tasks),
            "; ".join(f"{t}: plain {100 * part.loc[('baseline', t), 'value']:.0f} %, LayerSkip "
                      f"{100 * part.loc[(layerskip, t), 'value']:.0f} %"
                      for t in dict.fromkeys(part.index.get_level_values("task"))))
    if probe is not None and len(probe) > 1:
        base = probe.iloc[0]
        lower = [r for r in probe.iloc[1:].itertuples() if r.mean_first < base["mean_first"]
                 and r.mean_stable < base["mean_stable"]]
        add("Fig. 2: LayerSkip training lowers the mean number of layers a generated token needs (both readings)",
            len(lower) == len(probe) - 1,
            "; ".join(f"{r.model}: first {r.mean_first:.1f}, stable {r.mean_stable:.1f} of {last}"
                      for r in probe.itertuples()))
    return pd.DataFrame(rows)


def _ppl(exits: pd.DataFrame, study: str, recipe: str, corpus: str, layer: int) -> float:
    part = exits[(exits["study"] == study) & (exits["recipe"] == recipe) & (exits["corpus"] == corpus)
                 & (exits["exit_layer"] == layer)]
    return float(part["ppl"].iloc[0])


def parse_claims(results: list[dict[str, Any]], middle: int, last: int, layerskip: str = "ld_ee") -> pd.DataFrame:
    """The exit-quality claims; the decoding claims come from `rlib.layerskip.tables.decoding_claims`."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": f"parsing: {claim}", "held": {True: "held", False: "not held", None: "not measured"}[
            held], "evidence": evidence})

    exits = parse_exits(results)
    recipes = set(exits["recipe"])
    if {layerskip, "baseline"} <= recipes:
        em = {(r, w): _at(exits, r, layer) for r in ("baseline", layerskip)
              for w, layer in (("middle", middle), ("last", last))}
        add(f"LayerSkip fine-tuning makes the middle exit (layer {middle}) far better than plain fine-tuning's "
            "(exact match >= 0.2 higher; Fig. 10b: 0 vs 77 %)",
            em[layerskip, "middle"] - em["baseline", "middle"] >= 0.2,
            f"middle-exit EM: plain {em['baseline', 'middle']:.3f}, LayerSkip {em[layerskip, 'middle']:.3f}")
        add("at a small last-exit cost (EM within 0.05 of plain fine-tuning's; the paper: 3 %)",
            em[layerskip, "last"] >= em["baseline", "last"] - 0.05,
            f"last-exit EM: plain {em['baseline', 'last']:.3f}, LayerSkip {em[layerskip, 'last']:.3f}")
    else:
        add("LayerSkip vs plain fine-tuning", None, f"needs {layerskip} and baseline runs")
    return pd.DataFrame(rows)


def _at(exits: pd.DataFrame, recipe: str, layer: int) -> float:
    return float(exits[(exits["recipe"] == recipe) & (exits["exit_layer"] == layer)]["em"].iloc[0])


def cost_claims(predicted: pd.DataFrame, costs: pd.DataFrame, prompts: int, goal: float = 1.5,
                tolerance: float = 0.15, scope: str = "") -> pd.DataFrame:
    """The two claims of the module docstring from `decode_costs.predict`'s output for one model and its cost table;
    `prompts` generations made the table's rows."""
    rows = []

    def add(claim: str, held: bool, evidence: str) -> None:
        rows.append({"claim": f"{scope}: {claim}" if scope else claim, "held": "held" if held else "not held",
                     "evidence": evidence})

    spec = predicted[predicted["method"] == "self_speculative"]
    ratio = spec["measured_over_cost"]
    count = spec["speedup"] / spec["predicted_speedup"]
    inside = int(((ratio - 1).abs() <= tolerance).sum())
    add(f"Beyond the paper: a cost model of measured component times predicts every self-speculative speedup within "
        f"{tolerance:.0%}", inside == len(spec),
        f"measured / predicted {ratio.min():.2f} to {ratio.max():.2f}, within {tolerance:.0%} at {inside} of "
        f"{len(spec)} settings (the layer-count model, without the head: {count.min():.2f} to {count.max():.2f}); "
        f"the head costs {head_in_layers(costs):.1f} layers on one token")
    if not (~vocab_rows(spec) & (spec["reuse"] == "kvq")).any():
        return pd.DataFrame(rows)
    best, tokens = best_whole_head(predicted)
    need = {vocab: required_acceptance(costs, int(best["exit_layer"]), int(best["n_draft"]), goal, tokens, prompts,
                                       vocab=vocab) for vocab in (False, True)}
    measured = float(best["acceptance"])
    ceiling = speedup_at(costs, 1.0, int(best["exit_layer"]), int(best["n_draft"]), tokens, prompts)
    add(f"Beyond the paper: the whole head's cost is what keeps the paper's drafting from {goal}x here (at its best "
        f"E and d the acceptance is below what the whole head needs, and at or above what a task-vocabulary head "
        f"needs)", need[True] <= measured < need[False],
        f"E={int(best['exit_layer'])}, d={int(best['n_draft'])}: measured acceptance {measured:.2f} "
        f"({best['speedup']:.2f}x); "
        f"the cost model needs {_fmt(need[False])} drafting with the whole head, {_fmt(need[True])} with the task "
        f"vocabulary's; at acceptance 1 it gives {ceiling:.2f}x with the whole head")
    return pd.DataFrame(rows)


def _fmt(acceptance: float) -> str:
    return "out of reach (> 1)" if acceptance > 1 else f"{acceptance:.2f}"
