"""Chapter 03's claims ledger: Mixture-of-Recursions (paper 001) as the paper states it, judged from its tables.

Sections of the paper covered: Sec. 2.2.2 / Table 2 (KV memory), Sec. 3.1 / Table 3 (main results), Sec. 3.2 / Fig. 3 /
App. C / Table 7 (isoFLOP), Sec. 3.3 / Fig. 4a / App. D (throughput), Sec. 4.1 / Fig. 4b / App. E / Tables 8-9
(parameter sharing, up-training), Sec. 4.2 / Table 4 / App. F / Tables 10-11 (routers), Sec. 4.3 / App. G / Table 12 /
Table 13 / Figs. 7-8 (KV sharing), Sec. 5 / Fig. 5 / App. H / Table 14 (analysis). The claims come from the researched
catalogue of the paper's findings; the book's own tests (`ours=True`) stand beside the paper's.

    ledger = judge(run.tables, cfg, profile)      # or judge(load_tables("figures/03_mixture_of_recursions"), ...)
    run.ledger(ledger)

Every claim is judged from the tables alone (name -> DataFrame, as the notebook writes them). A claim whose table or
rows are missing is recorded as not measured with what would measure it; every "not held" carries a diagnosis whose
evidence is computed from the same tables.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from rlib import looping
from rlib.book.claims import ClaimSpec, Ledger
from rlib.mor.config import SHORT, MoRConfig
from rlib.mor.spec import MoRSpec
from rlib.mor.tables import PAPER_FINAL_MAXVIO, PAPER_RANDOM_MAXVIO, load_imbalance_table, uniform_maxvio
from rlib.rounds import decides, too_few

__all__ = ["CHAPTER", "FUNCTION_WORDS", "NEEDS", "SPECS", "judge"]

CHAPTER = "03_mixture_of_recursions"
PAPER = "001"


def _spec(id: str, where: str, paper_says: str, test: str, artifact: str, ours: bool = False) -> ClaimSpec:
    return ClaimSpec(id=id, paper=PAPER, where=where, paper_says=paper_says, test=test, artifact=artifact, ours=ours)


SPECS: tuple[ClaimSpec, ...] = (
    # ---- Sec. 3.1, Table 3: main results
    _spec("mor.tab3.ec_beats_recursive_isoflop", "Sec. 3.1, Table 3 (isoFLOP rows, 16.5e18)",
          "At 16.5e18 FLOPs (360M base, Middle-Cycle) MoR expert-choice beats the fixed-depth Recursive model at every "
          "Nr: NLL 2.7511 vs 2.8079 (Nr=2), 2.7925 vs 2.8466 (Nr=3), 2.8204 vs 2.8781 (Nr=4).",
          "Test NLL per seed (depth_scaling.csv at full depth): MoR-Nr EC < Recursive-Nr (middle_cycle) in every "
          "paired seed, for every Nr run (the book's claim: the main Nr over every seed). Direction only; the paper "
          "gives no margin (smallest gap 0.0541).", "depth_scaling.csv"),
    _spec("mor.tab3.mor_vs_vanilla_isoflop", "Sec. 3.1, Table 3 (isoFLOP rows)",
          "MoR-2 (167M non-embedding) beats vanilla (315M) at 16.5e18: NLL 2.7511 vs 2.7824 with 'nearly 50% fewer "
          "parameters'; MoR-3 (2.7925) and MoR-4 (2.8204) stay 'within a tight margin' of vanilla.",
          "main.csv, budget 'flops': nll(MoR-2 EC) < nll(Vanilla), and nll(MoR-Nr EC) - nll(Vanilla) <= +0.0380 for "
          "Nr = 3, 4 (the paper's largest 'tight margin', MoR-4: 2.8204 - 2.7824). The sentence's subject is accuracy "
          "('maintains its competitive accuracy'); the book reads the margin on NLL, Table 3's other column, and "
          "judges the few-shot column as mor.tab3.fewshot_column.", "main.csv"),
    _spec("mor.tab3.more_tokens_isoflop", "Sec. 3.1 ('process more training tokens within the same FLOPs budget'), "
          "Table 3 (isoFLOP rows)",
          "MoR's 'higher computational efficiency ... allows it to process more training tokens within the same FLOPs "
          "budget': at 16.5e18 MoR-2 / 3 / 4 EC see 27B / 30B / 30B tokens against vanilla's 20B.",
          "main.csv, budget 'flops': tokens_m(MoR-Nr EC) > tokens_m(Vanilla) for every Nr run (direction; the ratio "
          "reported beside the paper's 1.35 / 1.50 / 1.50).", "main.csv"),
    _spec("mor.tab3.fixed_tokens_mor2",
          "Sec. 3.1 ('MoR outperforms baselines with less compute at equal data'), Table 3 (fixed-token rows)",
          "At 20B tokens MoR-2 uses 12.3e18 FLOPs (25% fewer than 16.5e18) and still beats vanilla and Recursive-2: "
          "NLL 2.7749 vs 2.7824 and 2.8079.",
          "main.csv: nll(MoR-2 EC, budget 'tokens') < nll(Vanilla, 'flops') and < nll(Recursive-2, 'flops') (same "
          "tokens), and train_flops_e12 of MoR-2 EC ('tokens') / Vanilla < 1 (paper 0.745).", "main.csv"),
    _spec("mor.tab3.fixed_tokens_mor2_accuracy",
          "Sec. 3.1 ('MoR outperforms baselines with less compute at equal data'), Table 3 (fixed-token rows, few-shot "
          "columns)",
          "At 20B tokens MoR-2 'outperforms both vanilla and recursive baselines - achieving lower validation loss and "
          "higher accuracy - despite using 25% fewer training FLOPs': average few-shot accuracy 42.9 vs vanilla 42.3 "
          "and Recursive-2 42.6 (the loss half is mor.tab3.fixed_tokens_mor2).",
          "fewshot.csv (as mor.tab3.fewshot_column): the few-shot average of MoR-2 EC at budget 'tokens' above "
          "Vanilla's and Recursive-2's (budget 'flops': the same tokens), each by more than the s.e. of the difference "
          "(threshold ours); 'near chance' if every model's next-line score is within the binomial 95 % interval of "
          "0.25.", "fewshot.csv"),
    _spec("mor.tab3.fixed_tokens_time_memory", "Sec. 3.1 (text, fixed-token paragraph)",
          "Compared with vanilla at 20B tokens, MoR-2 'reduces training time by 19% and cuts peak memory usage by 25%' "
          "(360M, 2K context).",
          "train_cost.csv (a controlled measurement, rlib.mor.train_cost): MoR-2 EC and vanilla each train in a "
          "fresh process with the chapter's recipe at equal tokens per step, alternating in >= 3 rounds; per round "
          "MoR / vanilla of the median step time and of the peak memory over the process baseline; held if the "
          "median ratios are <= 0.81 (time) and <= 0.75 (memory), the paper's 19 % and 25 %.",
          "train_cost.csv"),
    _spec("mor.tab3.ec_beats_tc",
          "Sec. 3.1 ('MoR performance varies with routing and caching strategies'), Table 3; Table 12 (10B tokens)",
          "With Nr=3 at 16.5e18 token-choice gets NLL 2.9163 vs expert-choice 2.7925 ('routing granularity plays a "
          "pivotal role'); at 10B tokens TC 2.9358 vs EC 2.8667 (Table 12).",
          "Test NLL per seed (depth_scaling.csv at full depth): MoR-Nr EC < MoR-Nr TC in every paired seed (direction; "
          "paper Delta 0.1238).", "depth_scaling.csv"),
    _spec("mor.tab3.tc_behind_recursive",
          "Table 3 (isoFLOP rows, 16.5e18; read from its rows), Sec. 3.1 ('MoR performance varies with routing and "
          "caching strategies')",
          "At 16.5e18 FLOPs the token-choice MoR-3 (30B tokens) trails the fixed-depth Recursive-3 (20B tokens): NLL "
          "2.9163 vs 2.8466 (+0.0697), few-shot 40.0 vs 41.5. The text says only that 'using token-choice routing "
          "yields lower performance (40.0%) compared to expert-choice routing (42.6%)', and has MoR 'consistently "
          "outperforming the recursive baselines' with the expert-choice router; that token-choice falls behind the "
          "Recursive baseline is the book's reading of the two rows, so the claim is ours.",
          "Test NLL per seed (depth_scaling.csv at full depth): MoR-Nr TC above Recursive-Nr (middle_cycle) in every "
          "paired seed, the main Nr (Table 3's only token-choice row is Nr=3); direction only. The few-shot column is "
          "not judged (the local tasks sit at chance, mor.tab3.fewshot_column).", "depth_scaling.csv", ours=True),
    _spec("mor.tab3.kv_share_isoflop",
          "Sec. 3.1 ('applying KV cache sharing slightly reduces performance'), Table 3 (last row)",
          "MoR-3 EC with recursive KV sharing (31B tokens at 16.5e18) reaches NLL 2.7983 vs 2.7925 with recursion-wise "
          "caching: sharing 'slightly reduces performance' (+0.0058) while saving memory.",
          "Test NLL of the first seed (depth_scaling.csv at full depth): nll(MoR-Nr EC KV share) - nll(MoR-Nr EC) > 0 "
          "(paper +0.0058).", "depth_scaling.csv"),
    _spec("mor.tab3_fig5c.nll_rises_with_nr", "Sec. 3.1, Table 3; Sec. 5.3, Fig. 5c caption",
          "With the 360M base more recursions mean fewer unique parameters and a worse NLL: MoR-EC 2.7511 < 2.7925 < "
          "2.8204 (Nr = 2, 3, 4) at 16.5e18 and 2.7749 < 2.8246 < 2.8519 at 20B tokens; Recursive 2.8079 < 2.8466 < "
          "2.8781.",
          "main.csv: nll(MoR-Nr EC) rises with Nr at budget 'flops' and at 'tokens', and nll(Recursive-Nr) rises with "
          "Nr at 'flops', over the Nr run.", "main.csv"),
    # ---- Sec. 3.2, Fig. 3, Table 7: isoFLOP
    _spec("mor.fig3.mor_beats_recursive_every_budget", "Sec. 3.2, Fig. 3, App. C, Table 7",
          "MoR (Nr=3, EC, recursion-wise caching) 'consistently outperforms recursive baselines across all model "
          "sizes and compute budgets': 12 of 12 Table 7 cells, e.g. 360M 3.1026 vs 3.4864 (2e18), 2.7924 vs 2.8466 "
          "(16.5e18).",
          "budget_sweep.csv (first seed): nll(MoR-Nr EC) < nll(Recursive-Nr (middle_cycle)) at every budget_flops "
          "(direction; no margin in the paper).", "budget_sweep.csv"),
    _spec("mor.fig3.mor_matches_or_beats_vanilla", "Sec. 3.2, Fig. 3 and caption, App. C, Table 7",
          "MoR underperforms vanilla at 135M but from 360M 'not only matches but often exceeds the Vanilla "
          "Transformer' (360M: 3.1026 vs 3.3785, 2.9161 vs 3.0097, 2.7924 vs 2.7824; 730M at 16.5e18 2.7438 vs 2.7048 "
          "still counted as matching).",
          "budget_sweep.csv: nll(MoR-Nr EC) <= nll(Vanilla) + 0.0390 at every budget (0.0390 = the paper's largest "
          "shortfall it calls 'matches', 730M at 16.5e18). The paper states it for models above 360M (vanilla 315M "
          "non-embedding) and has MoR behind vanilla at 135M, so with a smaller vanilla it is not testable at this "
          "scale, the numbers reported (until 2026-12-05 the book judged it at any size).", "budget_sweep.csv"),
    _spec("mor.fig3.mor_behind_vanilla_smallest", "Sec. 3.2 ('it underperforms the vanilla model at the smallest "
          "model size (135M)'), Fig. 3, Table 7",
          "At 135M (106M non-embedding, 42M for MoR) MoR trails vanilla at every budget - 'likely due to a recursive "
          "capacity bottleneck' - and 'this gap closes rapidly at scale': MoR - vanilla +0.0155 / +0.0728 / +0.1058 "
          "at 2e18 / 5e18 / 16.5e18.",
          "budget_sweep.csv (first seed): nll(MoR-Nr EC) > nll(Vanilla) at every budget_flops (direction). The "
          "paper states it for its 135M size (106M non-embedding) and says the gap closes with size, so with a smaller "
          "vanilla it is not testable at this scale, the numbers reported with each model's tokens per parameter "
          "(until 2026-12-07 the book judged it at any size, reading the gap as at least as wide below 135M).",
          "budget_sweep.csv"),
    _spec("mor.tab7.recursive_behind_vanilla", "App. C ('weight-sharing alone in recursive models degraded "
          "performance compared to Vanilla'), Table 7",
          "At equal FLOPs the fixed-depth Recursive model (Middle-Cycle, Nr=3, a third of the parameters) has a higher "
          "NLL than vanilla in all 12 of Table 7's cells, e.g. 360M 3.4864 vs 3.3785 (2e18), 2.8466 vs 2.7824 "
          "(16.5e18); the smallest gap is 0.0625 (360M, 5e18).",
          "budget_sweep.csv (first seed): nll(Recursive-Nr (middle_cycle)) > nll(Vanilla) at every budget_flops "
          "(direction; the paper gives no margin).", "budget_sweep.csv"),
    _spec("mor.tab7.advantage_shrinks_with_budget",
          "Sec. 3.2 ('particularly under low and mid-range budgets'), Table 7",
          "MoR's edge over vanilla is largest 'under low and mid-range budgets' (stated for > 360M); in Table 7 "
          "MoR - vanilla NLL rises with the budget (2e18 / 5e18 / 16.5e18) at all four sizes: 135M +0.0155 / "
          "+0.0728 / +0.1058; 360M -0.2759 / -0.0936 / +0.0100; 730M -0.3864 / -0.0754 / +0.0390; 1.7B -1.0174 / "
          "-0.4021 / -0.0342.",
          "budget_sweep.csv: d(C) = nll(MoR-Nr EC) - nll(Vanilla) strictly increasing in budget_flops.",
          "budget_sweep.csv"),
    # ---- Sec. 3.3, Fig. 4a: throughput
    _spec("mor.fig4a.throughput", "Sec. 3.3, Fig. 4a, App. D",
          "With continuous depth-wise batching 'all MoR variants outperform the vanilla baseline' at B = 32 and at the "
          "relative maximum batch (42 / 48 / 51), the speed-up growing with Nr ('MoR-4 achieves up to a 2.06x speedup "
          "with B = Max').",
          "throughput.csv: every MoR EC model (recursion-wise caching; the main Nr and the preset's extra Nr) faster "
          "than vanilla at setting 'B' and 'B = Max', read on the interval of the per-round speed-ups (each round "
          "times all models back to back): [speedup_lo, speedup_hi], the smallest and largest round, holds the median "
          "with 1 - 2^(1-n) over n rounds (93.8 % at 5, rlib.rounds.median_interval's interval there). Held if every "
          "interval lies above 1, not held if one lies below 1; decided only from rlib.rounds.DECIDING_ROUNDS (5) "
          "rounds, as the book's other paired timings, and an interval that contains 1 reads not testable at this "
          "scale (until 2026-12-07 3 rounds decided it: their range holds the median with 75 % only, and the verdict "
          "moved between two hosts). The growth with Nr is the next claim.",
          "throughput.csv"),
    _spec("mor.fig4a.throughput_rises_with_nr", "Sec. 3.3, Fig. 4a",
          "'Increasing recursion depth leads to more tokens exiting early and a further reduction in KV cache usage. "
          "This, in turn, boosts throughput significantly (e.g., MoR-4 achieves up to a 2.06x speedup with B=Max)'.",
          "throughput.csv, MoR EC at two or more Nr: at each setting ('B', 'B = Max') the speed-up over vanilla "
          "rises with Nr, the higher Nr's slowest paired round above the lower Nr's fastest (speedup_lo > speedup_hi; "
          "threshold ours for 'significantly'); not held if a higher Nr's fastest round is below the lower Nr's "
          "slowest. Decided only from rlib.rounds.DECIDING_ROUNDS (5) paired rounds (the [min, max] interval holds the "
          "median with 93.8 % there); overlapping intervals read not testable at this scale (until 2026-12-07 3 "
          "rounds decided it and overlap read not held).", "throughput.csv"),
    # ---- Sec. 4.1, Fig. 4b, App. E, Table 8: parameter sharing
    _spec("mor.fig4b.middle_cycle_best", "Sec. 4.1, Fig. 4b, App. E, Table 8, Fig. 6",
          "'Middle-Cycle consistently achieves the lowest validation loss' (Fig. 4b, Nr=3): 360M M-Cyc 2.8760 < Cyc "
          "2.9363 < M-Seq 2.9753 < Seq 3.0245; 135M M-Cyc 3.1048 < Cyc 3.1154 < M-Seq 3.1602 < Seq 3.1637. App. E's "
          "one exception is at Nr=2 (135M: Cycle 3.0071 vs 3.0330), where Middle-Cycle is still 'the safest choice'.",
          "sharing.csv (Recursive-Nr at the ablation budget, the main Nr: 3 as Fig. 4b): nll(middle_cycle) is the "
          "lowest of the strategies (strict, as at both of the paper's sizes at Nr=3). The book tested it within "
          "0.0259 (App. E's Nr=2 exception) until 2026-12-05.", "sharing.csv"),
    _spec("mor.ours.middle_cycle_tied_best", "Sec. 4.1, Fig. 4b, App. E, Table 8 (the book's tolerance)",
          "Middle-Cycle is the best sharing strategy (Recursive models, 10B tokens: 2.8760 vs 2.9363 / 2.9753 / "
          "3.0245); the book's claim ties it within its own seed spread.",
          "sharing.csv: nll(middle_cycle) <= min over the strategies + max(Recursive-Nr isoFLOP seed std (main.csv "
          "nll_std), 0.01) (threshold ours: the book's claim 'Middle-Cycle is the best or tied-best sharing "
          "strategy').",
          "sharing.csv", ours=True),
    _spec("mor.tab8.sequence_worst_cycle_family_better",
          "App. E ('Middle-Cycle is consistently the safest choice'), Table 8, Fig. 6",
          "'Pure Sequence sharing records the worst NLL in all four settings', and Middle-Sequence improves on "
          "Sequence 'but it still performs worse than the Cycle-based methodology' (360M Nr=3: Seq 3.0245, M-Seq "
          "2.9753 vs Cyc 2.9363, M-Cyc 2.8760).",
          "sharing.csv: nll(sequence) is the largest; nll(middle_sequence) < nll(sequence); min(sequence, "
          "middle_sequence) > max(cycle, middle_cycle).", "sharing.csv"),
    _spec("mor.fig4b.reference_vanillas", "Sec. 4.1, Fig. 4b caption (dashed lines), Fig. 6 caption, Table 8",
          "At Nr=3 (at Nr=2 Cycle at 135M and Middle-Cycle at 360M beat it), the full-size vanilla is below every "
          "Recursive strategy at 360M (2.8471 vs >= 2.8760), while the "
          "parameter-matched vanilla (10 layers, 98M: 2.9449) lies above Middle-Cycle (2.8760) and Cycle (2.9363).",
          "sharing.csv: nll(Vanilla) < every strategy, and (new run) a vanilla with the Recursive model's unique depth "
          "at the ablation budget above nll(middle_cycle).", "sharing.csv"),
    # ---- Sec. 4.3, Table 12: KV sharing
    _spec("mor.tab12.kv_share_ec_vs_tc",
          "Sec. 4.3 ('KV sharing degrades expert-choice but benefits token-choice routing'), Fig. 4c, App. A.3, "
          "App. G.2, Table 12",
          "At 10B tokens (360M, Nr=3) recursive KV sharing degrades expert-choice (2.8667 -> 2.8895) but helps "
          "token-choice (2.9358 -> 2.9155), whose weaker routing 'can be complemented by the additional contextual "
          "information'.",
          "kv_sharing.csv 'share - cache': expert > 0 and token < 0 (sign pattern).", "kv_sharing.csv"),
    _spec("mor.tab12.kv_share_recursive_slight",
          "Sec. 4.3 ('KV sharing robustly works even in parameter-shared architectures'), App. G.2, Table 12",
          "The Recursive Transformer 'remains relatively robust to KV sharing': Middle-Cycle Nr=3 2.8760 -> 2.8854, "
          "Nr=2 2.8295 -> 2.8451, 'a slight perplexity drop'.",
          "kv_sharing.csv row 'none': share - cache <= +0.0156 (the paper's largest Middle-Cycle degradation, "
          "Nr=2); no lower bound: in Table 12 sharing improves Cycle Nr=3 (2.9363 -> 2.9155) and both Sequence rows, "
          "which the paper also counts as robust.", "kv_sharing.csv"),
    _spec("mor.tab12.kv_share_helps_vanilla",
          "App. G.2 ('KV cache sharing even improves the performance of vanilla models, where sharing acts as a "
          "regularization technique'), Sec. 4.3, Fig. 4c, Table 12",
          "Vanilla models pretrained with keys/values shared across depth (10B tokens) all have a lower NLL than the "
          "same model without sharing: 32 layers 2.8471 -> 2.7848 (Seq 2), 2.7650 (Cyc 2); 30 layers 2.8069 -> "
          "2.7879 (Seq 3), 2.7890 (Cyc 3).",
          "kv_sharing_vanilla.csv (rlib.mor.vanilla_kv: each shared model beside an unshared vanilla of the same "
          "depth, same seed and ablation budget): every shared row's mean paired difference d_vs_none < 0 "
          "(direction; the paper's smallest gain is 0.0179).", "kv_sharing_vanilla.csv"),
    # ---- Sec. 4.2, Tables 4 / 10 / 11: routers
    _spec("mor.tab4.aux_loss_beats_aux_router", "Sec. 4.2, Table 4 (left), App. F.3, Table 10, App. H.2 Fig. 9b",
          "'Using an auxiliary loss is more effective for inference-time behavior than training a separate auxiliary "
          "router': (sigma, alpha 0.1, MLP) aux router NLL 2.8893, sampling accuracy 89.2% vs aux loss 2.8816, 99.1%.",
          "routers.csv: 'final design' (expert, aux loss) vs 'ec_aux_router': sampling_acc higher (the paper's claim "
          "is about inference-time behaviour; NLL is reported beside it, not judged: Table 4's tanh pair has the aux "
          "router lower). The paper's pair has MLP routers; the book's rows are one-change ablations of its final "
          "design, which has a Linear router.",
          "routers.csv"),
    _spec("mor.fig5b_tab10.ec_aux_loss_separation",
          "Sec. 5.2, Fig. 5b; Table 10 (sampling accuracy); App. H.2, Fig. 9a",
          "'In all steps, auxiliary loss achieves a perfect separation in router outputs, with selected tokens sharply "
          "concentrated near a routing score of 1.0 and unselected tokens clustering near 0.0'; in Table 10 the "
          "Linear router (sigma, alpha 0.1, aux loss 0.001) decides causally with sampling accuracy 99.2% (MLP 99.1, "
          "W-MLP 99.2); the caption's 'chosen final strategy', its last row (z-loss on, inferred: the checkmarks were "
          "lost), reads 99.3%, while the released configs, which the book follows, leave z-loss off.",
          "The EC aux-loss model at the ablation budget: routers.csv 'final design' sampling_acc >= 0.991 (the "
          "paper's weakest sigma / aux-loss-0.001 row), and in router_separation.csv (Fig. 5b's histograms in "
          "numbers, panel 'EC, aux loss') at every step with kept and unkept candidates the median output of the "
          "kept tokens >= 0.9 and of the unkept <= 0.1 ('near 1.0 / 0.0': thresholds ours). Until 2026-12-06 the "
          "book judged the dead-token ratio here, which is App. F.3's claim (mor.appf3.linear_aux_loss_few_dead), "
          "not the separation.", "router_separation.csv"),
    _spec("mor.appf3.linear_aux_loss_few_dead", "App. F.3 (Table 10)",
          "'Employing a linear router architecture in conjunction with auxiliary loss effectively reduces the dead "
          "token ratio without compromising sampling accuracy': Linear + aux loss 0.001 dead 0.1%, sampling "
          "accuracy 99.2%, against aux-router and alpha-1.0 rows with up to 66.7% dead (MLP + aux loss 0.001: "
          "0.0 / 99.1).",
          "routers.csv 'final design' (expert; Linear, aux loss): dead_ratio <= 0.004 and sampling_acc >= 0.991 (the "
          "paper's weakest sigma / aux-loss-0.001 rows without capacity warmup: W-MLP dead 0.4, MLP sampling 99.1; "
          "the Linear row read as capacity warmup, the checkmarks lost, has 4.9 % dead; the paper counts dead "
          "positions over 500 sequences of 2K tokens, the book over its fewer, shorter evaluation windows, where a "
          "position goes unselected by chance more often: the bound is stricter here).", "routers.csv"),
    _spec("mor.tab4.sigmoid_beats_tanh",
          "Sec. 4.2 ('a sigmoid normalization function ... yield the best performance'), Table 4 (left), Table 10",
          "Aux loss 0.001, alpha 0.1, MLP: sigma NLL 2.8816, sampling accuracy 99.1 vs tanh 2.9933, 56.4.",
          "routers.csv: nll('final design', sigmoid) < nll('ec_tanh') and sampling_acc higher (direction; paper Delta "
          "0.1117). The paper's pair has MLP routers; the book's rows are one-change ablations of its Linear final "
          "design.", "routers.csv"),
    _spec("mor.tab10.alpha1_collapse", "Table 10 (read from its rows; App. F.1 defines alpha, App. F.3 the dead "
          "ratio's meaning)",
          "With sigma, alpha 1.0 collapses routing to fixed positions in both of Table 10's alpha-1.0 rows (aux loss "
          "0.01, MLP: dead 65.9%; aux router, MLP: 66.7%), which App. F.3 reads as a positional bias; NLL moves both "
          "ways (aux loss 2.8967 -> 2.9189, aux router 2.8893 -> 2.8867); the final design uses alpha 0.1.",
          "routers.csv 'ec_alpha1' vs 'final design': |dead_ratio - (1 - 1/Nr)| <= 0.05 (threshold ours around the "
          "paper's 65.9 / 66.7%); NLL reported beside it, not judged. The paper's text does not state this reading of "
          "its rows (App. F.3 names 'some auxiliary router variants'), so the claim is the book's.", "routers.csv",
          ours=True),
    _spec("mor.tab4.ec_router_arch_and_zloss", "Sec. 4.2, Table 4 (left), App. F.1, Table 10",
          "'A simple linear router architecture yield[s] the best performance' (Linear NLL 2.8667 / few-shot 40.1 vs "
          "MLP 2.8816 / 40.0 vs W-MLP 2.8716 / 39.4).",
          "routers.csv rows ec_mlp, ec_wide_mlp: nll(final design, linear) <= nll of both MLPs (Table 4's NLL column; "
          "the book scores few-shot accuracy on the main runs only, so the accuracy column is not judged). Until "
          "2026-12-06 this claim also judged the z-loss sentence on NLL; that is now mor.tab4.ec_zloss_negligible, "
          "on the accuracy the paper names.", "routers.csv"),
    _spec("mor.tab4.ec_zloss_negligible", "Sec. 4.2, Table 4 (left), Table 10",
          "'The auxiliary z-loss has a negligible impact on accuracy, though it does slightly reduce the proportion of "
          "dead tokens': Linear + z-loss few-shot 40.0 vs 40.1 (Table 4's accuracy is the few-shot average), dead "
          "0.0% vs 0.1%, NLL 2.8824 vs 2.8667.",
          "The few-shot average of the ec_zloss and final-design router rows, |difference| within its s.e. (threshold "
          "ours), and dead_ratio(ec_zloss) < dead_ratio(final design). The runs score few-shot accuracy on the main "
          "runs' first seed only, so the accuracy half is not measured; the NLL difference and the dead ratios are "
          "reported. The book's NLL reading stands beside it as mor.ours.ec_zloss_nll.", "routers.csv"),
    _spec("mor.ours.ec_zloss_nll", "Sec. 4.2, Table 4 (left), Table 10 (the book's NLL reading)",
          "Linear + z-loss NLL 2.8824 vs 2.8667 without (+0.0157), dead 0.0% vs 0.1%.",
          "routers.csv: |nll(ec_zloss) - nll(final design)| <= 0.0157 (the paper's own NLL delta for a 'negligible' "
          "impact) and dead_ratio(ec_zloss) not above the final design's: the book's reading of the sentence on NLL, "
          "the table's other performance column.", "routers.csv", ours=True),
    _spec("mor.tab4.tc_balancing_loss_vs_loss_free",
          "Sec. 4.2 ('In token-choice routing, balancing loss yields stable and accurate routing'), Table 4 (right), "
          "App. F.3, Table 11",
          "Both approaches 'achieve similar log-probability' but the balancing loss 'yields a significantly lower "
          "MaxVio': Loss (0.1) MaxVio 0.200, entropy 1.076, NLL 3.0239 vs Loss-free 0.852, 0.915, 2.9081.",
          "routers.csv token rows: maxvio('final design') < maxvio('tc_loss_free'), entropy higher, and |nll "
          "difference| <= 0.1158 (the paper's own 'similar' gap, 3.0239 - 2.9081). The paper's pair has MLP routers; "
          "the book's rows are one-change ablations of its Linear final design.", "routers.csv"),
    _spec("mor.tab11.tc_design_rows", "Sec. 4.2, Table 4 (right), App. F.3, Table 11",
          "'Softmax activation with an MLP router performs best, and removing z-loss ... results in higher performance "
          "and routing stability': Linear with z-loss 2.9974 / MaxVio 0.492 vs without 2.9358 / 0.266; MLP 3.0239 / "
          "0.200; with loss-free balancing (the only setting Table 11 runs sigmoid in) softmax 2.9081 vs sigmoid "
          "(alpha 0.1) 2.9165 at u 0.001. The z-loss coefficient of the 'with' row is not stated: z-loss is 'enabled "
          "by default' following 'common MoE practices' (ST-MoE's 1e-3), and the final design adds it back with 'a "
          "very small coefficient' (the caption says 1e-3, the released config 1e-5).",
          "routers.csv: nll(tc_loss_free, softmax) < nll(tc_sigmoid, sigmoid alpha 0.1, the same loss-free u); "
          "tc_no_z's nll and maxvio below the final design's (z-loss 1e-3, read as the default 'with' row); MLP vs "
          "Linear reported on NLL and MaxVio.", "routers.csv"),
    _spec("mor.tab4.tc_mlp_router_best", "Sec. 4.2 ('In token-choice routing, ...'), Table 4 (right)",
          "'Softmax activation with an MLP router performs best': among Table 4's balancing-loss (0.1), softmax rows "
          "the MLP router has MaxVio 0.200 vs Linear 0.492 and W-MLP 0.384, NLL 3.0239 vs 2.9974 and 3.0293, "
          "few-shot 38.5 vs 38.4 and 38.8: only its MaxVio ranks first, so 'best' reads as the most stable routing.",
          "routers.csv token rows: maxvio(tc_mlp) < maxvio(final design), the one-change ablation of the Linear "
          "final design (balancing loss, softmax, z-loss 1e-3), the paper's column where MLP is best; NLL reported "
          "beside it (the paper's own NLL ranks Linear ahead). The book has no W-MLP token-choice row.",
          "routers.csv"),
    _spec("mor.apph.tc_load_imbalance", "Sec. 4.2, App. F.3, App. H.2, Fig. 9c-d",
          "Token-choice 'often struggles to balance loads among its heterogeneous experts, even for nearly half of the "
          "training steps' (final design MaxVio 0.266 vs 0.007 for a random router).",
          "New: MaxVio of each training step's tokens logged for the TC final design (load_trace.csv: the main "
          "grid's isoFLOP runs at Nr, every seed, and the ablation budget's final-design row where the profile has "
          "it); held if, in every such run, it is above 0.266 for >= 40% of the steps and the run ends (Table 11's "
          "end-of-training MaxVio on held-out windows) well above 0.007, i.e. >= 10x (thresholds ours: the paper "
          "says 'nearly half' and App. F.3 'during quite long initial stage').", "load_trace.csv"),
    # ---- Sec. 5: analysis
    _spec("mor.fig5c.test_time_scaling", "Sec. 5.3, Fig. 5c and caption",
          "For MoR-EC with Nr = 2, 3, 4 (360M, aux loss, recursion-wise caching) the log-likelihood improves as the "
          "maximum recursion depth at inference rises: 'allocating more recursion steps at inference can improve "
          "generation quality' (no numbers in the text).",
          "depth_scaling.csv: for every MoR-Nr EC model and seed, nll falls strictly from depth cap d to d + 1 for "
          "every d < Nr (the book's claim: the main Nr).", "depth_scaling.csv"),
    _spec("mor.fig5a.compute_optimal", "Sec. 5.1, Fig. 5a and caption (data: Sec. 3.2, Table 7)",
          "The 'flatter slope of MoR's optimal path' shows MoR 'benefits more significantly from increases in "
          "parameter count (i.e., less data-hungry)': under isoFLOP it should use 'larger models trained for shorter "
          "steps'.",
          "compute_optimal.csv (Vanilla, Recursive and MoR EC at >= 3 widths x >= 2 budgets, N = the vanilla "
          "model's non-embedding size at that width): per model and budget a quadratic in ln N, its minimum N*(C); "
          "ln N* = a ln C + b per model; held if every N* lies within the sampled widths and a(MoR) > a(Vanilla) "
          "and a(MoR) > a(Recursive) ('flatter' read as the paper explains it: N* grows faster with C, the path "
          "flatter with size on the x-axis; the bracketing condition ours: a star outside the widths is "
          "extrapolated). "
          "Beside it: how often the ordering survives refits under the seed s.d. of main.csv.",
          "compute_optimal.csv"),
    _spec("mor.fig1_tab14.depth_follows_semantics", "Sec. 5.2, Fig. 1 (right), App. H.1, Table 14",
          "Content-rich tokens get three recursions, function words two, others one: 'recursion depth allocation "
          "aligns closely with the semantic importance of each token' (examples only).",
          "token_depths.csv (causal routing): share of tokens at the deepest recursion among content words > among "
          "function tokens: closed-class English words (a word list) and, as the paper's own examples '—' and '\\n' "
          "are, punctuation and line breaks (tokens with no letter or digit); threshold ours. Until 2026-12-07 the "
          "book left punctuation and line breaks out of the comparison.", "token_depths.csv"),
    _spec("mor.fig7.kv_norms", "Sec. 4.3, App. G.1, Fig. 7",
          "In a Middle-Cycle Recursive 360M, sharing key and value projections 'leads to clear recursive patterns in "
          "the magnitude values', while hidden-state magnitudes 'tend to increase'.",
          "kv_norms.csv (Recursive-Nr): Spearman(depth, hidden norm) >= 0.8, and the key and value norm profiles of "
          "consecutive recursions over the shared block correlate >= 0.5 on average (thresholds ours).",
          "kv_norms.csv"),
    _spec("mor.fig8.kv_cosine", "Sec. 4.3, App. G.1, Fig. 8",
          "Cosine-similarity matrices show 'distinct diagonal patterns' at corresponding depths, and 'sharing value "
          "states across recursions appears to be more challenging than sharing key states'.",
          "kv_similarity.csv (Recursive-Nr): mean cosine between different depths of the same block minus that between "
          "different blocks >= 0.1 for keys and for values, and the key band above the value band (threshold ours).",
          "kv_similarity.csv"),
    # ---- Table 2: cost model
    _spec("mor.tab2.kv_memory", "Sec. 2.2.2, Table 2 (right)",
          "Recursion-wise caching cuts KV memory to 'approximately (Nr+1)/2Nr' of vanilla, recursive sharing to 1/Nr.",
          "kv_bytes.csv: |measured_ratio - predicted_ratio| <= 1.5 Nr / T for every routed row (int(c_r T) rounds down "
          "by < 1 token per recursion; threshold ours, the paper says 'approximately').", "kv_bytes.csv"),
    _spec("mor.s4_3.kv_share_fewer_flops", "Sec. 4.3 ('KV sharing degrades expert-choice ...') and its footnote 5",
          "'Recursive KV sharing offers the advantages of reduced memory footprint and overall FLOPs' (footnote: "
          "'Although attention FLOPs increase by N_ctx/k than recursion-wise caching, reduced KV projection FLOPs "
          "lead to an overall reduction').",
          "kv_bytes.csv, one top-k prefill of the same test windows by the trained MoR-EC models: the sharing "
          "model's executed FLOPs per token (torch's FlopCounterMode: every matmul, and each attention call's whole "
          "score rectangle) below the recursion-wise caching model's, its attention FLOPs above (the footnote's "
          "trade), and its KV-cache bytes below (memory).", "kv_bytes.csv"),
    # ---- App. E, Table 9: up-training
    _spec("mor.tab9.middle_best_uptraining", "App. E ('Behavior under continued pre-training (up-training)'), Table 9",
          "Up-training SmolLM-360M, 'Both Middle strategies demonstrate superior performance across all settings' and "
          "beat the reduced baselines of the same init (Nr=2, Step: M-Cyc 2.6800, M-Seq 2.6627 vs Cyc 2.7165, Seq "
          "2.6862, reduced 2.7168).",
          "uptraining.csv: for every init run under all four sharings, max(nll M-Cyc, M-Seq) < min(nll Cyc, Seq) and < "
          "every loop-1 (reduced) run of that init.", "uptraining.csv"),
    _spec("mor.tab9.seq_step_beats_cyc_step", "Table 9 (read from its rows; the text does not state it)",
          "In up-training, Sequence with Step init beats Cycle with Step init: Nr=2 2.6862 vs 2.7165, Nr=3 2.8258 vs "
          "2.8901.",
          "uptraining.csv: nll(recursive-sequence-stepwise) < nll(recursive-cycle-stepwise) (the book's reading of "
          "the paper's rows).", "uptraining.csv", ours=True),
    # ---- the book's own tests
    _spec("mor.ours.decode_agreement",
          "Book's own test; the paper measures per-step sampling accuracy only (App. F.2, Table 10)",
          "The paper reports sampling accuracy (causal decision vs top-k, per step, teacher-forced) of 99.1-99.8% for "
          "its sigmoid, alpha 0.1 routers with the aux loss (56.4-100% over all of Table 10's aux-loss rows), and does "
          "not decode token by token to compare depths.",
          "decode_agreement.csv: share of tokens whose depth under cached causal decoding equals its top-k depth >= "
          "0.95 (threshold ours).", "decode_agreement.csv", ours=True),
    _spec("mor.ours.gate_ablation",
          "Book's own (issue 24 item 3); bears on Sec. 3.1 / Table 3 and Sec. 5.3 / Fig. 5c",
          "MoR's routed update is gated (x + g f(x), g = alpha sigma(.), alpha 0.1) while the Recursive baseline has "
          "no gate; the paper has no ablation separating gate from routing.",
          "New, 2 seeds at the isoFLOP budget: MoR-EC alpha 0.1 / 1.0, MoR-EC with gating 'replace', Recursive with "
          "the same gate on every token; held if nll(MoR-EC 'replace') < nll(Recursive) in every paired seed.",
          "gates.csv", ours=True),
    _spec("mor.ours.flops_cost_model", "App. C (FLOPs approximation), App. D (relative maximum batch), Table 2",
          "Budgets count forward FLOPs only (linear 2 x params, attention over the causal half, MoR at each "
          "recursion's length), giving the released 360M configs' step counts and the relative maximum batches 42 / "
          "48 / 51.",
          "paper_budgets.csv: |formula_steps - released_steps| <= 1 for every released 360M config (rounding; "
          "threshold ours) and formula_max_batch == paper_max_batch.", "paper_budgets.csv", ours=True),
    # ---- missing analogs
    _spec("mor.tab13.relaxation", "App. G.2 ('Relaxation for key-value sharing constraints'), Table 13",
          "Relaxing a Recursive Middle-Cycle Nr=3 model brings no substantial gain from scratch: baseline 2.8854; Enc "
          "2.8604; LoRA r64 2.8599; DoRA 2.8945; Adapt-P 2.8626; with KV sharing Adapt-P 2.9030 ('did not reveal "
          "substantial differences'). The table's baseline 2.8854 is also its KV-sharing baseline and Table 12's "
          "Middle-Cycle Nr=3 *with* KV sharing; without sharing Tables 8 and 12 give 2.8760, against which the "
          "largest gain would be LoRA's 0.0161. The book keeps the paper's own table: 0.0255.",
          "relaxation.csv (new runs at the ablation budget; LoRA rank, prompt length scaled with width, context): "
          "no relaxation lowers NLL by more than 0.0255 (the paper's largest, LoRA, called not substantial), KV share "
          "+ Adapt-P against the KV-share baseline included (the paper's is worse by 0.0176). DoRA has no adapter in "
          "the book.",
          "relaxation.csv"),
    _spec("mor.tab3.fewshot_column", "Sec. 3.1, Table 3 (few-shot columns), App. B",
          "Average few-shot accuracy: Vanilla 42.3; Recursive-2/3/4 42.6 / 41.5 / 41.0; MoR-EC-2/3/4 43.1 / 42.6 / "
          "41.6; MoR-TC-3 40.0; the text highlights MoR-2 > vanilla (43.1 vs 42.3) and EC > TC (42.6 vs 40.0).",
          "fewshot: the average of the primary metrics of book_nextline (length-normalised, 4 choices) and "
          "book_cloze, 0 shots (their standard), first seed of each main run: MoR-2 EC above Vanilla and MoR-3 EC "
          "above MoR-3 TC at the isoFLOP budget, each by more than the s.e. of the difference (threshold ours); "
          "'near chance' if every model's next-line score is within the binomial 95 % interval of 0.25.",
          "fewshot.csv"),
)

# Sec. 3.2: MoR matches or beats vanilla "for >360M parameters"; the 360M vanilla has 315M non-embedding (Table 3)
PAPER_MATCH_SIZE_M = 315.0
# Sec. 3.2: MoR "underperforms the vanilla model at the smallest model size (135M)": 106M non-embedding (Table 7)
PAPER_SMALLEST_M = 106.0

# claims that need a measurement the book does not make yet
NEEDS: dict[str, str] = {}

# closed-class English words (articles, pronouns, prepositions, conjunctions, auxiliaries) for Table 14's reading
_FUNCTION_TEXT = (
    "a an the this that these those i me my mine you your yours he him his she her hers it its we us our ours they "
    "them their theirs who whom whose which what there here and or but nor so yet if then than as because while though "
    "although of in on at by for with from to into onto upon over under about above below between through during "
    "before after since till until without within against among across toward towards be am is are was were been "
    "being have has had do does did will would shall should can could may might must not no all any some each every "
    "such o thee thou thy thine ye hath doth art shalt")
FUNCTION_WORDS = frozenset(_FUNCTION_TEXT.split())


class Verdict(NamedTuple):
    held: bool | str
    measured: str
    diagnosis: tuple[str, str] | None = None


class Missing(Exception):
    """A claim's numbers are not in this run's tables; the message says what would measure them."""


JUDGES: dict[str, Callable[[Mapping[str, pd.DataFrame], MoRConfig], Verdict]] = {}


def _judges(claim_id: str):
    def register(fn):
        JUDGES[claim_id] = fn
        return fn
    return register


def judge(tables: Mapping[str, pd.DataFrame], cfg: MoRConfig, profile: str) -> Ledger:
    """Every claim of `SPECS`, judged from the chapter's tables (name -> DataFrame) under the run's config."""
    ledger = Ledger(CHAPTER, profile, SPECS)
    for spec in SPECS:
        if spec.id in NEEDS:
            ledger.not_measured(spec.id, NEEDS[spec.id])
            continue
        try:
            verdict = JUDGES[spec.id](tables, cfg)
        except Missing as why:
            ledger.not_measured(spec.id, str(why))
            continue
        except (KeyError, IndexError) as err:  # a table written with another layout: say so, judge the rest
            ledger.not_measured(spec.id, f"needs: {spec.artifact} in the layout this ledger reads ({err!r} missing)")
            continue
        ledger.judge(spec.id, verdict.held, verdict.measured, verdict.diagnosis)
    return ledger


# ---------------------------------------------------------------------------------------------------- table access


def _table(tables: Mapping[str, pd.DataFrame], name: str) -> pd.DataFrame:
    df = tables.get(name)
    if df is None or len(df) == 0:
        raise Missing(f"needs: the `{name}` table, which this run did not write")
    return df


def _one(df: pd.DataFrame, what: str, **match) -> pd.Series:
    """The single row of `df` whose columns equal `match` (NaN matches ""); Missing names `what` if there is none."""
    sel = df
    for col, value in match.items():
        if col not in sel.columns:
            raise Missing(f"needs: {what} (column `{col}` missing)")
        sel = sel[sel[col].fillna("") == value] if isinstance(value, str) else sel[sel[col] == value]
    if len(sel) == 0:
        raise Missing(f"needs: {what}, which this run did not measure")
    return sel.iloc[0]


def _optional(fn: Callable[[], str], fallback: str) -> str:
    """Evidence from another table when it was written, else the fallback sentence."""
    try:
        return fn()
    except Missing:
        return fallback


def _labels(cfg: MoRConfig, nr: int | None = None) -> dict[str, str]:
    nr = nr or cfg.n_recursions
    return {"ec": MoRSpec.expert(nr).label(), "tc": MoRSpec.token(nr).label(), "rec": MoRSpec.recursive(nr).label(),
            "share": MoRSpec.expert(nr, kv="share").label()}


def _recursions(cfg: MoRConfig) -> list[int]:
    return sorted({cfg.n_recursions, *cfg.extra_recursions})


def _per_seed(tables: Mapping[str, pd.DataFrame], label: str) -> pd.Series:
    """Test NLL per seed of an isoFLOP run: depth_scaling's row at full depth is the run's own test NLL."""
    depth = _table(tables, "depth_scaling")
    rows = depth[depth["label"] == label]
    if len(rows) == 0:
        raise Missing(f"needs: the isoFLOP run(s) of {label} (depth_scaling.csv)")
    full = rows[rows["depth_cap"] == rows.groupby("seed")["depth_cap"].transform("max")]
    return full.set_index("seed")["nll"].sort_index()


def _fmt_seeds(s: pd.Series) -> str:
    return f"{s.mean():.4f}" + (f" ± {s.std(ddof=1):.4f}" if len(s) > 1 else "") + f" (seeds {list(s.index)})"


def _main(tables: Mapping[str, pd.DataFrame], label: str, budget: str = "flops") -> pd.Series:
    return _one(_table(tables, "main"), f"the {budget}-budget run of {label} (main.csv)", label=label, budget=budget)


def _seed_std(tables: Mapping[str, pd.DataFrame], label: str, default: float | None = None) -> float:
    """A model's isoFLOP seed standard deviation from main.csv; with one seed (or no run) `default`, or Missing."""
    try:
        std = _main(tables, label)["nll_std"]
    except Missing:
        std = np.nan
    if pd.isna(std):
        if default is not None:
            return default
        raise Missing(f"needs: >= 2 seeds of {label}")
    return float(std)


