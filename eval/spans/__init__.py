"""Error-span sets: a judge's error spans against human ones (not perturbations).

    metrics.py    span P/R/F1 (exact, overlap as in the RotoWire shared task, token), the
                  mark-every-number baseline and `evaluate_spans`
    documents.py  `SpanDocument` / `GoldSpan`, what every span set loads into
    rotowire.py   the RotoWire accuracy set: the GSML gold parser and the box-score renderer
    quintd.py     the quintd-1 set loader
    agreement.py  the quintd-1 paper's Pearson agreement, with input-bootstrap intervals
    judging.py    a judge's spans on held-out quintd-1 outputs, kept on disk (demo, bench)

`meta-eval --spans rotowire|quintd1` runs them (`evaluate.evaluate_span_set`).
"""
