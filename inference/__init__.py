"""What runs or talks to models: the judge's output contract, the task/aspect catalog and prompt
rendering (the judge's interface), model backends, the `Judge` and the scoring stage. It imports
only `spanjudge.core`."""

import spanjudge.core  # noqa: F401  (installs core's filters of harmless library messages before peft loads)
