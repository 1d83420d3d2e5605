"""Meta-evaluation: how far a judge agrees with people, and how it holds up under perturbation.

cli.py          `spanjudge meta-eval`
meta_eval.py    the stage's functions: run_suite, run_benchmark, run_spans, open_judges, export_requests
compare.py      `spanjudge compare`: two results files of the same outputs (compare_cli.py, its command)
judging/        the judge-running plumbing the rooms below share: sets, judges, their stored judgments
correlation/    judges' scores against human scores (`--suite`)
spans/          judges' error spans against human spans (`--spans`), and the span sets' registry
perturb/        the perturbation benchmarks (`--benchmark`, `spanjudge perturb`)
distill/        the distillation study: teacher, student, judged held-out splits
"""
