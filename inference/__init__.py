"""The base layer: the judge's output contract, the task/aspect catalog, prompt rendering,
model backends and the `Judge`. It imports none of the other stages."""
