"""Chat-template rendering and prompt encoding, shared by every local model path.

Training (prompt/completion pairs), the transformers backend and the judge's "prompt"
API all render messages here, so a model meets at inference exactly the text it was
trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def render_chat(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
) -> str:
    """The model's chat template applied to `messages`, as text (special tokens included)."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt)
    return str(text)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of already-templated text: the template wrote any BOS itself, so the
    tokenizer must not add another one."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
