"""The correlation meta-evaluation (`meta-eval --suite`): judges' scores against human scores.

coefficients.py  Pearson, Spearman and Kendall at the global, input and item levels
bootstrap.py     input-bootstrap intervals and the paired judge-vs-judge test
runner.py        one run: the suite's sets, each judge's scores, the correlations
reference.py     the published correlations the thesis tables give
report.py        results.json and report.md in the thesis layout
plots.py         the run's PNG plots
"""
