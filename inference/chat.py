"""Chat-template rendering and prompt encoding, shared by every local model path.

Training (prompt/completion pairs), the transformers, llama.cpp and vLLM engines and the judge's
"prompt" API all render messages here, so a model meets at inference exactly the text it was
trained on.

**Only the template writes control tokens.** A message's content is user text (the task's inputs,
the output being judged, an aspect definition), and text such as `<|im_end|>\\n<|im_start|>assistant`
in it must reach the model as those characters, never as the control tokens that would close the
judge's turn and write its answer. So prompts are encoded from their pieces (`chat_pieces`: the
template's own text, and each message's content as the template placed it): the template's pieces
with its control tokens, the content as plain text (`encode_chat`; `encode_text` for text alone). Where
a prompt must travel as text (a server that takes no token ids), the content's control-token spellings
are broken by an invisible WORD JOINER (`defuse`), so the server's own tokenizer reads them as text too.
Text without control-token spellings encodes exactly as before: only a hostile text is encoded apart.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import SpanjudgeError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Piece = tuple[str, bool]  # (text, whether it is a message's content) of a rendered chat
JOINER = "\u2060"  # WORD JOINER: invisible, in no tokenizer's control tokens; breaks a spelling apart
_SENTINEL = re.compile("\ue000(\\d+)\ue001")  # a message's place in the template's own rendering
# control-token spellings of the common chat formats, for servers whose tokenizer is unknown here (where it is
# known, its own special tokens are used: `control_pattern`): ChatML, Llama 3 and Phi's <|...|>; DeepSeek's
# <｜...｜> (fullwidth bars, e.g. <｜Assistant｜>, <｜end▁of▁sentence｜>); Gemma's turns and image markers; Llama 2
# and Mistral's [INST] and <<SYS>>; Mistral's tekken markers ([SYSTEM_PROMPT], [TOOL_CALLS] ...); BOS/EOS names
MISTRAL_MARKERS = (
    "INST", "SYSTEM_PROMPT", "TOOL_CALLS", "AVAILABLE_TOOLS", "TOOL_RESULTS", "TOOL_CONTENT", "THINK", "IMG",
    "IMG_BREAK", "IMG_END", "ARGS", "CALL_ID", "PREFIX", "MIDDLE", "SUFFIX",
)  # fmt: skip
GENERIC_CONTROL = re.compile(
    r"<\|[^|<>\s]{1,48}\|>|<\uff5c[^\uff5c<>\s]{1,48}\uff5c>"
    r"|<(?:start|end)_of_(?:turn|image)>|<image_soft_token>|<(?:bos|eos|pad|unk|s|/s)>"
    rf"|\[/?(?:{'|'.join(MISTRAL_MARKERS)})\]|<</?SYS>>"
)
_CONTROL_PATTERNS: weakref.WeakKeyDictionary[Any, re.Pattern[str] | None] = weakref.WeakKeyDictionary()


def _apply(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    """The tokenizer's chat template applied (in transformers' Jinja sandbox); a template that breaks out of
    the sandbox or does not render is one SpanjudgeError naming the tokenizer."""
    from jinja2.exceptions import SecurityError, TemplateError

    name = getattr(tokenizer, "name_or_path", "the tokenizer")
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except SecurityError as exc:
        raise SpanjudgeError(f"the chat template of {name} reaches outside Jinja's sandbox ({exc}); refused") from None
    except TemplateError as exc:  # a syntax error, or the template's own raise_exception(...)
        raise SpanjudgeError(f"the chat template of {name} does not render: {exc}") from None
    return str(text)


def chat_pieces(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
) -> list[Piece]:
    """The chat template applied to `messages`, as pieces: the template's own text, and each message's
    content as the template wrote it (as given, or trimmed, as Llama 3's template trims it).

    The template is rendered twice: with each content replaced by a placeholder (what the template
    writes), and with the contents (where each content went). A template that changes contents in
    another way gets the contents as given, in the placeholders' places."""
    holders = [{**message, "content": f"\ue000{i}\ue001"} for i, message in enumerate(messages)]
    parts = _SENTINEL.split(_apply(tokenizer, holders, add_generation_prompt))  # text, index, text, ..., text
    real = _apply(tokenizer, list(messages), add_generation_prompt)
    aligned = _align(parts, [m["content"] for m in messages], real)
    if aligned is not None:
        return aligned
    return [(part, False) if i % 2 == 0 else (messages[int(part)]["content"], True) for i, part in enumerate(parts)]


def _align(parts: list[str], contents: list[str], real: str) -> list[Piece] | None:
    """`parts` (template text and content indices, alternating) matched against the real rendering."""
    pieces: list[Piece] = []
    at = 0
    for i, part in enumerate(parts):
        if i % 2 == 0:
            if not real.startswith(part, at):
                return None
            pieces.append((part, False))
            at += len(part)
            continue
        after = parts[i + 1]
        content = contents[int(part)]
        for written in dict.fromkeys((content, content.strip(), content.lstrip(), content.rstrip())):
            if real.startswith(written, at) and real.startswith(after, at + len(written)):
                pieces.append((written, True))
                at += len(written)
                break
        else:
            return None
    return pieces if at == len(real) else None


def render_chat(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
) -> str:
    """The model's chat template applied to `messages`, as text (its control tokens spelled out)."""
    return "".join(text for text, _ in chat_pieces(tokenizer, messages, add_generation_prompt=add_generation_prompt))


def control_pattern(tokenizer: PreTrainedTokenizerBase) -> re.Pattern[str] | None:
    """A pattern of the spellings of the tokenizer's control (special) tokens, longest first; None if it
    has none. Kept per tokenizer: Gemma 3 has over 6,000."""
    try:
        return _CONTROL_PATTERNS[tokenizer]
    except (KeyError, TypeError):
        pass
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    spellings = {str(t) for t in getattr(tokenizer, "all_special_tokens", [])}
    spellings |= {token.content for token in decoder.values() if getattr(token, "special", False)}
    longest_first = sorted((s for s in spellings if s), key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(s) for s in longest_first)) if longest_first else None
    with contextlib.suppress(TypeError):  # not weakly referable: computed again next time
        _CONTROL_PATTERNS[tokenizer] = pattern
    return pattern


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` as text: a control token's spelling in it is read as characters."""
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def encode_templated(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of templated text read as a server reads it, control-token spellings parsed; for text
    whose contents were defused (`served_prompt`), so only the template's spellings are parsed. The
    template wrote any BOS itself, so the tokenizer adds none."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_pieces(tokenizer: PreTrainedTokenizerBase, pieces: Iterable[Piece]) -> list[int]:
    """Token ids of a rendered chat: the template's control tokens as control tokens, the contents as text.

    Text between two control tokens is encoded in one go, as the tokenizer itself does (it splits at
    control tokens first), so a prompt whose contents spell no control token encodes exactly as its
    whole text would."""
    pieces = list(pieces)
    pattern = control_pattern(tokenizer)
    if pattern is None or not any(content and pattern.search(text) for text, content in pieces):
        return encode_templated(tokenizer, "".join(text for text, _ in pieces))
    ids: list[int] = []
    run: list[str] = []  # text since the last control token

    def flush() -> None:
        if run:
            ids.extend(encode_text(tokenizer, "".join(run)))
            run.clear()

    for text, content in pieces:
        if content:
            run.append(text)
            continue
        at = 0
        for match in pattern.finditer(text):
            run.append(text[at : match.start()])
            flush()
            ids.extend(encode_templated(tokenizer, match.group()))
            at = match.end()
        run.append(text[at:])
    flush()
    return ids


def encode_chat(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
) -> list[int]:
    """Token ids of the chat template applied to `messages`; no content becomes a control token."""
    return encode_pieces(tokenizer, chat_pieces(tokenizer, messages, add_generation_prompt=add_generation_prompt))


def defuse(text: str, pattern: re.Pattern[str] | None = GENERIC_CONTROL) -> str:
    """`text` with every control-token spelling `pattern` finds broken by a WORD JOINER after its first
    character, so that a tokenizer that parses control tokens in text reads it as text. A joiner is in no
    spelling, so breaking one never makes another; overlapping spellings are broken in later passes."""

    def broken(match: re.Match[str]) -> str:
        spelling = match.group()
        return spelling[0] + JOINER + spelling[1:] if len(spelling) > 1 else spelling  # one character: unbreakable

    for _ in range(len(text) + 1):  # bounded: each pass breaks at least one spelling, or ends
        changed = pattern.sub(broken, text) if pattern is not None else text
        if changed == text:
            break
        text = changed
    return text


def served_prompt(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]]) -> str:
    """The chat template applied to `messages` as text for a server that takes text and parses control
    tokens in it: the template's control tokens spelled out, the contents' spellings defused."""
    pattern = control_pattern(tokenizer)
    return "".join(defuse(text, pattern) if content else text for text, content in chat_pieces(tokenizer, messages))


def turn_end_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
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


def judge_end_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
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
