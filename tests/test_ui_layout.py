"""Artifacts in the Prefect UI: keys in pipeline order, tables fitted to a 1440 px screen, the model card as
markdown."""

from __future__ import annotations

from tasks.core import graph
from tasks.core.artifacts import model_card_markdown, stage_artifacts
from tasks.core.ui_layout import MAX_CELL_CHARS, MAX_COLUMNS, artifact_key, fit_table


def test_keys_sort_in_pipeline_order():
    keys = [artifact_key(s, f"{s}-report") for s in graph.STAGE_NAMES]
    n = len(graph.STAGE_NAMES)  # export stays last however many stages come before it
    assert keys[:2] == ["01-ingest-report", "02-validate-report"] and keys[-1] == f"{n:02d}-export-report"
    assert keys == sorted(keys)
    assert artifact_key("", "dvc-experiment") == f"{len(graph.STAGE_NAMES) + 1:02d}-dvc-experiment"


def test_long_cells_are_cut_and_wide_tables_split():
    long = "word " * 40  # 200 characters, folded to single spaces
    rows = [{"id": f"r{i}", **{f"c{k}": (long if k == 0 else k) for k in range(12)}} for i in range(3)]
    parts = fit_table(rows)
    w = MAX_COLUMNS - 1  # columns per part besides the repeated first one
    assert [list(p[0]) for p in parts] == [["id", *(f"c{k}" for k in range(i, min(i + w, 12)))]
                                           for i in range(0, 12, w)]
    assert len(parts) == -(-12 // w)
    assert all(len(p[0]) <= MAX_COLUMNS for p in parts) and [r["id"] for r in parts[1]] == ["r0", "r1", "r2"]
    cell = parts[0][0]["c0"]
    assert len(cell) == MAX_CELL_CHARS and cell.endswith("…") and cell.startswith("word word")
    assert parts[0][0]["c1"] == 1  # numbers untouched
    short = [{"a": "x\ny", "b": 2}]
    assert fit_table(short) == [[{"a": "x y", "b": 2}]] and fit_table([]) == []


def test_the_model_card_is_published_as_markdown(tmp_path):
    assert model_card_markdown(tmp_path) is None and stage_artifacts(tmp_path, "export") == []
    card = tmp_path / "data" / "export" / "hf" / "README.md"
    card.parent.mkdir(parents=True)
    card.write_text("---\nlicense: mit\ntags:\n- forgeline\n---\n\n# tiny\n\n## Review\n\n| gate |\n|---|\n")
    (art,) = stage_artifacts(tmp_path, "export")
    assert (art.kind, art.key) == ("markdown", "export-model-card")
    assert art.markdown.startswith("# tiny\n\n## Review")
    assert "```yaml\nlicense: mit\ntags:\n- forgeline\n```" in art.markdown
    card.write_text("# no front matter\n")
    assert model_card_markdown(tmp_path) == "# no front matter\n"


def test_the_quality_curve_reaches_the_ui_as_a_table(tmp_path):
    """clean's threshold curve becomes a markdown artifact: one row per threshold, the total and each source."""
    import json

    from tasks.core.artifacts import stage_artifacts

    rows = [{"threshold": t, "source": s, "docs": d, "docs_share": 1.0, "words": 10 * d, "words_share": w}
            for t, per in ((0.3, {"all": 9, "a": 5, "b": 4}), (0.9, {"all": 3, "a": 3}))
            for s, d in per.items() for w in [d / 9]]
    out = tmp_path / "data" / "clean"
    out.mkdir(parents=True)
    (out / "report.json").write_text(json.dumps({"quality_curve": rows}))
    (art,) = [a for a in stage_artifacts(tmp_path, "clean") if a.key == "clean-quality-curve"]
    assert "| 0.3 | 9 | 100.0% | 5 | 4 |" in art.markdown
    assert "| 0.9 | 3 | 33.3% | 3 | — |" in art.markdown  # source b has no row at 0.9: shown as a dash
