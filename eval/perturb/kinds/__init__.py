"""The benchmark kinds, one module each; `registry.BENCHMARKS` names them and `kind.get_kind` imports
one when it is used (see the `eval.perturb` package docstring for how to add a kind)."""
