"""spanjudge: distil an explainable NLG judge from a teacher ensemble, then judge with it.

The public API is what this module exports (`__all__`); everything else is reached through the
sub-packages (`spanjudge.inference`, `spanjudge.eval` ...) by those who need the lower levels:

    from spanjudge import Judge

    judge = Judge.from_pretrained("runs/train/smollm2_cpu_smoke/adapter")
    predictions = judge.predict([{"input": article, "output": summary}], task="summeval", aspect="relevance")
    predictions.system_score, predictions[0].score, predictions[0].errors
"""

# this module's own helpers are private by name: its public names are exactly __all__
import importlib as _importlib
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from spanjudge.core.errors import InputError, SpanjudgeError
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.judge_options import JudgeOptions
    from spanjudge.inference.judged import JudgedEvaluation
    from spanjudge.inference.predictions import PredictedError, Prediction, Predictions

# name -> the module that defines it, imported on first use: every `import spanjudge.core...` runs
# this file first, and the command line must not pay for torch and transformers to print its help
_EXPORTS = {
    "Judge": "spanjudge.inference.judge",
    "JudgedEvaluation": "spanjudge.inference.judged",
    "JudgeOptions": "spanjudge.inference.judge_options",
    "Predictions": "spanjudge.inference.predictions",
    "Prediction": "spanjudge.inference.predictions",
    "PredictedError": "spanjudge.inference.predictions",
    "SpanjudgeError": "spanjudge.core.errors",
    "InputError": "spanjudge.core.errors",
}
__all__ = [  # _EXPORTS' names, spelled out for linters and IDEs
    "InputError",
    "Judge",
    "JudgeOptions",
    "JudgedEvaluation",
    "PredictedError",
    "Prediction",
    "Predictions",
    "SpanjudgeError",
    "__version__",
]

try:
    __version__ = _version("spanjudge")
except _PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"


def __getattr__(name: str) -> _Any:
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'spanjudge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
