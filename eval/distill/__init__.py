"""The distillation study as a stage API: GPT-4's quintd-1 spans teach a small student, judged against the
humans' spans on held-out splits (`bench/distill_quintd.py` is its driver, `bench/distill_protocol.sh` runs
the protocol's runs).

    study    the run's settings (`StudySettings`), the students, and the protocol's rules
    phases   import, train, judge the held-out split, the result rows and the run's record
    report   recipes pooled over seeds and the markdown report, recomputable from the rows alone
"""