def _largest_seed_std(tables: Mapping[str, pd.DataFrame], pick: Callable[[pd.Series], pd.Series]) -> float:
    """The largest isoFLOP seed s.d. in main.csv among the labels `pick` selects (NaN without main.csv or seeds)."""
    main = tables.get("main")
    if main is None or "nll_std" not in main:
        return np.nan
    stds = main[pick(main["label"]) & (main["budget"] == "flops")]["nll_std"].dropna()
    return float(stds.max()) if len(stds) else np.nan


def _budget_steps(tables: Mapping[str, pd.DataFrame], budget: str, model: str | None = None) -> str:
    """Optimizer steps of the runs at `budget` (of one model if given), from budgets.csv: "39" or "48-71"."""
    b = _table(tables, "budgets")
    rows = b[(b["budget"] == budget) & ((b["model"] == model) if model else True)]
    if len(rows) == 0:
        raise Missing(f"needs: budgets.csv rows for budget {budget!r}")
    lo, hi = int(rows["steps"].min()), int(rows["steps"].max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _router(tables: Mapping[str, pd.DataFrame], routing: str, row: str) -> pd.Series:
    return _one(_table(tables, "routers"), f"the routers.csv row {row!r} ({routing})", routing=routing, row=row)


# ---------------------------------------------------------------------------------------------------- Table 3


def _paired_lower(tables, cfg, kind: str, other: str, main_only: bool) -> Verdict:
    """`kind` below `other` in every paired seed, for the main Nr (and the extra Nr unless `main_only`)."""
    parts, held, gaps = [], True, []
    for nr in [cfg.n_recursions] if main_only else _recursions(cfg):
        labels = _labels(cfg, nr)
        try:
            a, b = _per_seed(tables, labels[kind]), _per_seed(tables, labels[other])
        except Missing:
            if nr == cfg.n_recursions:
                raise
            continue
        paired = a.index.intersection(b.index)
        if len(paired) == 0:
            raise Missing(f"needs: {labels[kind]} and {labels[other]} trained with the same seed")
        ok = bool((a[paired] < b[paired]).all())
        held &= ok
        gaps += [(nr, s, float(b[s] - a[s])) for s in paired]
        parts.append(f"Nr={nr}: {labels[kind]} {_fmt_seeds(a)} vs {labels[other]} {_fmt_seeds(b)}"
                     + ("" if ok else " (fails)"))
    diagnosis = None
    if not held:
        worst = min(gaps, key=lambda g: g[2])
        other_label = _labels(cfg, worst[0])[other]
        spread = _optional(lambda: f"; the {other_label} seed std is {_seed_std(tables, other_label):.4f}", "")
        diagnosis = ("budget", f"Nr={worst[0]} seed {worst[1]} reverses by {-worst[2]:.4f} nats{spread}; needs: >= 3 "
                               "seeds at >= 4x tokens to tell a reversal from seed noise")
    return Verdict(held, "test NLL: " + "; ".join(parts), diagnosis)


@_judges("mor.tab3.ec_beats_recursive_isoflop")
def _ec_beats_recursive(tables, cfg) -> Verdict:
    return _paired_lower(tables, cfg, "ec", "rec", main_only=False)


@_judges("mor.tab3.ec_beats_tc")
def _ec_beats_tc(tables, cfg) -> Verdict:
    return _paired_lower(tables, cfg, "ec", "tc", main_only=False)


@_judges("mor.tab3.tc_behind_recursive")
def _tc_behind_recursive(tables, cfg) -> Verdict:
    labels = _labels(cfg)
    tc, rec = _per_seed(tables, labels["tc"]), _per_seed(tables, labels["rec"])
    paired = tc.index.intersection(rec.index)
    if len(paired) == 0:
        raise Missing(f"needs: {labels['tc']} and {labels['rec']} trained with the same seed")
    gap = tc[paired] - rec[paired]  # > 0: token-choice behind, as in Table 3 (+0.0697)
    measured = (f"test NLL: {labels['tc']} {_fmt_seeds(tc)} vs {labels['rec']} {_fmt_seeds(rec)}; TC - Recursive "
                + ", ".join(f"{g:+.4f} (seed {s})" for s, g in gap.items()) + " (paper +0.0697)")
    if bool((gap > 0).all()):
        return Verdict(True, measured)
    leads = -gap[gap <= 0]
    stds = [v for v in (_seed_std(tables, labels[k], np.nan) for k in ("tc", "rec")) if np.isfinite(v)]
    spread = (f", {leads.min() / max(stds):.1f}-{leads.max() / max(stds):.1f}x the larger isoFLOP seed s.d. "
              f"({max(stds):.4f}, main.csv)" if stds else " (one seed each, no seed s.d.)")

    def tokens() -> str:
        ratio = _main(tables, labels["tc"])["tokens_m"] / _main(tables, labels["rec"])["tokens_m"]
        return f"; at equal FLOPs it trains on {ratio:.2f}x the Recursive model's tokens (the paper's 30B / 20B, 1.50x)"

    def plateau() -> str:
        wide = _sweep(tables, cfg).sort_index()
        (b0, b1), rec_nll, ec_nll = wide.index[[0, -1]], wide["rec"].iloc[[0, -1]], wide["mor"].iloc[[0, -1]]
        return (f"; over the Fig. 3 sweep's {b1 / b0:.0f}x budget the Recursive model moves only {rec_nll.iloc[0]:.4f} "
                f"-> {rec_nll.iloc[1]:.4f} while {labels['ec']} moves {ec_nll.iloc[0]:.4f} -> {ec_nll.iloc[1]:.4f} "
                "(budget_sweep.csv): the fixed-depth model is still near its initial plateau")

    def gate() -> str:  # the gate ablation (cpu-long): the Recursive model with MoR's gate on every token, no routing
        g = _table(tables, "gates")
        g = g.assign(tag=g["tag"].fillna("")).pivot_table(index="seed", columns=["model", "tag"], values="nll")
        if not {("Recursive", ""), ("Recursive", "rec_gated")} <= set(g.columns):
            raise Missing("needs: gates.csv rows of the Recursive model with and without the gate")
        plain, gated = g[("Recursive", "")].dropna(), g[("Recursive", "rec_gated")].dropna()
        both = gated.index.intersection(plain.index).intersection(paired)
        if len(both) == 0:
            raise Missing("needs: gates.csv seeds paired with depth_scaling.csv's")
        worth = [(plain[s] - gated[s]) / -gap[s] for s in both if gap[s] < 0]
        share = f": the gate alone is worth {min(worth):.0%}-{max(worth):.0%} of token-choice's lead" if worth else ""
        return ("; the Recursive model with MoR's gate (x + g f(x) on every token, no routing; gates.csv) gains "
                + ", ".join(f"{plain[s] - gated[s]:.4f}" for s in both) + " nats from the gate alone, and against "
                "it token-choice is " + ", ".join(f"{tc[s] - gated[s]:+.4f}" for s in both)
                + f" (seeds {list(both)}){share}, a gate the fixed-depth baseline lacks here as in the paper")

    return Verdict(False, measured, (
        "budget", f"token-choice leads in {len(leads)} of {len(gap)} paired seeds by {leads.min():.4f}-"
                  f"{leads.max():.4f}{spread}" + _optional(tokens, "") + _optional(plateau, "") + _optional(gate, "")
                  + "; a short run rewards whatever leaves the plateau first (inferred); needs: budgets x4-x16, where "
                  "the fixed-depth model has left its plateau, >= 3 seeds, and the gated Recursive beside it"))


def _under_trained(tables) -> str:
    """Evidence shared by the vanilla comparisons: how few tokens per parameter vanilla saw."""
    v = _main(tables, "Vanilla")
    return (f"vanilla sees {v['tokens_m'] / v['params_m']:.3f} tokens per non-embedding parameter "
            f"({v['tokens_m']:.3f}M / {v['params_m']:.2f}M), far below the paper's least-trained cell (0.4)")


@_judges("mor.tab3.mor_vs_vanilla_isoflop")
def _mor_vs_vanilla(tables, cfg) -> Verdict:
    vanilla = float(_main(tables, "Vanilla")["nll"])
    if 2 not in _recursions(cfg):
        raise Missing("needs: MoR-2 EC at the isoFLOP budget (add 2 to the preset's extra_recursions)")
    mor = {nr: float(_main(tables, _labels(cfg, nr)["ec"])["nll"]) for nr in _recursions(cfg)}
    held = mor[2] < vanilla and all(mor[nr] - vanilla <= 0.0380 for nr in mor if nr > 2)
    measured = f"Vanilla {vanilla:.4f}; " + "; ".join(f"MoR-{nr} EC {v:.4f} ({v - vanilla:+.4f})"
                                                      for nr, v in mor.items())
    return Verdict(held, measured, None if held else ("budget", _under_trained(tables) + "; needs: >= 4x tokens"))


@_judges("mor.tab3.fixed_tokens_mor2")
def _fixed_tokens(tables, cfg) -> Verdict:
    labels = _labels(cfg, 2)
    mor, vanilla, rec = _main(tables, labels["ec"], "tokens"), _main(tables, "Vanilla"), _main(tables, labels["rec"])
    ratio = mor["train_flops_e12"] / vanilla["train_flops_e12"]
    held = bool(mor["nll"] < vanilla["nll"] and mor["nll"] < rec["nll"] and ratio < 1)
    measured = (f"MoR-2 EC at vanilla's tokens {mor['nll']:.4f} vs Vanilla {vanilla['nll']:.4f} vs Recursive-2 "
                f"{rec['nll']:.4f}; train FLOPs {mor['train_flops_e12']:.3f}e12 vs {vanilla['train_flops_e12']:.3f}e12 "
                f"= {ratio:.3f}")
    return Verdict(held, measured, None if held else ("budget", _under_trained(tables) + "; needs: >= 4x tokens"))


@_judges("mor.tab3.fixed_tokens_time_memory")
def _fixed_tokens_cost(tables, cfg) -> Verdict:
    cost = _table(tables, "train_cost")
    mor = cost[cost["model"] == "MoR-2 EC"]
    rounds = len(mor)
    if rounds < 3:
        raise Missing(f"needs: >= 3 paired rounds of train_cost.csv ({rounds} here; the preset's cost_rounds)")
    time_ratio, memory_ratio = float(mor["step_s / vanilla"].median()), float(mor["peak_mib / vanilla"].median())
    vanilla = cost[cost["model"] == "Vanilla"]
    row = mor.iloc[0]
    measured = (f"step time {time_ratio:.3f}x vanilla [{mor['step_s / vanilla'].min():.3f}, "
                f"{mor['step_s / vanilla'].max():.3f}] ({mor['step_s'].median():.3f} vs "
                f"{vanilla['step_s'].median():.3f} s per step of {int(row['tokens_per_step'])} tokens); peak memory "
                f"{memory_ratio:.3f}x [{mor['peak_mib / vanilla'].min():.3f}, {mor['peak_mib / vanilla'].max():.3f}] "
                f"({mor['peak_mib'].median():.0f} vs {vanilla['peak_mib'].median():.0f} MiB over the process "
                f"baseline); median [min, max] of {rounds} paired rounds on {row['device']} ({int(row['threads'])} "
                "threads); paper 0.81 and 0.75")
    time_ok, memory_ok = time_ratio <= 0.81, memory_ratio <= 0.75
    if time_ok and memory_ok:
        return Verdict(True, measured)

    def flops_ratio() -> str:
        mor_flops = _main(tables, _labels(cfg, 2)["ec"], "tokens")["flops_per_token_m"]
        ratio = mor_flops / _main(tables, "Vanilla")["flops_per_token_m"]
        return f"its forward FLOPs per token are {ratio:.3f}x vanilla's (the paper's 0.745 bought 0.81 in time)"

    flops = _optional(flops_ratio, "its forward FLOPs per token are not in this run's main.csv")
    parts = []
    if not time_ok:
        parts.append(f"{flops}, but its step takes {time_ratio:.3f}x on {row['device']}: the work that does not "
                     "shrink with the routed tokens (router, top-k, gather / scatter; inferred) weighs more at "
                     f"d={cfg.d_model} with {cfg.seq_len}-token windows than at the paper's 360M and 2K context")
    if not memory_ok:
        rest_share = float((vanilla["rest_mib"] / vanilla["peak_mib"]).median())
        state = float(mor["state_mib / vanilla"].median())
        parts.append(f"training state (parameters, gradients, AdamW moments) is {state:.3f}x vanilla's but the rest "
                     "of the peak (activations, workspace, allocator slack) "
                     f"{mor['rest_mib / vanilla'].median():.3f}x, and that rest is {rest_share:.0%} of vanilla's peak: "
                     "the embedding, the unshared first and last layers and the logits over the vocabulary are the "
                     "same in both models")
    return Verdict(False, measured, ("scale", "; ".join(parts) + "; needs: the same measurement on a GPU at the "
                                              "paper's shapes (the gpu profile)"))


# Table 3: MoR-3 EC 2.8246 at 20B tokens -> 2.7925 at 30B (the isoFLOP row), nats per doubling of tokens; the sharing
# row trains on 31B tokens against caching's 30B at the same 16.5e18 FLOPs
PAPER_TAB3_SLOPE = (2.8246 - 2.7925) / float(np.log2(30 / 20))
PAPER_SHARE_TOKENS = 31 / 30
PAPER_TOKENS_PER_PARAM = 30e3 / 118  # Table 3's MoR-3: 30B tokens over 118M non-embedding parameters


@_judges("mor.tab3.kv_share_isoflop")
def _kv_share_isoflop(tables, cfg) -> Verdict:
    labels, seed = _labels(cfg), cfg.seeds[0]
    share, cache = _per_seed(tables, labels["share"]), _per_seed(tables, labels["ec"])
    if seed not in share.index or seed not in cache.index:
        raise Missing(f"needs: seed {seed} of {labels['share']} and {labels['ec']}")
    diff = float(share[seed] - cache[seed])
    measured = f"seed {seed}: share {share[seed]:.4f} vs cache {cache[seed]:.4f} ({diff:+.4f})"
    if diff > 0:
        return Verdict(True, measured)
    lead, sd = -diff, _seed_std(tables, labels["ec"], np.nan)

    def tokens() -> str:
        """What sharing's extra tokens at equal FLOPs are worth on this budget's learning curve, beside the paper's."""
        t_share, t_cache = _main(tables, labels["share"])["tokens_m"], _main(tables, labels["ec"])["tokens_m"]
        text = (f"at equal FLOPs sharing trains on {t_share / t_cache - 1:.1%} more tokens ({t_share:.4f} vs "
                f"{t_cache:.4f}M; the paper's 31B vs 30B, +{PAPER_SHARE_TOKENS - 1:.1%})")
        sweep = tables.get("budget_sweep")
        mor = pd.DataFrame() if sweep is None else sweep[sweep["label"] == labels["ec"]].sort_values("budget_flops")
        if len(mor) < 2:
            return text + "; "
        (b0, n0), (b1, n1) = mor[["budget_flops", "nll"]].iloc[-2], mor[["budget_flops", "nll"]].iloc[-1]
        per_doubling = (n0 - n1) / np.log2(b1 / b0)
        worth = per_doubling * np.log2(t_share / t_cache)
        rest = lead - worth
        unexplained = (f", leaving {rest:.4f} ({rest / sd:.1f}x the seed s.d.) that they do not explain"
                       if np.isfinite(sd) and rest > 0 else "")
        return text + (
            f", and on this budget's learning curve {labels['ec']} gains {per_doubling:.3f} nats per doubling of "
            f"tokens (budget_sweep.csv: {n0:.4f} at {b0:.2g} -> {n1:.4f} at {b1:.2g} FLOPs; the paper's Table 3 "
            f"curve, MoR-3 EC 2.8246 at 20B -> 2.7925 at 30B tokens, {PAPER_TAB3_SLOPE:.3f}), so the extra tokens are "
            f"worth about {worth:.3f} of the {lead:.4f} (the paper's about "
            f"{PAPER_TAB3_SLOPE * np.log2(PAPER_SHARE_TOKENS):.4f}, against its +0.0058){unexplained}; ")

    def at_equal() -> str:  # Table 12's ablation-budget rows (cpu-long)
        d = float(_one(_table(tables, "kv_sharing"), "kv_sharing.csv expert row", routing="expert")["share - cache"])
        run = lambda: _one(_table(tables, "budgets"), "the ablation run", model=labels["share"], budget="ablation")  # noqa: E731
        spent = _optional(lambda: f"{run()['tokens_m']:.4f}M tokens, ", "")
        text = f"at equal tokens ({spent}the ablation budget) sharing differs by {d:+.4f} (kv_sharing.csv)"
        if d <= 0:
            return text + ", ahead there too; "
        return (text + ", the paper's sign: sharing's standing improves with training, as from the paper's Table 12 "
                "(+0.0228 at 10B tokens) to its Table 3 (+0.0058 at 30B / 31B), and here crosses zero before the "
                "isoFLOP budget; ")

    token_text = _optional(tokens, "")
    if not np.isfinite(sd) or lead <= 3 * sd:
        noise = (f"the lead is {lead / sd:.1f}x the {labels['ec']} isoFLOP seed s.d. ({sd:.4f}, main.csv), within "
                 "the seed spread" if np.isfinite(sd) else f"one seed of {labels['ec']}, no seed s.d. to read the "
                                                           "lead against")
        return Verdict(False, measured, ("budget", f"{noise}; {token_text}needs: 2 seeds of both"))
    ec = _main(tables, labels["ec"])
    return Verdict(False, measured, ("scale", (
        f"sharing leads by {lead / sd:.0f}x the {labels['ec']} isoFLOP seed s.d. ({sd:.4f}, main.csv), so not seed "
        f"noise; {token_text}{_optional(at_equal, '')}the paper's +0.0058 is a balance of sharing's cost against the "
        f"tokens its saved FLOPs buy, and at {ec['tokens_m'] / ec['params_m']:.3f} tokens per non-embedding parameter "
        f"(the paper's MoR-3 {PAPER_TOKENS_PER_PARAM:.0f}) the book's small model gains far more per token; needs: "
        f"the pair where {labels['ec']}'s curve is as flat as the paper's ({PAPER_TAB3_SLOPE:.3f} nats per "
        "doubling), with the equal-token pair beside it")))


def _rises(values: dict[int, float]) -> bool:
    ordered = [values[k] for k in sorted(values)]
    return len(ordered) > 1 and all(a < b for a, b in zip(ordered, ordered[1:]))


@_judges("mor.tab3_fig5c.nll_rises_with_nr")
def _nll_rises_with_nr(tables, cfg) -> Verdict:
    if len(_recursions(cfg)) < 2:
        raise Missing("needs: MoR EC and Recursive at two or more Nr (the preset's extra_recursions)")
    series = {"MoR-EC isoFLOP": ("ec", "flops"), "MoR-EC equal tokens": ("ec", "tokens"),
              "Recursive isoFLOP": ("rec", "flops")}
    found = {name: {nr: float(_main(tables, _labels(cfg, nr)[kind], budget)["nll"]) for nr in _recursions(cfg)}
             for name, (kind, budget) in series.items()}
    ok = {name: _rises(v) for name, v in found.items()}
    measured = "; ".join(f"{name}: " + " / ".join(f"Nr={nr} {v:.4f}" for nr, v in vals.items())
                         + ("" if ok[name] else " (fails)") for name, vals in found.items())
    held = all(ok.values())
    if held:
        return Verdict(True, measured)
    fails = ", ".join(n for n, good in ok.items() if not good)
    holds = ", ".join(n for n, good in ok.items() if good) or "none"
    tokens = ("; the MoR order fails at equal tokens too, so the extra isoFLOP tokens of one Nr do not explain it"
              if not ok["MoR-EC equal tokens"] else "")
    noise = {nr: _seed_std(tables, _labels(cfg, nr)["ec"], np.nan) for nr in _recursions(cfg)}
    spread = max((v for v in noise.values() if np.isfinite(v)), default=np.nan)
    mor = found["MoR-EC isoFLOP"]
    worst = max(((a, b) for a in mor for b in mor if a < b), key=lambda p: mor[p[0]] - mor[p[1]])
    gap = mor[worst[0]] - mor[worst[1]]
    if ok["Recursive isoFLOP"] and np.isfinite(spread) and gap > 3 * spread:
        return Verdict(False, measured, (
            "disagrees with the paper", f"MoR-{worst[1]} EC leads MoR-{worst[0]} by {gap:.4f} at equal FLOPs, "
                                        f"{gap / spread:.0f}x the MoR EC seed s.d. ({spread:.4f}, main.csv)"
                                        f"{tokens}, while the fixed-depth Recursive models keep the paper's order, so "
                                        "fewer unique parameters do cost the shared block here: the reversal is "
                                        "MoR's own, beyond seed noise at this scale"))
    return Verdict(False, measured, ("budget", f"the order fails for {fails} and holds for {holds}{tokens}; needs: "
                                               "MoR-2/3/4 EC and Recursive-2/3/4 with 2 seeds each"))


# ---------------------------------------------------------------------------------------------------- Fig. 3, Table 7


def _sweep(tables, cfg) -> pd.DataFrame:
    """budget_flops x {mor, rec, vanilla} NLL (first seed)."""
    labels = _labels(cfg)
    wide = _table(tables, "budget_sweep").pivot_table(index="budget_flops", columns="label", values="nll")
    missing = [lab for lab in (labels["ec"], labels["rec"], "Vanilla") if lab not in wide]
    if missing:
        raise Missing(f"needs: budget_sweep.csv rows of {missing}")
    return wide.rename(columns={labels["ec"]: "mor", labels["rec"]: "rec", "Vanilla": "vanilla"})


@_judges("mor.fig3.mor_beats_recursive_every_budget")
def _fig3_recursive(tables, cfg) -> Verdict:
    wide = _sweep(tables, cfg)
    behind = wide[wide["mor"] >= wide["rec"]]
    measured = "; ".join(f"{b:.3g} FLOPs: MoR {r.mor:.4f} vs Recursive {r.rec:.4f}" for b, r in wide.iterrows())
    if len(behind) == 0:
        return Verdict(True, measured)
    b = behind.index[0]
    gap = behind.loc[b, "mor"] - behind.loc[b, "rec"]
    return Verdict(False, measured, ("budget", f"MoR trails Recursive by {gap:.4f} at {b:.3g} FLOPs with one seed per "
                                               "budget; needs: 2 seeds per budget"))


def _vanilla_size(tables) -> float:
    """The Fig. 3 vanilla model's non-embedding parameters (M): what the paper's size-bound statements are read at."""
    sweep = _table(tables, "budget_sweep")
    return float(sweep.loc[sweep["label"] == "Vanilla", "params_m"].max())


@_judges("mor.fig3.mor_matches_or_beats_vanilla")
def _fig3_vanilla(tables, cfg) -> Verdict:
    wide = _sweep(tables, cfg)
    d = wide["mor"] - wide["vanilla"]
    measured = "MoR - vanilla: " + ", ".join(f"{v:+.4f} ({b:.3g})" for b, v in d.items())
    within = bool((d <= 0.0390).all())
    vanilla_m = _vanilla_size(tables)
    if not vanilla_m >= PAPER_MATCH_SIZE_M:
        return Verdict("not testable at this scale", measured + (
            f" ({'within' if within else 'not within'} the paper's 'matches' margin 0.0390 at every budget); the "
            f"paper states it for models above 360M ({PAPER_MATCH_SIZE_M:.0f}M non-embedding) and has MoR behind "
            f"vanilla at 135M; the book's vanilla has {vanilla_m:.1f}M"))
    if within:
        return Verdict(True, measured)
    return Verdict(False, measured, ("budget", f"MoR trails vanilla by up to {d.max():.4f} at {vanilla_m:.0f}M "
                                               "non-embedding parameters; needs: more seeds and budgets"))


@_judges("mor.tab7.recursive_behind_vanilla")
def _recursive_behind_vanilla(tables, cfg) -> Verdict:
    wide = _sweep(tables, cfg).sort_index()
    d = wide["rec"] - wide["vanilla"]
    measured = "Recursive - vanilla: " + ", ".join(f"{v:+.4f} ({b:.3g})" for b, v in d.items())
    if bool((d > 0).all()):
        return Verdict(True, measured)
    b = d[d <= 0].index[0]
    sweep = _table(tables, "budget_sweep")
    vanilla = sweep[(sweep["label"] == "Vanilla") & (sweep["budget_flops"] == b)].iloc[0]
    noise = _optional(lambda: f"a lead of {-d[b]:.4f} is {-d[b] / _seed_std(tables, 'Vanilla'):.2f}x vanilla's and "
                              f"{-d[b] / _seed_std(tables, _labels(cfg)['rec']):.2f}x Recursive's isoFLOP seed std "
                              "(main.csv), one seed per budget; ", "one seed per budget; ")
    return Verdict(False, measured, (
        "budget", f"at {b:.3g} FLOPs vanilla sees {vanilla['tokens_m'] / vanilla['params_m']:.4f} tokens per "
                  f"parameter (Table 7's fewest: 0.4) and both models sit near the initial plateau (vanilla "
                  f"{wide.loc[b, 'vanilla']:.4f}); " + noise + "needs: 2 seeds per budget and budgets x4-x16"))


@_judges("mor.fig3.mor_behind_vanilla_smallest")
def _fig3_behind_smallest(tables, cfg) -> Verdict:
    wide = _sweep(tables, cfg)
    d = wide["mor"] - wide["vanilla"]
    measured = "MoR - vanilla: " + ", ".join(f"{v:+.4f} ({b:.3g})" for b, v in d.items())
    vanilla_m = _vanilla_size(tables)
    if not vanilla_m < PAPER_SMALLEST_M:  # the paper's own size or larger: judged as stated
        return Verdict(bool((d > 0).all()), measured, ("budget", f"MoR leads vanilla at {vanilla_m:.0f}M "
                                                                 "non-embedding parameters; needs: more seeds"))
    sweep = _table(tables, "budget_sweep")
    per_param = {label: rows["tokens_m"] / rows["params_m"] for label, rows in sweep.groupby("label")}
    vanilla, mor = per_param["Vanilla"], per_param[_labels(cfg)["ec"]]
    return Verdict("not testable at this scale", measured + (
        f"; the paper states it for its 135M size ({PAPER_SMALLEST_M:.0f}M non-embedding), where MoR trails 'likely "
        f"due to a recursive capacity bottleneck', and has the gap close with size; the book's vanilla has "
        f"{vanilla_m:.1f}M and sees {vanilla.min():.4f}-{vanilla.max():.4f} tokens per non-embedding parameter "
        f"(the paper's 135M vanilla 61-503), MoR {mor.min():.4f}-{mor.max():.4f}"))


@_judges("mor.tab3.more_tokens_isoflop")
def _more_tokens(tables, cfg) -> Verdict:
    vanilla = float(_main(tables, "Vanilla")["tokens_m"])
    tokens = {nr: float(_main(tables, _labels(cfg, nr)["ec"])["tokens_m"]) for nr in _recursions(cfg)}
    held = all(t > vanilla for t in tokens.values())
    measured = f"Vanilla {vanilla:.4f}M tokens; " + "; ".join(
        f"MoR-{nr} EC {t:.4f}M ({t / vanilla:.2f}x)" for nr, t in tokens.items()) + " (paper 1.35 / 1.50 / 1.50x)"
    if held:
        return Verdict(True, measured)
    flops = {nr: float(_main(tables, _labels(cfg, nr)["ec"])["flops_per_token_m"]) for nr in tokens}
    vanilla_flops = float(_main(tables, "Vanilla")["flops_per_token_m"])
    return Verdict(False, measured, (
        "setup", f"forward FLOPs per token: vanilla {vanilla_flops:.2f}M vs " + ", ".join(
            f"MoR-{nr} {f:.2f}M" for nr, f in flops.items()) + "; a MoR model that costs vanilla's FLOPs per token "
        "gets no extra tokens: check the capacity schedule against App. C"))


@_judges("mor.tab7.advantage_shrinks_with_budget")
def _advantage_shrinks(tables, cfg) -> Verdict:
    wide = _sweep(tables, cfg).sort_index()
    d = wide["mor"] - wide["vanilla"]
    measured = "d = MoR - vanilla: " + ", ".join(f"{v:+.4f} ({b:.3g})" for b, v in d.items())
    if len(d) < 2:
        raise Missing("needs: budget_sweep.csv at two or more budgets")
    if bool((np.diff(d.to_numpy()) > 0).all()):
        return Verdict(True, measured)
    sweep = _table(tables, "budget_sweep")
    vanilla = sweep[sweep["label"] == "Vanilla"].sort_values("budget_flops")
    per_param = vanilla["tokens_m"] / vanilla["params_m"]
    (v0, v1), (m0, m1) = wide["vanilla"].iloc[:2], wide["mor"].iloc[:2]
    return Verdict(False, measured, (
        "budget", f"every budget ({per_param.min():.4f}-{per_param.max():.4f} vanilla tokens per parameter) lies below "
                  f"the paper's whole range (0.4-503), on the initial loss plateau: vanilla moves only {v0:.4f} -> "
                  f"{v1:.4f} between the two lowest budgets while MoR drops {m0 - m1:.4f}, so the smallest budget "
                  "measures who leaves the plateau first; needs: budgets x4-x16 (a cpu-long profile)"))


# ---------------------------------------------------------------------------------------------------- Fig. 4a


def _mor_ec_rows(speed: pd.DataFrame) -> pd.DataFrame:
    """throughput.csv's MoR expert-choice rows (recursion-wise caching): "MoR EC" at the main Nr, "MoR-<Nr> EC"."""
    return speed[speed["model"].str.fullmatch(r"MoR(-\d+)? EC")]


def _speed_rounds(speed: pd.DataFrame) -> int:
    """How many paired rounds throughput.csv timed (Missing for a table that does not say)."""
    if "rounds" not in speed.columns:
        raise Missing("needs: throughput.csv with its number of paired rounds (column `rounds`): the spread of an "
                      "unknown number of rounds cannot be read as an interval")
    return int(speed["rounds"].min())


def _rounds_text(rounds: int) -> str:
    """The [min, max] of n paired rounds holds their median with 1 - 2^(1 - n) (rlib.rounds' interval at 5 rounds)."""
    return (f"median [min, max] of {rounds} paired rounds, an interval that holds the median with "
            f"{1 - 2.0 ** (1 - rounds):.1%}")


def _layer_passes(cfg: MoRConfig, nr: int, depth: float) -> float:
    """A Middle-Cycle MoR's layer passes per token over vanilla's: the unique first and last layers plus the shared
    block of (L - 2) / Nr layers `depth` times on average."""
    return (2 + (cfg.n_layers - 2) / nr * depth) / cfg.n_layers


def _row_nr(row, cfg: MoRConfig) -> int:
    return int(row.nr) if hasattr(row, "nr") and row.nr > 0 else cfg.n_recursions


@_judges("mor.fig4a.throughput")
def _throughput(tables, cfg) -> Verdict:
    speed = _table(tables, "throughput")
    mor = _mor_ec_rows(speed)
    if len(mor) == 0:
        raise Missing("needs: throughput.csv rows of MoR EC")
    if not {"speedup_lo", "speedup_hi"} <= set(speed.columns):
        raise Missing("needs: the spread of the paired rounds (throughput.csv columns speedup_lo / speedup_hi): a "
                      "single ratio near 1 cannot tell a speed-up from the noise of a shared CPU")
    rounds = _speed_rounds(speed)
    measured = "; ".join(f"{r.model} {r.setting} (batch {r.max_batch}): {r.speedup_vs_vanilla:.3f}x "
                         f"[{r.speedup_lo:.3f}, {r.speedup_hi:.3f}]"
                         for r in speed[speed["model"] != "Vanilla"].itertuples())
    measured += f" ({_rounds_text(rounds)})"
    if not decides(rounds):
        return Verdict("not testable at this scale", f"{measured}; {too_few(rounds)} (throughput_table's repeats)")
    if bool((mor["speedup_lo"] > 1).all()):
        return Verdict(True, measured)
    below = mor[mor["speedup_hi"] < 1]
    if below.empty:  # every interval reaches above 1, and one of them contains 1
        open_ = mor[mor["speedup_lo"] <= 1]
        spans = ", ".join(f"{r.model} at {r.setting} ({r.speedup_lo:.3f}-{r.speedup_hi:.3f}x)"
                          for r in open_.itertuples())
        return Verdict("not testable at this scale", measured + (
            f"; the speed-up's interval contains 1 for {spans}: over {rounds} paired rounds the timing noise of a "
            "shared CPU cannot tell a speed-up from none (needs: more rounds)"))
    slow = "; ".join(f"{r.model} at {r.setting} {r.speedup_vs_vanilla:.3f}x [{r.speedup_lo:.3f}, {r.speedup_hi:.3f}]"
                     + (f" with {_layer_passes(cfg, _row_nr(r, cfg), r.mean_depth):.2f}x vanilla's layer passes "
                        f"(mean depth {r.mean_depth:.3f} of {_row_nr(r, cfg)})" if hasattr(r, "mean_depth") else "")
                     for r in below.itertuples())

    def recursive() -> str:
        r = _one(speed, "throughput.csv Recursive at B", model="Recursive", setting="B")
        return (f"; the Recursive model, with vanilla's FLOPs and every layer pass, runs at "
                f"{r['speedup_vs_vanilla']:.3f}x [{r['speedup_lo']:.3f}, {r['speedup_hi']:.3f}] through the "
                "depth-wise engine")

    rec = _optional(recursive, "")
    return Verdict(False, measured, (
        "scale", f"slower than vanilla in every one of {rounds} paired rounds: {slow}{rec}. Fewer layer passes per "
                 f"token do not make a d={cfg.d_model} model decode faster on CPU, so its decode step is bound by "
                 "per-pass overhead, not by the KV memory and IO that depth-wise batching and early exits save "
                 "(inferred); needs: the same engines on a GPU at B = 32 and 42 / 48 / 51"))


@_judges("mor.fig4a.throughput_rises_with_nr")
def _throughput_rises(tables, cfg) -> Verdict:
    speed = _table(tables, "throughput")
    if "nr" not in speed.columns:
        raise Missing("needs: throughput.csv with each row's Nr (written since 2026-12-05) and MoR EC at two or more "
                      "Nr (the preset's extra_recursions)")
    if not {"speedup_lo", "speedup_hi", "mean_depth"} <= set(speed.columns):
        raise Missing("needs: throughput.csv with the paired rounds' spread (speedup_lo, speedup_hi) and mean_depth")
    mor = _mor_ec_rows(speed)
    if mor["nr"].nunique() < 2:
        raise Missing(f"needs: MoR EC throughput at two or more Nr (this table has Nr {sorted(mor['nr'].unique())}; "
                      "the preset's extra_recursions add them)")
    rounds = _speed_rounds(speed)
    parts, falls, overlaps, passing, same_batch = [], [], [], [], True
    for setting, rows in mor.sort_values("nr").groupby("setting", sort=False):
        steps = list(zip(rows.iloc[:-1].itertuples(), rows.iloc[1:].itertuples()))
        ok = all(high.speedup_lo > low.speedup_hi for low, high in steps)
        fell = any(high.speedup_hi < low.speedup_lo for low, high in steps)
        parts.append(f"{setting}: " + " < ".join(f"Nr {r.nr} {r.speedup_vs_vanilla:.3f}x [{r.speedup_lo:.3f}, "
                                                 f"{r.speedup_hi:.3f}] (depth {r.mean_depth:.2f})"
                                                 for r in rows.itertuples())
                     + ("" if ok else " (falls)" if fell else " (overlap)"))
        passing += [setting] if ok else []
        for low, high in steps:
            move = (f"at {setting} Nr {low.nr} -> {high.nr} moves the median {low.speedup_vs_vanilla:.3f}x -> "
                    f"{high.speedup_vs_vanilla:.3f}x with the batch {low.max_batch} -> {high.max_batch} and the layer "
                    f"passes {_layer_passes(cfg, low.nr, low.mean_depth):.2f}x -> "
                    f"{_layer_passes(cfg, high.nr, high.mean_depth):.2f}x vanilla's")
            if high.speedup_hi < low.speedup_lo:  # the deeper model slower in its fastest round: decided against
                same_batch &= low.max_batch == high.max_batch
                falls.append(f"{move}, Nr {high.nr}'s fastest round {high.speedup_hi:.3f} below Nr {low.nr}'s slowest "
                             f"{low.speedup_lo:.3f}")
            elif not high.speedup_lo > low.speedup_hi:
                overlaps.append(f"{move}, Nr {high.nr}'s rounds {high.speedup_lo:.3f}-{high.speedup_hi:.3f} "
                                f"overlapping Nr {low.nr}'s {low.speedup_lo:.3f}-{low.speedup_hi:.3f}")
    measured = "; ".join(parts) + f" ({_rounds_text(rounds)})"
    if not decides(rounds):
        return Verdict("not testable at this scale", f"{measured}; {too_few(rounds)} (throughput_table's repeats)")
    if not falls and not overlaps:
        return Verdict(True, measured)
    if not falls:
        return Verdict("not testable at this scale", measured + "; " + "; ".join(overlaps) + (
            f": the intervals overlap, so {rounds} paired rounds cannot order the speed-ups (needs: more rounds)"))
    gained = ("at an unchanged batch the deeper MoR is slower" if same_batch else
              "the larger batch the deeper MoR's cache admits does not pay for it")
    return Verdict(False, measured, (
        "scale", "; ".join(falls) + (f"; it holds at {', '.join(passing)}" if passing else "") + ". The paper's "
                 "mechanism: a deeper MoR exits more tokens early and its smaller cache admits a larger batch. Here "
                 f"{gained}: on CPU a d={cfg.d_model} model's decode step is bound by per-pass overhead rather than KV "
                 "memory (inferred); needs: the same engines on a GPU at B = 32 and B = Max"))


# ---------------------------------------------------------------------------------------------------- Table 8


def _strategies(tables) -> pd.Series:
    share = _table(tables, "sharing")
    rec = share[share["nr"] > 0]
    if len(rec) < 2:
        raise Missing("needs: two or more sharing strategies in sharing.csv")
    return rec.set_index("sharing")["nll"]


def _plateau(tables, cfg) -> tuple[str, str]:
    """The diagnosis of the sharing-strategy claims: every run still sits near vanilla on the ablation budget."""
    nll = _strategies(tables)
    vanilla = _one(_table(tables, "sharing"), "sharing.csv Vanilla row", label="Vanilla")["nll"]
    spread = nll.max() - nll.min()
    steps = _optional(lambda: f"{_budget_steps(tables, 'ablation')} steps", "the ablation budget")
    noise = _optional(lambda: f" (about {spread / _seed_std(tables, _labels(cfg)['rec']):.0f}x the "
                              "Recursive seed std)", "")
    return ("budget", f"every strategy is trained for {steps} and sits within {(nll - vanilla).abs().max():.2f} of "
                      f"vanilla ({vanilla:.4f}), on the initial plateau, where the {spread:.2f} spread{noise} ranks "
                      "how fast each layer order leaves it rather than converged capacity; needs: the strategies' "
                      "learning curves at >= 10x tokens, 2 seeds")


def _middle_cycle_within(tables, cfg, tol: float, what: str) -> Verdict:
    nll = _strategies(tables)
    if "middle_cycle" not in nll.index:
        raise Missing("needs: the middle_cycle row of sharing.csv")
    held = bool(nll["middle_cycle"] <= nll.min() + tol)
    measured = ("; ".join(f"{k}: {v:.4f}" for k, v in nll.sort_values().items())
                + f"; M-Cyc {nll['middle_cycle'] - nll.min():+.4f} from the best; "
                + (f"{what} {tol:.4f}" if tol else what))
    return Verdict(held, measured, None if held else _plateau(tables, cfg))


@_judges("mor.fig4b.middle_cycle_best")
def _middle_cycle_best(tables, cfg) -> Verdict:
    return _middle_cycle_within(tables, cfg, 0.0, "strict (the paper's ordering at Nr=3)")


@_judges("mor.ours.middle_cycle_tied_best")
def _middle_cycle_tied(tables, cfg) -> Verdict:
    return _middle_cycle_within(tables, cfg, max(_seed_std(tables, _labels(cfg)["rec"], 0.0), 0.01), "tolerance")


@_judges("mor.tab8.sequence_worst_cycle_family_better")
def _sequence_worst(tables, cfg) -> Verdict:
    nll = _strategies(tables)
    need = ["cycle", "sequence", "middle_cycle", "middle_sequence"]
    if any(s not in nll.index for s in need):
        raise Missing("needs: all four sharing strategies in sharing.csv")
    checks = {"Sequence worst": nll["sequence"] == nll.max(), "M-Seq < Seq": nll["middle_sequence"] < nll["sequence"],
              "Cycle family better": min(nll["sequence"], nll["middle_sequence"]) > max(nll["cycle"],
                                                                                         nll["middle_cycle"])}
    measured = ("; ".join(f"{k}: {v:.4f}" for k, v in nll.sort_values().items()) + "; "
                + ", ".join(f"{k} {'holds' if v else 'fails'}" for k, v in checks.items()))
    held = all(checks.values())
    return Verdict(held, measured, None if held else _plateau(tables, cfg))


@_judges("mor.fig4b.reference_vanillas")
def _reference_vanillas(tables, cfg) -> Verdict:
    nll = _strategies(tables)
    vanilla = _one(_table(tables, "sharing"), "sharing.csv Vanilla row", label="Vanilla")["nll"]
    half = "holds" if vanilla < nll.min() else "fails"
    raise Missing(f"full vanilla {vanilla:.4f} vs strategies {nll.min():.4f}-{nll.max():.4f} ({half}); needs: a "
                  "parameter-matched vanilla (the Recursive model's unique depth) at the ablation budget")


# ---------------------------------------------------------------------------------------------------- Table 12


def _kv_diff(tables, routing: str) -> pd.Series:
    return _one(_table(tables, "kv_sharing"), f"kv_sharing.csv row {routing!r}", routing=routing)


@_judges("mor.tab12.kv_share_ec_vs_tc")
def _kv_share_ec_tc(tables, cfg) -> Verdict:
    ec, tc = _kv_diff(tables, "expert"), _kv_diff(tables, "token")
    held = bool(ec["share - cache"] > 0 and tc["share - cache"] < 0)
    measured = (f"share - cache: expert {ec['share - cache']:+.4f} ({ec['cache']:.4f} -> {ec['share']:.4f}), token "
                f"{tc['share - cache']:+.4f} ({tc['cache']:.4f} -> {tc['share']:.4f}); 1 seed each")
    if held:
        return Verdict(True, measured)
    acc = _optional(lambda: f"the EC router is not yet precise (sampling accuracy "
                            f"{_router(tables, 'expert', 'final design')['sampling_acc']:.3f} vs the paper's 0.992, "
                            "routers.csv), the regime in which App. A.3 expects shared context to help; ", "")
    tc_std = lambda: _seed_std(tables, _labels(cfg)["tc"])  # noqa: E731
    noise = _optional(lambda: f"the TC difference is {abs(tc['share - cache']) / tc_std():.1f}x TC's isoFLOP seed "
                              "std; ", "")
    return Verdict(False, measured, ("budget", acc + noise + "needs: >= 3 seeds of the four runs at >= 4x tokens with "
                                                             "sampling accuracy logged"))


@_judges("mor.tab12.kv_share_helps_vanilla")
def _kv_share_vanilla(tables, cfg) -> Verdict:
    table = _table(tables, "kv_sharing_vanilla")
    shared = table[table["kv_sharing"] != "none"]
    if shared.empty:
        raise Missing("needs: kv_sharing_vanilla.csv with shared rows (rlib.mor.vanilla_kv, cpu-long)")
    measured = "; ".join(f"{r.label}: {r.d_vs_none:+.4f} [{r.d_lo:+.4f}, {r.d_hi:+.4f}] over {r.seeds} paired seed"
                         f"{'s' if r.seeds > 1 else ''}" for r in shared.itertuples())
    worse = shared[~(shared["d_vs_none"] < 0)]
    if worse.empty:
        return Verdict(True, measured)
    reference = table[table["kv_sharing"] == "none"]
    per_param = (reference["tokens_m"] / reference["params_m"]).max()
    several = shared["seeds"].max() > 1
    consistent = worse[worse["d_lo"] > 0] if several else worse.iloc[:0]
    straddle = shared[(shared["d_lo"] < 0) & (shared["d_hi"] > 0)] if several else shared.iloc[:0]
    parts = [f"{len(worse)} of {len(shared)} shared rows are not below their reference"]
    parts += [f"{r.label} is above it in every paired seed ({r.d_lo:+.4f} to {r.d_hi:+.4f}), so not seed noise"
              for r in consistent.itertuples()]
    if len(straddle):
        parts.append(f"the paired differences of {', '.join(straddle.label)} straddle 0 (spans up to "
                     f"{(straddle['d_hi'] - straddle['d_lo']).max():.4f})")
    if not several:
        parts.append("one seed per row")
    return Verdict(False, measured, (
        "budget", "; ".join(parts) + f". Every model sees {per_param:.4f} tokens per parameter against about 32 in "
                  "the paper's 10B-token runs of 295-315M models: its reading of sharing as a regularizer needs "
                  "training long enough to overfit, which these runs are far from (inferred); needs: the study at "
                  ">= 16x the ablation tokens"))


@_judges("mor.tab12.kv_share_recursive_slight")
def _kv_share_recursive(tables, cfg) -> Verdict:
    rec = _kv_diff(tables, "none")
    d = float(rec["share - cache"])
    held = d <= 0.0156
    measured = (f"share - cache {d:+.4f} ({rec['cache']:.4f} -> {rec['share']:.4f}: sharing "
                f"{'improves' if d < 0 else 'degrades'}), 1 seed")
    if held:
        return Verdict(True, measured)
    noise = _optional(lambda: f"the single-seed difference is {abs(d) / _seed_std(tables, _labels(cfg)['rec']):.1f}x "
                              "the Recursive isoFLOP seed std, so one run cannot tell it from the paper's +0.0094; ",
                      "")
    return Verdict(False, measured, ("budget", noise + "needs: >= 3 seeds of both runs"))


# ---------------------------------------------------------------------------------------------------- routers


@_judges("mor.tab4.aux_loss_beats_aux_router")
def _aux_loss(tables, cfg) -> Verdict:
    loss, router = _router(tables, "expert", "final design"), _router(tables, "expert", "ec_aux_router")
    held = bool(loss["sampling_acc"] > router["sampling_acc"])
    measured = (f"aux loss: sampling {loss['sampling_acc']:.3f}, nll {loss['nll']:.4f}, dead {loss['dead_ratio']:.3f}; "
                f"aux router: {router['sampling_acc']:.3f}, {router['nll']:.4f}, dead {router['dead_ratio']:.3f}")
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


def _router_budget(tables, cfg) -> tuple[str, str]:
    steps = _optional(lambda: _budget_steps(tables, "ablation"), "a few")
    std = _seed_std(tables, _labels(cfg)["ec"], np.nan)
    return ("budget", f"every router row is one seed of {steps} steps (EC's isoFLOP seed std {std:.4f}); needs: the "
                      "rows' sampling accuracy and NLL against training steps up to >= 4x tokens")


def _sampling_cost(tables, cfg) -> str:
    """Evidence for a sampling accuracy below the paper's: what the causal decisions cost in NLL at isoFLOP."""
    def cost() -> str:
        ec = _main(tables, _labels(cfg)["ec"])
        return (f"the disagreement costs nothing at isoFLOP (main.csv {_labels(cfg)['ec']} causal nll "
                f"{ec['nll_causal']:.4f} vs top-k {ec['nll']:.4f}), which points to a BCE term still calibrating after "
                f"{_budget_steps(tables, 'ablation')} steps rather than a design failure; ")
    return _optional(cost, "") + "needs: sampling accuracy logged against training steps up to >= 4x tokens"


@_judges("mor.fig5b_tab10.ec_aux_loss_separation")
def _aux_separation(tables, cfg) -> Verdict:
    row = _router(tables, "expert", "final design")
    sampling = f"sampling accuracy {row['sampling_acc']:.3f} (steps 2-Nr; paper 0.992)"
    separation = tables.get("router_separation")
    if separation is None or len(separation) == 0:
        if row["sampling_acc"] < 0.991:  # one half of the conjunction already fails
            return Verdict(False, sampling + "; router_separation.csv not written",
                           ("budget", _sampling_cost(tables, cfg)))
        raise Missing("needs: router_separation.csv (the notebook's Fig. 5b cell, cpu-long)")
    panel = separation[separation["panel"] == "EC, aux loss"]
    if len(panel) == 0:
        raise Missing("needs: router_separation.csv rows of the panel 'EC, aux loss'")
    steps = "; ".join(f"step {int(r.step)}: kept median {r.selected_median:.3f} ({r.selected_near_1:.0%} >= 0.9), "
                      f"unkept median {r.unselected_median:.3f} ({r.unselected_near_0:.0%} <= 0.1), "
                      f"{r.misplaced:.1%} on the wrong side of 0.5" for r in panel.itertuples())
    concentrated = bool((panel["selected_median"] >= 0.9).all() and (panel["unselected_median"] <= 0.1).all())
    measured = f"{sampling}; {steps}"
    if row["sampling_acc"] >= 0.991 and concentrated:
        return Verdict(True, measured)
    if not concentrated:
        gap = float((panel["selected_median"] - panel["unselected_median"]).min())
        return Verdict(False, measured, (
            "budget", f"the kept and unkept medians lie {gap:.3f} apart at the closest step: after "
                      f"{_optional(lambda: _budget_steps(tables, 'ablation'), 'a few')} steps the BCE term has not "
                      "yet pushed the outputs to the ends of the scale; " + _sampling_cost(tables, cfg)))
    return Verdict(False, measured, ("budget", _sampling_cost(tables, cfg)))


@_judges("mor.appf3.linear_aux_loss_few_dead")
def _linear_few_dead(tables, cfg) -> Verdict:
    row = _router(tables, "expert", "final design")
    held = bool(row["sampling_acc"] >= 0.991 and row["dead_ratio"] <= 0.004)
    measured = (f"Linear + aux loss: dead ratio {row['dead_ratio']:.3f}, sampling accuracy {row['sampling_acc']:.3f} "
                "(steps 2-Nr)")
    if held:
        return Verdict(True, measured)
    if row["dead_ratio"] > 0.004:
        return Verdict(False, measured, _router_budget(tables, cfg))
    return Verdict(False, measured, ("budget", _sampling_cost(tables, cfg)))


@_judges("mor.tab4.sigmoid_beats_tanh")
def _sigmoid_tanh(tables, cfg) -> Verdict:
    sig, tanh = _router(tables, "expert", "final design"), _router(tables, "expert", "ec_tanh")
    held = bool(sig["nll"] < tanh["nll"] and sig["sampling_acc"] > tanh["sampling_acc"])
    measured = (f"sigmoid {sig['nll']:.4f} / sampling {sig['sampling_acc']:.3f} vs tanh {tanh['nll']:.4f} / "
                f"{tanh['sampling_acc']:.3f} (Delta NLL {tanh['nll'] - sig['nll']:+.4f})")
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


@_judges("mor.tab10.alpha1_collapse")
def _alpha1(tables, cfg) -> Verdict:
    one, final = _router(tables, "expert", "ec_alpha1"), _router(tables, "expert", "final design")
    collapse = 1 - 1 / cfg.n_recursions
    held = bool(abs(one["dead_ratio"] - collapse) <= 0.05)
    measured = (f"alpha 1.0: dead {one['dead_ratio']:.3f}, sampling {one['sampling_acc']:.3f}, nll {one['nll']:.4f} vs "
                f"alpha 0.1: dead {final['dead_ratio']:.3f}, {final['sampling_acc']:.3f}, {final['nll']:.4f} (NLL "
                f"{one['nll'] - final['nll']:+.4f}); collapse would be dead ~{collapse:.3f}")
    if held:
        return Verdict(True, measured)
    coef = MoRSpec.expert(cfg.n_recursions).aux_coef
    return Verdict(False, measured, (
        "setup", f"our alpha 1.0 row is a {one['arch']} router with aux coefficient {coef:g}, a cell the paper did not "
                 "run (its alpha 1.0 rows are MLP with coefficient 0.01, or the aux router); needs: Table 10's row "
                 "itself (aux loss 0.01, sigma, alpha 1.0, MLP) and its alpha 0.1 partner"))


def _rows(tables, routing: str, names: tuple[str, ...]) -> dict[str, pd.Series]:
    routers = _table(tables, "routers")
    missing = [n for n in names if not ((routers["routing"] == routing) & (routers["row"] == n)).any()]
    if missing:
        raise Missing(f"needs: routers.csv rows {missing} (new {routing}-choice router ablations at the ablation "
                      "budget; add them to ROUTER_ABLATIONS and the preset)")
    return {n: _router(tables, routing, n) for n in names}


@_judges("mor.tab4.ec_router_arch_and_zloss")
def _ec_arch(tables, cfg) -> Verdict:
    r = _rows(tables, "expert", ("final design", "ec_mlp", "ec_wide_mlp"))
    held = bool(r["final design"]["nll"] <= min(r["ec_mlp"]["nll"], r["ec_wide_mlp"]["nll"]))
    measured = "; ".join(f"{n}: nll {v['nll']:.4f}" for n, v in r.items())
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


@_judges("mor.tab4.ec_zloss_negligible")
def _ec_zloss(tables, cfg) -> Verdict:
    r = _rows(tables, "expert", ("final design", "ec_zloss"))
    lin, z = r["final design"], r["ec_zloss"]
    raise Missing(f"needs: few-shot scores of the ec_zloss and final-design router rows (the runs score the main runs' "
                  f"first seed only; at this scale those sit within chance on the next-line task, fewshot.csv); "
                  f"measured meanwhile: NLL {z['nll']:.4f} vs {lin['nll']:.4f} ({z['nll'] - lin['nll']:+.4f}), dead "
                  f"{z['dead_ratio']:.3f} vs {lin['dead_ratio']:.3f}")


@_judges("mor.ours.ec_zloss_nll")
def _ec_zloss_nll(tables, cfg) -> Verdict:
    r = _rows(tables, "expert", ("final design", "ec_zloss"))
    lin, z = r["final design"], r["ec_zloss"]
    held = bool(abs(z["nll"] - lin["nll"]) <= 0.0157 and z["dead_ratio"] <= lin["dead_ratio"])
    measured = (f"z-loss nll {z['nll']:.4f} vs {lin['nll']:.4f} ({z['nll'] - lin['nll']:+.4f}; paper +0.0157), dead "
                f"{z['dead_ratio']:.3f} vs {lin['dead_ratio']:.3f}")
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


@_judges("mor.tab11.tc_design_rows")
def _tc_design(tables, cfg) -> Verdict:
    r = _rows(tables, "token", ("final design", "tc_mlp", "tc_no_z", "tc_loss_free", "tc_sigmoid"))
    final, no_z = r["final design"], r["tc_no_z"]
    held = bool(r["tc_loss_free"]["nll"] < r["tc_sigmoid"]["nll"] and no_z["nll"] < final["nll"]
                and no_z["maxvio"] < final["maxvio"])
    measured = "; ".join(f"{n}: nll {v['nll']:.4f}, MaxVio {v['maxvio']:.3f}" for n, v in r.items())
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


@_judges("mor.tab4.tc_balancing_loss_vs_loss_free")
def _balancing(tables, cfg) -> Verdict:
    loss, free = _router(tables, "token", "final design"), _router(tables, "token", "tc_loss_free")
    gap = float(free["nll"] - loss["nll"])
    held = bool(loss["maxvio"] < free["maxvio"] and loss["entropy"] > free["entropy"] and abs(gap) <= 0.1158)
    measured = (f"balancing loss MaxVio {loss['maxvio']:.3f} / entropy {loss['entropy']:.3f} / nll {loss['nll']:.4f} "
                f"vs loss-free {free['maxvio']:.3f} / {free['entropy']:.3f} / {free['nll']:.4f} (NLL gap {gap:+.4f})")
    if held:
        return Verdict(True, measured)

    def unstable() -> str:
        labels = _labels(cfg)
        ec = _router(tables, "expert", "final design")["nll"]
        iso = float(_main(tables, labels["tc"])["nll"] - _main(tables, labels["ec"])["nll"])
        return (f"token-choice is the chapter's least stable model (isoFLOP seed std "
                f"{_seed_std(tables, labels['tc']):.4f} vs EC {_seed_std(tables, labels['ec']):.4f}), and the "
                f"balancing-loss ablation run ({loss['nll']:.4f}) trails EC by {loss['nll'] - ec:.2f} while at isoFLOP "
                f"the gap is {iso:.3f}; ")
    return Verdict(False, measured, ("budget", _optional(unstable, "") + "needs: >= 3 seeds of both rows at >= 4x "
                                                                         "tokens"))


@_judges("mor.apph.tc_load_imbalance")
def _tc_imbalance(tables, cfg) -> Verdict:
    trace = _table(tables, "load_trace")
    final = trace[(trace["row"] == "final design") & (trace["balance"] == "loss") & (trace["nr"] == cfg.n_recursions)
                  & trace["budget"].isin(["flops", "ablation"])]
    if len(final) == 0:
        raise Missing("needs: load_trace.csv rows of the token-choice final design at Nr = "
                      f"{cfg.n_recursions}")
    runs = load_imbalance_table(final)
    held = bool((runs["share_above"] >= 0.40).all() and (runs["end_maxvio"] >= 10 * PAPER_RANDOM_MAXVIO).all())
    measured = "; ".join(
        f"{r.label} {r.budget} seed {r.seed}: {r.share_above:.0%} of {r.steps} steps above {PAPER_FINAL_MAXVIO} "
        f"(last 10% median {r.late_maxvio:.3f}), ends at {r.end_maxvio:.3f} on held-out windows"
        for r in runs.itertuples()) + _chance_maxvio(runs, cfg)
    if held:
        return Verdict(True, measured)
    settled = "; ".join(
        f"{r.label} {r.budget} seed {r.seed}: "
        + (f"never settles at or below {PAPER_FINAL_MAXVIO}" if np.isnan(r.balanced_from_step)
           else f"balanced from step {int(r.balanced_from_step)} of {r.steps}")
        + f" ({r.tokens_per_step} tokens a step)" for r in runs.itertuples())
    return Verdict(False, measured, ("scale", f"{settled} (rolling median over 5% of the steps); the paper's 360M "
                                              "runs (Table 4's caption) train for far more steps, and its 'nearly "
                                              "half' is a share of those; needs: the trace at >= 4x steps "
                                              "(cpu-long's ablation-budget row)"))


def _chance_maxvio(runs: pd.DataFrame, cfg) -> str:
    """What a uniform random router reads by chance on a step's tokens and on the held-out tokens (ours: the floor
    of MaxVio at this token count, beside Table 11's trained random router)."""
    step_tokens, test_tokens = int(runs["tokens_per_step"].median()), cfg.eval_windows * cfg.seq_len
    (step_mean, step_q), (test_mean, test_q) = (uniform_maxvio(n, cfg.n_recursions) for n in (step_tokens,
                                                                                             test_tokens))
    return (f" (ours: a uniform random router reads MaxVio {step_mean:.3f}, 95th percentile {step_q:.3f}, on a "
            f"step's {step_tokens} tokens by chance, and {test_mean:.3f} / {test_q:.3f} on the {test_tokens} held-out "
            f"tokens; Table 11's random router {PAPER_RANDOM_MAXVIO} on 500 x 2K)")


# ---------------------------------------------------------------------------------------------------- Fig. 5c


@_judges("mor.fig5c.test_time_scaling")
def _test_time_scaling(tables, cfg) -> Verdict:
    depth = _table(tables, "depth_scaling")
    ec = depth[depth["label"].map(lambda s: bool(re.fullmatch(r"MoR-\d+ EC", s)))]
    if len(ec) == 0:
        raise Missing("needs: depth_scaling.csv rows of a MoR EC model")
    parts, held, noise = [], True, []
    for (label, seed), g in ec.groupby(["label", "seed"]):
        g = g.sort_values("depth_cap")
        nll = g["nll"].to_numpy()
        steps = np.diff(nll)
        falls = bool(np.all(steps < 0))
        held &= falls
        parts.append(f"{label} seed {seed}: " + " -> ".join(f"{v:.4f}" for v in nll) + ("" if falls else " (fails)"))
        step_se = g["step_se"].to_numpy()[1:] if "step_se" in g else np.full(len(steps), np.nan)
        noise += [f"{label} seed {seed} cap {d + 1} -> {d + 2}: {step:+.4f} = {step / se:+.2f} s.e."
                  for d, (step, se) in enumerate(zip(steps, step_se)) if step >= 0 and np.isfinite(se) and se > 0]
    measured = "; ".join(parts)
    if held:
        return Verdict(True, measured)
    if noise:  # the paired standard error of each failing step says whether the test could see a change that small
        measured += "; failing steps, paired over the test windows: " + "; ".join(noise)

    def gain(g: pd.DataFrame) -> float:
        g = g.sort_values("depth_cap")["nll"]
        return float(g.iloc[0] - g.iloc[-1])
    gains = {k: gain(g) for k, g in depth.groupby(["label", "seed"])}
    kinds = (("MoR EC", r"MoR-\d+ EC"), ("MoR TC", r"MoR-\d+ TC"), ("Recursive", r"Recursive-.*"))
    by_kind = {kind: [v for (lab, _), v in gains.items() if re.fullmatch(pattern, lab)] for kind, pattern in kinds}
    said = "; ".join(f"{kind} {min(v):+.4f} to {max(v):+.4f}" for kind, v in by_kind.items() if v)
    return Verdict(False, measured, (
        "budget", f"NLL gain from depth cap 1 to full depth per model and seed: {said}; MoR EC hardly uses its deeper "
                  "recursions at this budget, so depth use has not formed yet; needs: depth-cap NLL at checkpoints up "
                  "to >= 4x tokens with the mean gate per step, and mor.ours.gate_ablation"))


# ------------------------------------------------------------------------------------------- gate ablation (ours)


def _signed(values: pd.Series) -> str:
    return ", ".join(f"{v:+.4f}" for v in values)


@_judges("mor.ours.gate_ablation")
def _gate_ablation(tables, cfg) -> Verdict:
    gates = _table(tables, "gates")
    gates = gates.assign(tag=gates["tag"].fillna(""))  # an empty tag reads back from CSV as NaN
    wide = gates.pivot_table(index="seed", columns=["model", "tag"], values="nll")
    needed = {("Recursive", ""): "the Recursive baseline", ("MoR-EC", "ec_replace"): "MoR-EC with gating 'replace'"}
    missing = [what for key, what in needed.items() if key not in wide.columns]
    if missing:
        raise Missing(f"needs: {' and '.join(missing)} in gates.csv (gate_ablations of the config)")
    names = {("Recursive", ""): "Recursive", ("Recursive", "rec_gated"): "Recursive + gate",
             ("MoR-EC", ""): "MoR-EC a0.1", ("MoR-EC", "ec_alpha1"): "MoR-EC a1.0",
             ("MoR-EC", "ec_replace"): "MoR-EC no gate"}
    paired = wide.dropna(subset=list(needed))
    measured = "; ".join(f"seed {seed}: " + ", ".join(f"{names[key]} {row[key]:.4f}" for key in names
                                                      if key in row.index and np.isfinite(row[key]))
                         for seed, row in paired.iterrows())
    if len(paired) < 2:
        raise Missing(f"needs: >= 2 paired seeds of gates.csv (has {len(paired)}): {measured}")
    win = paired[("Recursive", "")] - paired[("MoR-EC", "ec_replace")]  # > 0: routing alone still beats Recursive
    held = bool((win > 0).all())
    if held:
        split = ""
        if ("Recursive", "rec_gated") in paired.columns and ("MoR-EC", "") in paired.columns:
            lead = paired[("Recursive", "")] - paired[("MoR-EC", "")]
            gate = paired[("Recursive", "")] - paired[("Recursive", "rec_gated")]
            matched = paired[("Recursive", "rec_gated")] - paired[("MoR-EC", "")]
            split = (f"; of MoR-EC's lead over Recursive ({_signed(lead)}) the gate alone gives {_signed(gate)} "
                     f"(Recursive - Recursive + gate) and routing at equal gates {_signed(matched)} "
                     "(Recursive + gate - MoR-EC)")
        return Verdict(True, measured + f"; Recursive - MoR-EC no gate = {_signed(win)}{split}")
    evidence = [f"without the gate MoR-EC is {'behind' if (win <= 0).all() else 'not ahead in every seed'} "
                f"(Recursive - no gate: {_signed(win)}); its router gets no language-model "
                "gradient then (only the aux loss trains it)"]
    conclusion = "the comparison cannot tell routing from the gate without a trained ungated router"
    if ("Recursive", "rec_gated") in paired.columns:
        gate_gain = paired[("Recursive", "")] - paired[("Recursive", "rec_gated")]
        evidence.append(f"the gate alone changes the Recursive model by {_signed(gate_gain)} "
                        "nats (Recursive - Recursive + gate; > 0 = the gate helps)")
        if (gate_gain > 0).all():
            conclusion = "the gate, which the Recursive baseline lacks, carries part of MoR's isoFLOP win"
        else:
            conclusion = ("the gate alone does not help the Recursive model, so the shortfall is routing without a "
                          "trained router, not the missing gate")
    return Verdict(False, measured, ("setup", "; ".join(evidence) + f": {conclusion}"))


# -------------------------------------------------------------------------------------------------- Table 14, Figs. 7-8


def _word_class(token: str) -> str:
    """"content" | "function" (a closed-class word) | "mark" (punctuation or a line break, which the paper counts
    among the function words: its examples are 'and', '—' and '\\n') | "other" (numbers, word pieces with digits)."""
    word = str(token).strip().lower()
    if word.isalpha():
        return "function" if word in FUNCTION_WORDS else "content"
    return "other" if any(c.isalnum() for c in str(token)) else "mark"


def _path_ordering(fits: pd.DataFrame, labels: dict[str, str]) -> tuple[dict[str, float], bool]:
    """Fig. 5a's slopes a per model key (mor, rec, vanilla) from `fit_optima`'s table, and whether MoR's is the
    largest."""
    from rlib.mor.compute_optimal import optimal_path

    slopes = optimal_path(fits).set_index("label")["slope"]
    a = {key: float(slopes[label]) for key, label in labels.items()}
    return a, a["mor"] > a["rec"] and a["mor"] > a["vanilla"]


@_judges("mor.fig5a.compute_optimal")
def _compute_optimal(tables, cfg) -> Verdict:
    from rlib.mor.compute_optimal import fit_optima

    grid = _table(tables, "compute_optimal")
    labels = {"mor": _labels(cfg)["ec"], "rec": _labels(cfg)["rec"], "vanilla": "Vanilla"}
    missing = [label for label in labels.values() if label not in set(grid["label"])]
    if missing:
        raise Missing(f"needs: compute_optimal.csv rows of {missing}")
    fits = fit_optima(grid)
    a, held = _path_ordering(fits, labels)
    widths = sorted(int(w) for w in grid["width"].unique())
    stars = {key: ", ".join(f"{f.n_star_m:.2f}M{'' if f.interior else ' (edge)'}" for f in
                            fits[fits["label"] == label].sort_values("budget_flops").itertuples())
             for key, label in labels.items()}
    measured = "; ".join(f"{labels[k]}: a = {a[k]:+.3f}, N* = {stars[k]}" for k in ("mor", "rec", "vanilla"))
    budgets = ", ".join(f"{b:.3g}" for b in sorted(grid["budget_flops"].unique()))
    measured += f" (widths {widths}, budgets {budgets} FLOPs)"
    spread = _largest_seed_std(tables, lambda label: label.isin(labels.values()))
    repeats = None
    if np.isfinite(spread) and spread > 0:
        rng = np.random.default_rng(0)
        kept = []
        for _ in range(200):
            noisy = grid.assign(nll=grid["nll"] + rng.normal(0, spread, len(grid)))
            try:
                kept.append(_path_ordering(fit_optima(noisy), labels)[1] == held)
            except (ValueError, np.linalg.LinAlgError):
                continue
        if kept:
            repeats = float(np.mean(kept))
            measured += f"; under the seed s.d. {spread:.4f} the outcome repeats in {repeats:.0%} of {len(kept)} refits"
    edge = fits[~fits["interior"]]
    if len(edge):
        below = int(((edge["n_star_m"] < grid["base_params_m"].min()) |
                     (~edge["convex"] & (edge["best_width"] == min(widths)))).sum())
        per_param = grid["tokens_per_param"]
        return Verdict(False, measured, (
            "scale", f"{len(edge)} of {len(fits)} fitted optima are not bracketed by the widths {widths} "
                     f"({below} below the smallest or at it with no minimum): at "
                     f"{per_param.min():.3g}-{per_param.max():.3g} tokens per base parameter (the paper's Table 7: "
                     "0.4-503) the grid does not locate N*(C), so the path's slope is extrapolated; needs: widths "
                     "that bracket every budget's optimum"))
    if held:
        return Verdict(True, measured)
    if repeats is None or repeats < 0.8:
        noise = ("no seed s.d. in main.csv" if repeats is None
                 else f"the outcome repeats in only {repeats:.0%} of refits")
        return Verdict(False, measured, ("budget", f"one seed per cell and {noise}: seed noise can reorder the slopes; "
                                                   "needs: >= 2 seeds per cell"))
    span = grid["budget_flops"].max() / grid["budget_flops"].min()
    return Verdict(False, measured, ("disagrees with the paper",
                                     f"the bracketed optima give MoR a slope no larger than the baselines' in "
                                     f"{repeats:.0%} of noisy refits, over budgets spanning {span:.0f}x "
                                     "(the paper's 8.25x) at sizes far below its 135M"))


def _run_size(row: pd.Series) -> str:
    return (f"the book's MoR EC model ({float(row['params_m']):.1f}M parameters) after {float(row['tokens_m']):.2f}M "
            "tokens")


@_judges("mor.fig1_tab14.depth_follows_semantics")
def _depth_semantics(tables, cfg) -> Verdict:
    tokens = _table(tables, "token_depths")
    deepest = int(tokens["depth"].max())
    classes = tokens.assign(cls=tokens["token"].map(_word_class), deep=tokens["depth"] == deepest)
    share = classes.groupby("cls")["deep"].agg(["mean", "count", "sum"])
    function_like = classes[classes["cls"].isin(("function", "mark"))]["deep"]
    if "content" not in share.index or function_like.empty:
        raise Missing("needs: token_depths.csv with both content and function tokens")
    content = share.loc["content"]
    held = bool(content["mean"] > function_like.mean())
    parts = [f"{name} {share.loc[cls, 'mean']:.3f} ({int(share.loc[cls, 'sum'])} of {int(share.loc[cls, 'count'])})"
             for cls, name in (("function", "function words"), ("mark", "punctuation and line breaks"))
             if cls in share.index]
    measured = (f"share at depth {deepest}: content words {content['mean']:.3f} ({int(content['sum'])} of "
                f"{int(content['count'])}) vs function tokens {function_like.mean():.3f} ({int(function_like.sum())} "
                f"of {len(function_like)}: {', '.join(parts)})")
    if held:
        return Verdict(True, measured)
    deep = classes[classes["deep"]]
    marks = int((deep["cls"] == "mark").sum())
    size = _optional(lambda: _run_size(_main(tables, _labels(cfg)["ec"])), "the book's small MoR EC model after its "
                                                                             "short run")
    return Verdict(False, measured, (
        "scale", f"{marks} of the {len(deep)} tokens the router sends to depth {deepest} are punctuation or line "
                 f"breaks, which the paper's example sends to two recursions, and content words reach it "
                 f"{content['mean']:.1%} of the time; the paper's example is a 360M MoR after 30B tokens (Table 14), "
                 f"these depths are {size}; needs: the same counts after a longer run"))


def _recursion_profiles(norms: pd.DataFrame, column: str) -> np.ndarray:
    """[Nr, block length] norms of the shared block's depths, one row per recursion."""
    counts = norms["block"].map(norms["block"].value_counts())
    shared = norms[counts > 1].sort_values("depth")
    period = shared["block"].nunique()
    if period == 0 or len(shared) % period:
        raise Missing("needs: kv_norms.csv of a model with a shared block")
    return shared[column].to_numpy().reshape(-1, period)


def _profile_correlation(norms: pd.DataFrame, column: str) -> float:
    prof = _recursion_profiles(norms, column)
    if len(prof) < 2 or prof.shape[1] < 2:
        raise Missing("needs: two or more recursions over a block of two or more layers")
    return float(np.mean([np.corrcoef(a, b)[0, 1] for a, b in zip(prof, prof[1:])]))


@_judges("mor.fig7.kv_norms")
def _kv_norms(tables, cfg) -> Verdict:
    norms = _table(tables, "kv_norms").sort_values("depth")
    rho = float(norms["depth"].rank().corr(norms["hidden"].rank()))
    corr = {kind: _profile_correlation(norms, kind) for kind in ("key", "value")}
    held = rho >= 0.8 and all(c >= 0.5 for c in corr.values())
    measured = (f"Spearman(depth, hidden norm) {rho:.3f}; consecutive-recursion norm-profile correlation: key "
                f"{corr['key']:.3f}, value {corr['value']:.3f}")
    return Verdict(held, measured, None if held else (
        "budget", f"after a short training run the pattern is weak (hidden {rho:.2f}, key {corr['key']:.2f}, value "
                  f"{corr['value']:.2f}); needs: the norms of a Recursive model trained >= 4x longer"))


@_judges("mor.fig8.kv_cosine")
def _kv_cosine(tables, cfg) -> Verdict:
    sim = _table(tables, "kv_similarity")
    sim = sim[sim["depth_a"] != sim["depth_b"]]
    band = {}
    for kind in ("key", "value"):
        k = sim[sim["kind"] == kind]
        same = k[k["block_a"] == k["block_b"]]["cosine"]
        other = k[k["block_a"] != k["block_b"]]["cosine"]
        if len(same) == 0 or len(other) == 0:
            raise Missing("needs: kv_similarity.csv of a model with a shared block")
        band[kind] = (float(same.mean()), float(other.mean()))
    held = all(s - o >= 0.1 for s, o in band.values()) and band["key"][0] > band["value"][0]
    measured = "; ".join(f"{kind}: same block {s:.3f} vs other blocks {o:.3f}" for kind, (s, o) in band.items())
    return Verdict(held, measured, None if held else (
        "budget", f"band contrast key {band['key'][0] - band['key'][1]:.3f}, value "
                  f"{band['value'][0] - band['value'][1]:.3f}, key band minus value band "
                  f"{band['key'][0] - band['value'][0]:+.3f}; needs: the matrices of a Recursive model trained >= 4x "
                  "longer"))


# ---------------------------------------------------------------------------------------------------- Table 2


@_judges("mor.tab2.kv_memory")
def _kv_memory(tables, cfg) -> Verdict:
    kv = _table(tables, "kv_bytes")
    routed = kv[kv["model"] != kv["model"].iloc[0]]
    if len(routed) == 0:
        raise Missing("needs: kv_bytes.csv rows of the routed models")
    err = (routed["measured_ratio"] - routed["predicted_ratio"]).abs()
    tol = 1.5 * cfg.n_recursions / cfg.seq_len  # int(c_r T) rounds down by < 1 token per recursion
    held = bool((err <= tol).all())
    measured = "; ".join(f"{r.model}: measured {r.measured_ratio:.4f} vs {r.predicted_ratio:.4f}"
                         for r in routed.itertuples()) + f"; tolerance {tol:.4f}"
    return Verdict(held, measured, None if held else (
        "setup", f"the largest deviation, {err.max():.4f}, exceeds what rounding c_r T to whole tokens explains "
                 f"({tol:.4f}): the cache holds entries the cost model does not count; needs: a per-slot byte count"))


@_judges("mor.s4_3.kv_share_fewer_flops")
def _kv_share_flops(tables, cfg) -> Verdict:
    kv = _table(tables, "kv_bytes")
    routed = kv[kv["model"] != kv["model"].iloc[0]]
    share, cache = routed[routed["kv"] == "share"], routed[routed["kv"] == "cache"]
    if share.empty or cache.empty:
        raise Missing("needs: kv_bytes.csv rows of the MoR-EC caching and sharing models")
    share, cache = share.iloc[0], cache.iloc[0]
    fewer = share["mflops_per_token"] < cache["mflops_per_token"]
    more_attention = share["attention_mflops_per_token"] > cache["attention_mflops_per_token"]
    smaller = share["bytes"] < cache["bytes"]
    measured = (f"executed MFLOPs per token, sharing vs caching: {share['mflops_per_token']:.3f} vs "
                f"{cache['mflops_per_token']:.3f} ({share['mflops_per_token'] / cache['mflops_per_token'] - 1:+.1%}), "
                f"attention {share['attention_mflops_per_token']:.3f} vs {cache['attention_mflops_per_token']:.3f}; "
                f"App. C's count {share['app_c_mflops_per_token']:.3f} vs {cache['app_c_mflops_per_token']:.3f}; KV "
                f"bytes {int(share['bytes']):,} vs {int(cache['bytes']):,}")
    held = bool(fewer and more_attention and smaller)
    if held:
        return Verdict(True, measured)
    if not fewer and more_attention:
        return Verdict(False, measured, (
            "scale", f"at T = {cfg.seq_len} and d = {cfg.d_model} the attention added by sharing outweighs the K/V "
                     "projections it saves; the footnote's trade depends on N_ctx against d (App. C's count: "
                     f"{share['app_c_mflops_per_token']:.3f} vs {cache['app_c_mflops_per_token']:.3f})"))
    return Verdict(False, measured, ("setup", f"{measured}: the sharing model does not run the computation App. C "
                                              "describes (K/V projections skipped, keys of every token attended)"))


@_judges("mor.tab4.tc_mlp_router_best")
def _tc_mlp_best(tables, cfg) -> Verdict:
    r = _rows(tables, "token", ("final design", "tc_mlp"))
    mlp, linear = r["tc_mlp"], r["final design"]
    held = bool(mlp["maxvio"] < linear["maxvio"])
    measured = (f"MaxVio MLP {mlp['maxvio']:.3f} vs Linear {linear['maxvio']:.3f} (paper 0.200 vs 0.492); NLL "
                f"{mlp['nll']:.4f} vs {linear['nll']:.4f} (paper 3.0239 vs 2.9974)")
    return Verdict(held, measured, None if held else _router_budget(tables, cfg))


@_judges("mor.ours.flops_cost_model")
def _flops_model(tables, cfg) -> Verdict:
    paper = _table(tables, "paper_budgets")
    off = (paper["formula_steps"] - paper["released_steps"]).abs()
    batch = paper.dropna(subset=["paper_max_batch"])
    held = bool((off <= 1).all() and (batch["formula_max_batch"] == batch["paper_max_batch"]).all())
    exact = int((off == 0).sum())
    measured = (f"steps exact for {exact} of {len(paper)} released 360M configs"
                + "".join(f"; {r.model} {r.formula_steps} vs {r.released_steps}"
                          for r in paper[off > 0].itertuples())
                + "; max batch " + " / ".join(f"{int(v)}" for v in batch["formula_max_batch"])
                + " vs " + " / ".join(f"{int(v)}" for v in batch["paper_max_batch"]))
    return Verdict(held, measured, None if held else (
        "setup", f"the formula misses a released step count by up to {int(off.max())} steps: the FLOPs accounting "
                 "differs from the paper's (App. C)"))


# ---------------------------------------------------------------------------------------------------- Table 13
PAPER_LARGEST_RELAX_GAIN = 0.0255  # Table 13: LoRA 2.8599 vs the baseline 2.8854, which the paper calls not substantial


@_judges("mor.tab13.relaxation")
def _relaxation(tables, cfg) -> Verdict:
    table = _table(tables, "relaxation")
    cache = table[(table["kv"] == "cache") & (table["relax"] != "none")]
    share = table[(table["kv"] == "share") & (table["relax"] == "adapt_prompt")]
    if cache.empty or table["delta"].isna().any():
        raise Missing("needs: relaxation.csv rows of the relaxed Recursive model and its plain baseline of the same KV "
                      "mode (the relaxations of the config: the cpu-long profile)")
    gains = {row.relax: -row.delta for row in cache.itertuples()}
    parts = [f"{relax} {-gain:+.4f}" for relax, gain in gains.items()]
    failing = {relax: gain for relax, gain in gains.items() if gain > PAPER_LARGEST_RELAX_GAIN}
    if share.empty:
        raise Missing("needs: relaxation.csv's KV-share + Adapt-P row beside the recursion-wise caching rows")
    delta = float(share["delta"].iloc[0])
    parts.append(f"KV share + adapt_prompt {delta:+.4f} vs the KV-share baseline")
    if -delta > PAPER_LARGEST_RELAX_GAIN:  # the paper's hoped-for benefit of prefixes under KV sharing, substantial
        failing["KV share + adapt_prompt"] = -delta
    measured = "nll - plain Recursive: " + "; ".join(parts) + f"; paper's largest gain {PAPER_LARGEST_RELAX_GAIN}"
    if not failing:
        return Verdict(True, measured)
    worst = max(failing, key=failing.get)
    spread = _largest_seed_std(tables, lambda label: label.str.startswith("Recursive-"))
    noise = (f"the Recursive model's seed s.d. at the isoFLOP budget is {spread:.4f}" if np.isfinite(spread)
             else "one seed, no seed spread in main.csv")
    if np.isfinite(spread) and failing[worst] <= 2 * spread:
        return Verdict(False, measured, ("budget", f"{worst} gains {failing[worst]:.4f}, within 2 seed s.d. ({noise}): "
                                                   "one seed cannot tell it from the paper's 'not substantial'"))
    return Verdict(False, measured, ("disagrees with the paper", f"{worst} gains {failing[worst]:.4f} ({noise})"))


# ---------------------------------------------------------------------------------------------------- Table 9


def _uptrain(tables) -> pd.DataFrame:
    up = _table(tables, "uptraining")
    parts = up["run"].str.split("-", n=2, expand=True).reindex(columns=[0, 1, 2])
    return up.assign(kind=parts[0], sharing=parts[1], init=parts[2])


def _uptrain_noise(up: pd.DataFrame, margin: float) -> tuple[str, str]:
    se = float(up["nll_se"].median())
    return ("budget", f"each run is one seed of {int(up['tokens'].iloc[0]):,} tokens; the failing margin {margin:.3f} "
                      f"is {margin / se:.1f}x the runs' median NLL standard error ({se:.3f}); needs: >= 3 seeds at "
                      ">= 10x tokens")


@_judges("mor.tab9.middle_best_uptraining")
def _middle_best(tables, cfg) -> Verdict:
    up = _uptrain(tables)
    rec = up[up["kind"] == "recursive"].set_index(["sharing", "init"])["nll"]
    reduced = up[up["kind"] == "reduced"]
    sharings = looping.SHARINGS
    inits = sorted(i for i in set(up["init"].dropna()) if all((s, i) in rec.index for s in sharings))
    if not inits:
        raise Missing("needs: an initialization up-trained under all four sharing strategies")
    held, parts, worst = True, [], 0.0
    for i in inits:
        middle = max(rec["middle_cycle", i], rec["middle_sequence", i])
        same_init = reduced[reduced["init"] == i]["nll"].tolist()
        rivals = [rec["cycle", i], rec["sequence", i], *same_init]
        ok = all(middle < v for v in rivals)
        held &= ok
        worst = max(worst, middle - min(rivals))
        parts.append(f"{SHORT[i]}: M-Cyc {rec['middle_cycle', i]:.3f}, M-Seq {rec['middle_sequence', i]:.3f}, "
                     f"Cyc {rec['cycle', i]:.3f}, Seq {rec['sequence', i]:.3f}"
                     + (f", loop 1 {', '.join(f'{v:.3f}' for v in same_init)}" if same_init else "")
                     + ("" if ok else " (fails)"))
    return Verdict(held, "; ".join(parts), None if held else _uptrain_noise(up, worst))


@_judges("mor.tab9.seq_step_beats_cyc_step")
def _seq_step(tables, cfg) -> Verdict:
    up = _uptrain(tables)
    rec = up[up["kind"] == "recursive"].set_index(["sharing", "init"])["nll"]
    if ("cycle", "stepwise") not in rec.index or ("sequence", "stepwise") not in rec.index:
        raise Missing("needs: Cycle and Sequence both up-trained with Step init")
    seq, cyc = float(rec["sequence", "stepwise"]), float(rec["cycle", "stepwise"])
    return Verdict(seq < cyc, f"Seq-Step {seq:.3f} vs Cyc-Step {cyc:.3f}",
                   None if seq < cyc else _uptrain_noise(up, seq - cyc))


# ---------------------------------------------------------------------------------------------------- the book's own


@_judges("mor.ours.decode_agreement")
def _decode_agreement(tables, cfg) -> Verdict:
    row = _table(tables, "decode_agreement").iloc[0]
    held = bool(row["depth_agreement"] >= 0.95)
    cost = row["nll_causal_decode"] - row["nll_topk"]
    measured = (f"same recursion depth token by token (cached causal decode vs top-k on the whole window): "
                f"{row['depth_agreement']:.1%}; NLL top-k {row['nll_topk']:.4f}, causal decode "
                f"{row['nll_causal_decode']:.4f}")
    if held:
        return Verdict(True, measured)
    acc = _optional(lambda: f"the per-step sampling accuracy is itself "
                            f"{_router(tables, 'expert', 'final design')['sampling_acc']:.3f} at the ablation budget "
                            "(routers.csv) and ", "")
    steps = _optional(lambda: f" after {_budget_steps(tables, 'flops', _labels(cfg)['ec'])} steps", "")
    return Verdict(False, measured, (
        "budget", f"{acc}the disagreement costs {cost:+.4f} NLL, so the router is under-calibrated{steps}, not "
                  "unusable; needs: agreement against training steps"))


def _fewshot_pairs(table: pd.DataFrame, pairs: list[tuple[str, str, str, str, float]]) -> Verdict:
    """Each (better, its budget, worse, its budget, the paper's gap in points): the few-shot average of `better` above
    `worse` by more than the s.e. of the difference (threshold ours), with the near-chance reading of the next line."""

    def average(label: str, budget: str) -> pd.Series:
        rows = table[table["budget"] == budget]
        return _one(rows, f"the few-shot average of {label} at budget {budget!r} (fewshot.csv)", label=label,
                    task="average")

    parts, failing = [], []
    for better, better_budget, worse, worse_budget, paper in pairs:
        a, b = average(better, better_budget), average(worse, worse_budget)
        gap, se = float(a["value"] - b["value"]), float(np.hypot(a["stderr"], b["stderr"]))
        name = better + (" (equal tokens)" if better_budget == "tokens" else "")
        parts.append(f"{name} {a['value']:.3f} vs {worse} {b['value']:.3f} ({gap:+.3f}, s.e. {se:.3f}; paper "
                     f"+{paper / 100:.3f})")
        failing += [] if gap > se else [f"{name} vs {worse}"]
    nextline = table[table["task"] == "book_nextline"]
    half = 1.96 * np.sqrt(0.25 * 0.75 / nextline["n"])
    near = bool(((nextline["value"] - 0.25).abs() <= half).all())
    measured = "; ".join(parts) + (f"; next line {nextline['value'].min():.3f}-{nextline['value'].max():.3f} over "
                                   f"{len(nextline)} models (chance 0.25 +- {half.max():.3f}, n "
                                   f"{int(nextline['n'].min())})")
    if not failing:
        return Verdict(True, measured)
    if near:
        return Verdict(False, measured, ("scale", "every model's next-line score is within the binomial interval of "
                                         "chance: at this scale the local tasks cannot rank the models"))
    paper_gaps = " and ".join(f"{p / 100:.3f}" for *_, p in pairs)
    return Verdict(False, measured, ("budget", f"the gap of {', '.join(failing)} is within one s.e. of "
                                     f"{int(nextline['n'].min())} items per task; the paper's gaps ({paper_gaps}) "
                                     "need thousands of items to resolve"))


@_judges("mor.tab3.fewshot_column")
def _fewshot_column(tables, cfg) -> Verdict:
    table = _table(tables, "fewshot")
    if 2 not in _recursions(cfg):
        raise Missing("needs: MoR-2 EC at the isoFLOP budget (add 2 to the preset's extra_recursions)")
    return _fewshot_pairs(table, [(_labels(cfg, 2)["ec"], "flops", "Vanilla", "flops", 43.1 - 42.3),
                                  (_labels(cfg)["ec"], "flops", _labels(cfg)["tc"], "flops", 42.6 - 40.0)])


@_judges("mor.tab3.fixed_tokens_mor2_accuracy")
def _fixed_tokens_accuracy(tables, cfg) -> Verdict:
    table = _table(tables, "fewshot")
    if 2 not in _recursions(cfg):
        raise Missing("needs: MoR-2 EC at both budgets (add 2 to the preset's extra_recursions)")
    mor2 = _labels(cfg, 2)
    return _fewshot_pairs(table, [(mor2["ec"], "tokens", "Vanilla", "flops", 42.9 - 42.3),
                                  (mor2["ec"], "tokens", mor2["rec"], "flops", 42.9 - 42.6)])
