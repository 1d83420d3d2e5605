"""Meta-evaluation: human-correlation sets, perturbation benchmarks and span metrics."""
