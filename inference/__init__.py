"""What runs or talks to models: the engines (`backends/`), the judge's output contract (`contract/`)
and prompts, the judge runtime (`judge.py`, its options, its wiring to an engine, its requests,
probabilities and consensus) and the scoring stage (`score/`). It imports only `spanjudge.core`."""

import spanjudge.core  # noqa: F401  (installs core's filters of harmless library messages before peft loads)
