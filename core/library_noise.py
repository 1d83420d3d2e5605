"""Library messages that read like errors to a user but are not, silenced at their source.

Each filter matches one message exactly, so anything else those libraries say still shows:
- bitsandbytes (imported by peft whenever it is installed) probes the optional `kernels`
  package for a faster CPU 4-bit kernel when it is imported, and logs "Failed to load CPU
  gemm_4bit_forward ... No module named 'kernels'" when it is absent; it then uses its own
  kernel, and nothing is 4-bit unless QLoRA is asked for.
- transformers deprecates `is_gradient_checkpointing`, which peft reads when it wraps a model:
  a FutureWarning between two libraries, about nothing spanjudge or its user does.
"""

from __future__ import annotations

import logging
import warnings

_BNB_LOGGER = "bitsandbytes.backends.cpu.ops"
_BNB_PROBE = "Failed to load CPU gemm_4bit_forward from kernels-community"
_GRADIENT_CHECKPOINTING = r"`is_gradient_checkpointing` is deprecated"


class _DropProbe(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BNB_PROBE)


_PROBE_FILTER = _DropProbe()


def quiet_harmless_library_messages() -> None:
    """Install the filters (idempotent); call before the libraries are imported."""
    logger = logging.getLogger(_BNB_LOGGER)
    if _PROBE_FILTER not in logger.filters:
        logger.addFilter(_PROBE_FILTER)
    warnings.filterwarnings("ignore", message=_GRADIENT_CHECKPOINTING, category=FutureWarning)
