"""Span metrics on hand-worked cases, and the RotoWire / quintd-1 span sets on the real data."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from spanjudge.core.catalog import load_catalog, validate_inputs
from spanjudge.core.errors import InputError
from spanjudge.data_gen.quintd import QUINTD_CATEGORIES, quintd_input
from spanjudge.eval.spans.documents import QUINTD_INPUT_HEADER, SPAN_INPUT_HEADER, SPAN_TASK_ID, GoldSpan, SpanDocument
from spanjudge.eval.spans.metrics import (
    PRF,
    evaluate_spans,
    exact_span_prf,
    mark_numbers,
    micro_total,
    overlap_span_prf,
    token_prf,
    token_spans,
)
from spanjudge.eval.spans.quintd import human_pairs, load_quintd1
from spanjudge.eval.spans.rotowire import load_rotowire

# --- metrics -------------------------------------------------------------------------------------


def test_prf_zero_denominators_are_zero() -> None:
    assert PRF(0, 0, 0).as_dict() == {"tp": 0, "fp": 0, "fn": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    # 2 of 3 predictions right, 2 of 4 gold found: P = 2/3, R = 1/2, F1 = 2*(1/3)/(7/6) = 4/7
    assert PRF(2, 1, 2).f1 == pytest.approx(4 / 7)


def test_exact_spans_are_one_to_one() -> None:
    # the duplicate (0, 5) has no second gold to match; (10, 12) != (10, 13)
    assert exact_span_prf([(0, 5), (0, 5), (10, 12)], [(0, 5), (10, 13)]) == PRF(tp=1, fp=2, fn=1)
    assert exact_span_prf([(0, 5), (0, 5)], [(0, 5), (0, 5)]) == PRF(tp=2, fp=0, fn=0)
    assert exact_span_prf([], [(0, 1)]) == PRF(tp=0, fp=0, fn=1)
    assert exact_span_prf([(0, 1)], []) == PRF(tp=0, fp=1, fn=0)


def test_overlap_spans_follow_the_rotowire_protocol() -> None:
    # nested: the first prediction recalls the gold mistake, the second has nothing left to match
    assert overlap_span_prf([(2, 4), (5, 7)], [(0, 10)]) == PRF(tp=1, fp=1, fn=0)
    # adjacent half-open spans share no character
    assert overlap_span_prf([(5, 8)], [(0, 5)]) == PRF(tp=0, fp=1, fn=1)
    # one prediction across two gold mistakes recalls only the first (left to right) and is consumed
    assert overlap_span_prf([(2, 6)], [(5, 8), (0, 3)]) == PRF(tp=1, fp=0, fn=1)
    # gold (0, 10) is matched first and takes the only prediction, so (8, 12) stays unrecalled
    assert overlap_span_prf([(9, 11)], [(8, 12), (0, 10)]) == PRF(tp=1, fp=0, fn=1)
    # a later prediction can still serve a later gold span
    assert overlap_span_prf([(9, 11), (1, 2)], [(8, 12), (0, 10)]) == PRF(tp=2, fp=0, fn=0)
    assert overlap_span_prf([], []) == PRF(0, 0, 0)
    with pytest.raises(ValueError, match="half-open"):
        overlap_span_prf([(4, 4)], [(0, 5)])


def test_token_prf_marks_touched_whitespace_tokens() -> None:
    text = "The Kings won 107 - 99 today"
    assert token_spans(text)[:3] == [(0, 3), (4, 9), (10, 13)]
    # gold "Kings won" -> tokens {Kings, won}; prediction "n 107" touches {won, 107}
    assert token_prf([(12, 17)], [(4, 13)], text) == PRF(tp=1, fp=1, fn=1)
    # two predictions on one token count the token once
    assert token_prf([(14, 15), (15, 17)], [(14, 17)], text) == PRF(tp=1, fp=0, fn=0)


def test_micro_total_sums_counts() -> None:
    total = micro_total([PRF(1, 2, 1), PRF(3, 0, 1)])
    assert total == PRF(4, 2, 2)
    assert (total.precision, total.recall) == (pytest.approx(4 / 6), pytest.approx(4 / 6))


def test_mark_numbers() -> None:
    assert mark_numbers("Scored 1,234.5 pts and 7") == [(7, 14), (23, 24)]
    assert mark_numbers("no digits") == []


def test_evaluate_spans_counts_unscored_documents() -> None:
    def doc(doc_id: str, output: str, gold: list[GoldSpan]) -> SpanDocument:
        return SpanDocument(doc_id, "toy", SPAN_TASK_ID, {SPAN_INPUT_HEADER: "x"}, output, tuple(gold))

    docs = [
        doc("a", "won 107 - 99 by Smith", [GoldSpan(4, 7, "NUMBER"), GoldSpan(16, 21, "NAME")]),
        doc("b", "lost 3 games", [GoldSpan(5, 6, "NUMBER")]),
        doc("c", "tied 2 - 2", [GoldSpan(5, 6, "NUMBER")]),
    ]
    predictions = {"a": mark_numbers(docs[0].output), "b": None}  # "c" missing
    result = evaluate_spans(docs, predictions)
    assert (result["documents"], result["scored"], result["unscored"], result["missing"]) == (3, 1, 1, 1)
    # doc a: predictions 107, 99; gold 107 (NUMBER), Smith (NAME)
    assert result["exact"] == {"tp": 1, "fp": 1, "fn": 1, "precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert result["overlap"]["tp"] == 1 and result["token"]["tp"] == 1
    assert result["per_category_recall"] == {
        "NAME": {"gold": 1, "exact": 0.0, "overlap": 0.0},
        "NUMBER": {"gold": 1, "exact": 1.0, "overlap": 1.0},
    }


# --- data sets -----------------------------------------------------------------------------------


def test_span_task_exists_in_the_catalog(shared_data: Path) -> None:
    task = load_catalog().task(SPAN_TASK_ID)
    doc = load_rotowire(shared_data, limit=1)[0]
    assert validate_inputs(task, doc.inputs) == doc.inputs


@pytest.mark.parametrize(("split", "n_texts", "n_spans"), [("test", 30, 622), ("train", 60, 1214)])
def test_rotowire_gold_spans_reproduce_the_tokens_column(
    shared_data: Path, split: str, n_texts: int, n_spans: int
) -> None:
    docs = {d.id.rsplit("/", 1)[1]: d for d in load_rotowire(shared_data, split)}
    assert len(docs) == n_texts
    rows = list(csv.DictReader((shared_data / "spans/rotowire_accuracy" / split / "gsml.csv").open(newline="")))
    assert sum(len(d.gold) for d in docs.values()) == len(rows) == n_spans
    spans_by_text: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        spans_by_text.setdefault(row["TEXT_ID"].removesuffix(".txt"), []).append(
            (" ".join(row["TOKENS"].split()), row["TYPE"])
        )
    matched = 0
    for text_id, doc in docs.items():
        found = sorted((" ".join(doc.output[g.start : g.end].split()), g.category) for g in doc.gold)
        expected = sorted(spans_by_text.get(text_id, []))
        matched += sum(a == b for a, b in zip(found, expected, strict=True))
    assert matched == n_spans  # every gold span's characters are its TOKENS cell


def test_rotowire_document_shape(shared_data: Path) -> None:
    first = load_rotowire(shared_data, limit=2)[0]
    assert first.id == "rotowire/test/T001" and first.dataset == "rotowire_accuracy"
    assert first.output.startswith("The Sacramento Kings ( 13 - 18 ) defeated")
    assert first.gold[0] == GoldSpan(first.output.index("defeated"), first.output.index("defeated") + 8, "WORD")
    box = first.inputs[SPAN_INPUT_HEADER]
    assert box.startswith("Date: 2014-12-29 (Monday)")  # gold corrects "Wednesday" to "Monday"
    assert "- Rudy Gay (F): MIN 38, PTS 25, FG 9/21" in box
    assert len(box) < 4000


def test_quintd1_spans_sit_at_their_offsets(shared_data: Path) -> None:
    docs = load_quintd1(shared_data)
    assert len(docs) == 2000 and len({d.id for d in docs}) == 2000
    raw_spans = placed = 0
    outputs: dict[tuple[str, str], list[str]] = {}
    for path in sorted((shared_data / "spans/quintd1/annotations/human").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (record["dataset"], record["model"])
            if key not in outputs:
                generated = json.loads(
                    (shared_data / "spans/quintd1/outputs/test" / key[0] / "default" / f"{key[1]}.json").read_text()
                )["generated"]
                outputs[key] = [g["out"] for g in generated]
            out = outputs[key][record["table_idx"]]
            for a in record["annotations"]:
                raw_spans += 1
                placed += bool(a["text"]) and out[a["start"] : a["start"] + len(a["text"])] == a["text"]
    assert raw_spans == 5500
    assert sum(len(d.gold) for d in docs) == placed == 5494
    assert sum(d.dropped_gold for d in docs) == raw_spans - placed == 6  # 5 empty, 1 misplaced
    assert {g.category for d in docs for g in d.gold} == set(QUINTD_CATEGORIES.values())


def test_quintd1_inputs_are_the_source_data(shared_data: Path) -> None:
    docs = [d for d in load_quintd1(shared_data, domains=["owid"]) if "/mistral/" in d.id]
    assert len(docs) == 100
    csv_files = {
        int(p.name.split("-")[0]): p.read_text() for p in (shared_data / "spans/quintd1/data/owid/test").glob("*.csv")
    }
    for doc in docs:
        index = int(doc.id.rsplit("/", 1)[1])
        assert doc.inputs[QUINTD_INPUT_HEADER] == csv_files[index]  # table_idx lines up with the input order
    assert quintd_input("no data block here") is None


def test_quintd1_double_annotations_get_distinct_ids(shared_data: Path) -> None:
    docs = load_quintd1(shared_data, annotator="human_corr")
    # 200 records, 20 of them verbatim repeats: 180 annotations of 100 outputs
    assert len({d.id for d in docs}) == len(docs) == 180
    assert len({d.id.split("@")[0] for d in docs}) == 100
    assert all(re.fullmatch(r"quintd1/\w+/[\w.-]+/\d+(@\w+)?", d.id) for d in docs)


def test_the_human_ceiling_pairs_two_different_workers(shared_data: Path) -> None:
    first, second = human_pairs(shared_data)
    assert len(first) == len(second) == 80  # 20 of the 100 outputs were annotated twice by one worker
    for doc in first:
        assert doc.id in second and "@" in doc.id


def test_spans_mode_adds_gamma_snapping_and_the_human_ceiling(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spanjudge.app.cli import main as cli_main

    out = tmp_path / "spans"
    args = ["meta-eval", "--spans", "quintd1", "--out", str(out), "--judge", "metric:bleu", "--max-items", "6",
            "--data-dir", str(shared_data)]  # fmt: skip
    assert cli_main([*args, "--gamma", "--snap-words"]) == 0, capsys.readouterr().err
    results = json.loads((out / "spans.json").read_text())
    assert set(results) == {"baseline: mark every number", "metric:bleu", "ceiling: second human annotator"}
    ceiling = results["ceiling: second human annotator"]
    assert ceiling["scored"] == 6 and ceiling["snap_to_words"] is True
    assert ceiling["gamma"]["gamma_outputs"] + ceiling["gamma"]["s_empty_outputs"] == 6
    baseline = results["baseline: mark every number"]
    assert baseline["gamma"]["gamma"] is not None and -1.0 <= baseline["gamma"]["gamma"] <= 1.0
    assert results["metric:bleu"]["scored"] == 0  # a metric marks no spans: unscored, and no γ made up
    assert results["metric:bleu"]["gamma"]["gamma"] is None
    report = (out / "spans.md").read_text()
    assert "| γ | s_empty |" in report and "snapped to whole words" in report
    # without the options: the workers' own character ranges, recorded as such, and no γ
    assert cli_main([*args, "--out", str(tmp_path / "plain")]) == 0
    plain = json.loads((tmp_path / "plain" / "spans.json").read_text())["ceiling: second human annotator"]
    assert plain["snap_to_words"] is False and "gamma" not in plain
    # the options belong to --spans
    assert cli_main(["meta-eval", "--suite", "configs/eval/thesis.yaml", "--out", str(tmp_path / "x"), "--gamma"]) == 2
    assert "--gamma, --snap-words and --fit-decisions apply to --spans only" in capsys.readouterr().err


def test_loaders_report_malformed_input(shared_data: Path, tmp_path: Path) -> None:
    split = tmp_path / "spans/rotowire_accuracy/test"
    shutil.copytree(shared_data / "spans/rotowire_accuracy/test", split)
    lines = (split / "gsml.csv").read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"9","9","9","9"', '"9","9","nine","9"', 1)
    (split / "gsml.csv").write_text("".join(lines))
    with pytest.raises(InputError, match=r"gsml\.csv:2: DOC_TOKEN_START is 'nine'"):
        load_rotowire(tmp_path)
    with pytest.raises(InputError, match="split 'dev' not found"):
        load_rotowire(tmp_path, split="dev")

    folder = tmp_path / "spans/quintd1/annotations/human"
    folder.mkdir(parents=True)
    (folder / "bad.jsonl").write_text('{"dataset": "owid"}\n{not json\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:1: needs a known 'dataset', 'model' and an int 'table_idx'"):
        load_quintd1(tmp_path)
    (folder / "bad.jsonl").write_text("\n{not json\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not valid JSON"):
        load_quintd1(tmp_path)
    with pytest.raises(InputError, match="no annotation files"):
        load_quintd1(tmp_path, annotator="gpt-4")
    with pytest.raises(InputError, match="unknown quintd-1 annotator"):
        load_quintd1(tmp_path, annotator="crowd")
