"""The registry of benchmark kinds: one line per kind in `BENCHMARKS`, one module per kind in `kinds/`.

A kind's module (`kinds/<name>.py`) defines `KIND = BenchmarkKind(...)` (`kind.py`): the datasets it is
built from, and its build, analyse, report and plots functions. Everything else (the CLI's
`--benchmark` choices, the demo config, the published-numbers file, the manifest reader)
takes the kind list from `KINDS`; modules are imported only when a kind is used (`kind.get_kind`), so
reading the list costs nothing, and this module imports no step. Another package adds a kind as an entry
point of the group `spanjudge.benchmarks` (`core.registry`). See the package docstring for how to add a kind.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry

# The registry: name -> its module's KIND
BENCHMARKS: Registry[object] = Registry(  # each entry a `kind.BenchmarkKind`, checked as it loads
    "benchmark kind",
    "spanjudge.benchmarks",
    {
        "dhp": "spanjudge.eval.perturb.kinds.dhp:KIND",  # 000: discernment of hierarchical perturbation
        "dual": "spanjudge.eval.perturb.kinds.dual:KIND",  # 001: dual perspective, error-injection chains
        "attacks": "spanjudge.eval.perturb.kinds.attacks:KIND",  # 002: aspect-targeted perturbation attacks
        "prompt": "spanjudge.eval.perturb.kinds.prompt:KIND",  # 003: a misleading expert rating in the prompt
    },
)
KINDS: tuple[str, ...] = BENCHMARKS.names()


def _check_kind(name: str) -> str:
    try:
        return BENCHMARKS.check(name)
    except InputError as error:
        raise ValueError(str(error)) from None


KindName = Annotated[str, AfterValidator(_check_kind)]
"""A benchmark kind in a pydantic model (config files, published numbers): one of `KINDS`."""
