"""Error-span sets: a judge's error spans against human ones (not perturbations).

    metrics.py    span P/R/F1 (exact, overlap as in the RotoWire shared task, token), the
                  mark-every-number baseline and `evaluate_spans`
    documents.py  `SpanDocument` / `GoldSpan`, what every span set loads into
    rotowire.py   the RotoWire accuracy set: the GSML gold parser and the box-score renderer
    sets.py       the registry of span sets (`SPAN_SETS`): each set's module ends in `SPAN_SET = SpanSetKind(...)`
    quintd.py     the quintd-1 set loader and its span set (quintd1, quintd1:dev, quintd1:test)
    factgenie.py  any factgenie campaign as a span set (factgenie:FOLDER)
    agreement.py  the quintd-1 paper's Pearson agreement, with input-bootstrap intervals
    judging.py    a judge's spans on held-out quintd-1 outputs, kept on disk (demo, bench)

`meta-eval --spans NAME[:ARGUMENT]` runs them (`evaluate.evaluate_span_set`).
"""
