"""Chapter 01: converting a pretrained LM into a Recursive Transformer (Relaxed Recursive Transformers, paper 000,
Sec. 2.1-2.2, 3.1-3.4 and 3.6; Appendices D and F).

    config        RecursiveConfig (presets per profile), Variant (one uptraining run), variants(cfg)
    experiments   the run grid: build, evaluate, uptrain, evaluate; windows, evaluation and the teacher for chapter 02
    tables        Table F.1, Fig. 4's points, Table I.1's distillation rows, Table 2's data shift, loss curves
    claims        the chapter's ledger: each finding of the paper with its section, table or figure
    plots         Fig. 2 (layer mapping), Fig. 5 / F.1 / F.2 (loss curves), Fig. 4 (size vs quality)
    lr_sweep      how the profile's learning rate was chosen (validation split only)
    norm_seeds    Fig. F.1(b)'s norm weights of the Average init over seeds, paired by seed
                  (python -m rlib.recursive.norm_seeds)

The method itself, looping a pretrained model (sharing orders and initializations), is `rlib.looping`: chapters 02
and 03 use it too.
"""
