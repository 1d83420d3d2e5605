"""`configs/...` as the README names it, from any folder: the file there when there is one, else the config
spanjudge ships (the wheel keeps them in `spanjudge.configs`), said once on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.app.cli import main as cli_main
from spanjudge.core.configio import configs_dir, read_yaml, resolve_config

IMPORT = Path("configs/import/quintd1_gpt4_wikidata.yaml")


def test_a_configs_name_is_the_shipped_config_where_the_folder_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    shipped = configs_dir() / "import" / "quintd1_gpt4_wikidata.yaml"
    assert resolve_config(IMPORT) == shipped
    assert f"using the one spanjudge ships: {shipped}" in capsys.readouterr().err
    assert read_yaml(IMPORT) == read_yaml(shipped)
    # a file of that name in the folder is the user's own, and wins
    IMPORT.parent.mkdir(parents=True)
    IMPORT.write_text("source: mine\n")
    assert resolve_config(IMPORT) == IMPORT and read_yaml(IMPORT) == {"source": "mine"}
    # a name spanjudge ships nothing for, or outside configs/, stays as given (and is not found)
    for missing in (Path("configs/import/nothing.yaml"), Path("elsewhere/quintd1_gpt4_wikidata.yaml")):
        assert resolve_config(missing) == missing
    assert cli_main(["import", "--config", "configs/import/nothing.yaml", "--out", "x"]) != 0
    assert "configs/import/nothing.yaml" in capsys.readouterr().err
