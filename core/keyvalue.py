"""The one parser of `KEY=VALUE` command-line items (`--set`, `--engine-arg`, `--judge-option`,
`--input`, `--source-license`, `--endpoint`).

Typing rule: a *setting* (`parse_settings(...)`: `--set`, `--engine-arg`, a judge option) reads its
value as YAML, as config files are read (8192 an int, 0.8 and 1e-3 floats, true a bool, fp8 a
string, [a, b] a list, @smollm2 a string although YAML reserves @); a *name* (`parse_texts(...)`:
a header, a field, a license, a URL) keeps its value as text, stripped and non-empty, since
`--input Article=2024` names a field, not a number.
A malformed item is one `InputError`: "<option> expects <FORM> (e.g. <example>), got '<item>'".

`--endpoint NAME=URL[,URL...]` (`parse_endpoints(...)`) is the one endpoint syntax; commands with a
single model also take the older bare `--endpoint URL` (`endpoint_urls(...)`), with one
deprecation line on stderr.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any, TextIO

import yaml

from .errors import InputError

# YAML 1.1 (PyYAML) reads 1e-3 as a string; YAML 1.2 and Python read it as a float
_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_BARE_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def split_item(item: str, option: str, example: str, form: str = "KEY=VALUE", text: bool = False) -> tuple[str, str]:
    """(key, value) of one item; `text` values are stripped and may not be empty."""
    key, sep, value = item.partition("=")
    if text:
        value = value.strip()
    if not sep or not key.strip() or (text and not value):
        raise InputError(f"{option} expects {form} (e.g. {example}), got {item!r}")
    return key.strip(), value


def yaml_value(raw: str, option: str, item: str) -> object:
    """A setting's value, typed as YAML (plus exponent floats, see _EXPONENT_FLOAT)."""
    if _EXPONENT_FLOAT.fullmatch(raw.strip()):
        return float(raw)
    if raw.strip().startswith(("@", "`")):  # YAML reserves these; `@smollm2` is a model name, text
        return raw.strip()
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as error:
        problem = " ".join(str(error).split())
        raise InputError(f"{option} {item!r}: the value is not valid YAML: {problem}") from None


def parse_setting(item: str, option: str, example: str) -> tuple[str, Any]:
    """One `KEY=VALUE` setting, its value typed as YAML: 'training.max_steps=5' -> ('training.max_steps', 5)."""
    key, raw = split_item(item, option, example)
    return key, yaml_value(raw, option, item)


def parse_settings(items: Iterable[str], option: str, example: str) -> dict[str, Any]:
    """`KEY=VALUE` settings by key (a repeated key: the last one wins), values typed as YAML."""
    return dict(parse_setting(item, option, example) for item in items)


def parse_texts(items: Iterable[str], option: str, example: str, form: str = "KEY=VALUE") -> dict[str, str]:
    """`KEY=TEXT` items by key, values as stripped text; a key given twice with two values is one InputError
    (which one was meant cannot be known; the same value twice is harmless)."""
    found: dict[str, str] = {}
    for item in items:
        key, value = split_item(item, option, example, form, text=True)
        if found.get(key, value) != value:
            raise InputError(f"{option} {key} is given twice, as {found[key]!r} and {value!r}: give it once")
        found[key] = value
    return found


ENDPOINT_FORM = "NAME=URL[,URL...]"
ENDPOINT_EXAMPLE = "gemma2=http://gpu1:11434,http://gpu2:11434"


def parse_endpoints(items: Iterable[str], option: str = "--endpoint") -> dict[str, list[str]]:
    """`--endpoint NAME=URL[,URL...]` items: the servers of each named model (a repeated name adds servers)."""
    found: dict[str, list[str]] = {}
    for item in items:
        name, urls = split_item(item, option, ENDPOINT_EXAMPLE, ENDPOINT_FORM, text=True)
        found.setdefault(name, []).extend(url.strip() for url in urls.split(",") if url.strip())
    return found


def endpoint_urls(
    items: Iterable[str], name: str, option: str = "--endpoint", stderr: TextIO | None = None
) -> tuple[str, ...]:
    """The servers `--endpoint` items give the one model `name` of a single-model command.

    `NAME=URL[,URL...]` is the syntax; a bare URL (the older form of `spanjudge perturb`)
    still works and prints one deprecation line; another model's NAME is an error."""
    named: list[str] = []
    bare: list[str] = []
    for item in items:
        (bare if _BARE_URL.match(item.strip()) else named).append(item)
    found = parse_endpoints(named, option)
    others = sorted(set(found) - {name})
    if others:
        raise InputError(f"{option} names model {others[0]!r}, but this command's model is {name!r}")
    if bare:
        print(
            f"spanjudge: {option} URL is deprecated; write {option} {name}=URL[,URL...] (the model's name first)",
            file=stderr or sys.stderr,
        )
    return (*found.get(name, ()), *(url.strip() for url in bare))
