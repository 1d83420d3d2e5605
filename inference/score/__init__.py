"""The scoring stage: `spanjudge score`, `render`, `select` and `export` (the judge runtime they call lives
beside this package in `inference/`: `judge.py`, its options and wiring, the rows it reads in `requests.py`).

    stage        `score_file(ScoreSettings) -> ScoreRun`: requests in, results appended as each is final
    rows         the resumable results file: `ScoreRow`, its resume key, the checks before appending
    cli          the commands: they parse their options, call one function and print
    html         the self-contained HTML page of a results file
    interchange  results as xCOMET-style error_spans and as a factgenie campaign
    select       outputs chosen for people to annotate
"""
