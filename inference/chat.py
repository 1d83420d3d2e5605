"""Chat-template rendering and prompt encoding, shared by every local model path.

Training (prompt/completion pairs), the transformers backend and the judge's "prompt"
API all render messages here, so a model meets at inference exactly the text it was
trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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


def turn_end_ids(tokenizer: Any) -> set[int]:
    """The special token the chat template closes an assistant turn with, when it is one (Gemma's
    `<end_of_turn>`, which its GGUF does not name as eos): a trained judge ends its reply there."""
    marker = "\u00a7reply\u00a7"
    conversation = [{"role": "user", "content": "?"}, {"role": "assistant", "content": marker}]
    try:
        text = render_chat(tokenizer, conversation, add_generation_prompt=False)
    except Exception:  # a template that renders no assistant turn (jinja raises its own errors)
        return set()
    after = text.partition(marker)[2]
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return {ids[0]} if ids and ids[0] in special else set()


def judge_end_ids(tokenizer: Any) -> set[int]:
    """The tokens that end a judge's reply: the tokenizer's eos and the chat template's turn end."""
    return {tokenizer.eos_token_id, *turn_end_ids(tokenizer)} - {None}


def shared_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two token sequences (encoded prompts, replies) have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
