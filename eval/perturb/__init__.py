"""Perturbation benchmarks (BENCHMARKS.md, seeds 000-003) and error-span metrics."""
