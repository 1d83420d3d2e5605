"""Library messages that read like errors to a user but are not, silenced at their source.

Each filter matches one message exactly, so anything else those libraries say still shows:
- bitsandbytes (imported by peft whenever it is installed) probes the optional `kernels`
  package for a faster CPU 4-bit kernel when it is imported, and logs "Failed to load CPU
  gemm_4bit_forward ... No module named 'kernels'" when it is absent; it then uses its own
  kernel, and nothing is 4-bit unless QLoRA is asked for. Since transformers 5.25 requires
  `kernels`, the probe finds it, and offline (as every test and `make demo` runs) `kernels` logs
  "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes'" before the
  kernel it looks for is not found in the cache: the same probe, the same fallback.
- transformers deprecates `is_gradient_checkpointing`, which peft reads when it wraps a model:
  a FutureWarning between two libraries, about nothing spanjudge or its user does.
"""

from __future__ import annotations

import logging
import warnings

_GRADIENT_CHECKPOINTING = r"`is_gradient_checkpointing` is deprecated"


class _DropMessage(logging.Filter):
    """Drops one logger's records whose message starts with `prefix`."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


# logger name -> the filter of its one harmless message
_FILTERS = {
    "bitsandbytes.backends.cpu.ops": _DropMessage("Failed to load CPU gemm_4bit_forward from kernels-community"),
    "kernels._internals.hf_hub": _DropMessage(
        "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes'"
    ),
}


def quiet_harmless_library_messages() -> None:
    """Install the filters (idempotent); call before the libraries are imported."""
    for name, message_filter in _FILTERS.items():
        logger = logging.getLogger(name)
        if message_filter not in logger.filters:
            logger.addFilter(message_filter)
    warnings.filterwarnings("ignore", message=_GRADIENT_CHECKPOINTING, category=FutureWarning)
