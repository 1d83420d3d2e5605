"""The Hugging Face Hub side of publishing: the repo id, the token (from $HF_TOKEN or the
`hf auth login` store only, never an option) and the one-commit upload of a staged folder."""

from __future__ import annotations

import re
from pathlib import Path

from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.fileio import OUTPUT_MARKER

# what the Hub accepts as owner/name (for a repo and for a base model)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_repo_id(repo_id: str) -> None:
    if not REPO_ID.match(repo_id) or ".." in repo_id or len(repo_id) > 96:
        raise InputError(f"--repo-id must be owner/name (letters, digits, '-', '_', '.'), got '{repo_id}'")


def hub_token() -> str | None:
    """The token from the standard sources: $HF_TOKEN, then `hf auth login`'s token file."""
    from huggingface_hub import get_token

    return str(token) if (token := get_token()) else None


def upload(folder: Path, repo_id: str, *, private: bool, token: str, message: str, repo_type: str = "model") -> str:
    """Create the repo (a model or dataset repo) if needed and upload the staged folder as one
    commit; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type)
        info = api.upload_folder(  # the staging marker stays here: it says what wrote the folder
            repo_id=repo_id, folder_path=folder, repo_type=repo_type, commit_message=message,
            ignore_patterns=[OUTPUT_MARKER],
        )  # fmt: skip
    except Exception as exc:  # network, auth, offline mode: one line, never the token
        detail = (str(exc).splitlines() or [""])[0].replace(token, "***")
        raise SpanjudgeError(f"upload to {repo_id} failed: {exc.__class__.__name__}: {detail}") from None
    kind = "datasets/" if repo_type == "dataset" else ""
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/{kind}{repo_id}")


def is_hub_benchmark(dataset_id: str, token: str | None) -> bool | None:
    """Whether the Hub dataset is a registered Benchmark (its repository holds an `eval.yaml`): None where that
    cannot be told here (offline, no such dataset, a network error)."""
    from huggingface_hub import HfApi
    from huggingface_hub.constants import HF_HUB_OFFLINE

    if HF_HUB_OFFLINE:
        return None
    try:
        return bool(HfApi(token=token).file_exists(dataset_id, "eval.yaml", repo_type="dataset"))
    except Exception:  # not found, private, network: not known either way
        return None
