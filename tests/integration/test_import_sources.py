"""`spanjudge import` reads the data folder given and applies OpenLGauge's field limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError


def test_import_quintd_reads_the_data_dir_given(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.quintd_files import GOOD as SPANS
    from support.quintd_files import RULE, write_quintd

    root = write_quintd(tmp_path / "data", SPANS)  # 2 outputs, where the shared folder has 320
    (root / "meta_eval").symlink_to(shared_data / "meta_eval")  # what import keeps out of training
    config = tmp_path / "import.yaml"
    config.write_text(yaml.safe_dump({"name": "q", "source": {"format": "quintd1", "rule": RULE}}))
    out = tmp_path / "out"
    code = cli_main(["import", "--config", str(config), "--out", str(out), "--data-dir", str(root)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["records"] == 2  # the folder given is the one read


def test_openlgauge_import_applies_the_field_limits_and_counts_spans(tmp_path: Path) -> None:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.teacher import ImportConfig, import_annotations

    base = {"dataset": "SummEval", "inputs": {"Article": "The cat sat on the mat all day long."},
            "aspect_name": "fluency", "task_type": "summarization", "task_name": "news_summarization"}  # fmt: skip
    errors = [{"location": "sat sat", "explanation": "Repeated word.", "severity": 2}]
    rows = [
        {**base, "input_id": f"a{n}", "system": "s", "outputs": {"Summary": "The cat sat sat on the mat."},
         "evaluation": {"errors": errors * 2, "score": 70}}
        for n in range(2)
    ]  # fmt: skip
    rows[1]["evaluation"] = {"errors": [{**errors[0], "explanation": "x" * 50_000}], "score": 70}
    (tmp_path / "release.json").write_text(json.dumps(rows))
    source = {"format": "openlgauge", "path": "release.json"}
    config = ImportConfig.model_validate({"name": "o", "source": source})
    with pytest.raises(InputError, match=r"release\.json\[1\]: error 1's explanation has 50000 characters"):
        import_annotations(config, tmp_path, tmp_path / "out", load_catalog())
    capped = ImportConfig.model_validate({"name": "o", "source": {**source, "field_limits": {"too_long": "cap"}}})
    summary = import_annotations(capped, tmp_path, tmp_path / "out", load_catalog())
    records = [
        json.loads(line)
        for name in ("train", "validation")
        for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()
    ]
    assert max(len(e["explanation"]) for r in records for e in r["evaluation"]["errors"]) <= 1000
    assert summary.spans == 3
    assert "; 3 spans (" in (tmp_path / "out" / "stats.md").read_text()  # each imported error, counted
