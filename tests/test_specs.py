"""params.yaml is fully typed: bad files and bad overrides fail before any work, naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specs import ParamsError, Params, apply_overrides, load_params, parse_override, spec_hash
from tests.conftest import REPO


def write(tmp_path: Path, data) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def base() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def problems_of(path: Path, overrides=()) -> list[str]:
    with pytest.raises(ParamsError) as err:
        load_params(path, overrides)
    return err.value.problems


def test_project_params_are_valid():
    params = load_params(REPO / "params.yaml")
    assert [s.name for s in params.ingest.sources] == ["literature", "encyclopedia", "code", "docs"]


def test_dvc_reads_the_shipped_yaml_with_libyaml_as_our_loader_reads_it():
    """DVC parses params.yaml, dvc.yaml and dvc.lock with ruamel's safe loader, on libyaml's C parser when
    ruamel.yaml.clib is installed (a dependency: in pure Python each DVC command took ~2 s more on 2 cores).
    libyaml is the stricter parser: `device_peak_tflops:,` in a flow mapping stopped every DVC command with "YAML
    file structure is corrupted", where PyYAML (specs' loader) and pure ruamel read it as null."""
    from dvc.utils.serialize import parse_yaml
    from ruamel.yaml import YAML

    assert YAML(typ="safe").Parser.__name__ == "CParser"
    for name in ("params.yaml", "dvc.yaml", "dvc.lock"):
        text = (REPO / name).read_text()
        assert parse_yaml(text, name) == YAML(typ="safe", pure=True).load(text), name
    params = (REPO / "params.yaml").read_text()
    assert parse_yaml(params, "params.yaml") == yaml.safe_load(params)  # DVC tracks the values specs validate


def test_out_of_range_value_names_key_and_bound(tmp_path):
    p = write(tmp_path, base())
    assert problems_of(p, ["validate.expectations.2.mostly=1.7"]) == [
        "validate.expectations.2.mostly: must be ≤ 1.0, got 1.7"]
    assert problems_of(p, ["ingest.max_doc_chars=0"]) == ["ingest.max_doc_chars: must be ≥ 1, got 0"]


def test_unknown_key_is_rejected_with_suggestion(tmp_path):
    data = base()
    data["ingest"]["shard_record"] = 10
    data["run"]["colour"] = "red"
    lines = problems_of(write(tmp_path, data))
    assert "ingest.shard_record: unknown key (did you mean 'shard_records'?)" in lines
    assert any(line.startswith("run.colour: unknown key (allowed: name, seed, executor)") for line in lines)


def test_unknown_section_and_wrong_type(tmp_path):
    data = base()
    data["trainn"] = {}
    data["run"]["seed"] = "abc"
    lines = problems_of(write(tmp_path, data))
    assert any(line.startswith("trainn: unknown key") for line in lines)
    assert any(line.startswith("run.seed: input should be a valid integer") for line in lines)


def test_every_error_is_reported_at_once(tmp_path):
    data = base()
    data["ingest"]["sources"][0]["corpus"] = "poetry"
    data["ingest"]["sources"][1]["name"] = "literature"
    data["validate"]["expectations"][1] = {"expect": "length_between", "column": "text"}
    lines = problems_of(write(tmp_path, data))
    assert any(line.startswith("ingest.sources.0.embedded.corpus:") and "poetry" in line for line in lines)
    assert any("validate.expectations.1" in line and "needs `min` and/or `max`" in line for line in lines)


def test_duplicate_source_names_and_unknown_per_source(tmp_path):
    data = base()
    data["ingest"]["sources"][1]["name"] = "literature"
    assert any("repeated: literature" in line for line in problems_of(write(tmp_path, data)))
    data = base()
    data["validate"]["per_source"]["nowhere"] = []
    assert any("unknown source(s) ['nowhere']" in line for line in problems_of(write(tmp_path, data)))


def test_yaml_syntax_error_names_line(tmp_path):
    p = write(tmp_path, "run:\n  name: x\n  seed: [1, 2\n")
    (line,) = problems_of(p)
    assert line.startswith("line 4")


def test_overrides_parse_yaml_values_and_reject_bad_paths():
    assert parse_override("ingest.max_doc_chars=500") == ("ingest.max_doc_chars", 500)
    assert parse_override("validate.data_docs=false") == ("validate.data_docs", False)
    with pytest.raises(ParamsError, match="key.path=value"):
        parse_override("nonsense")
    with pytest.raises(ParamsError, match=r"ingest.sources.9: list index must be 0..3"):
        apply_overrides(base(), {"ingest.sources.9.max_docs": 3})
    with pytest.raises(ParamsError, match="run.seed.x: .*value, not a section"):
        apply_overrides(base(), {"run.seed.x.y": 3})


def test_spec_hash_tracks_content():
    a = Params.model_validate(base())
    b = Params.model_validate(apply_overrides(base(), {"ingest.shard_records": 17}))
    assert spec_hash(a.ingest) != spec_hash(b.ingest)
    assert spec_hash(a.validate_) == spec_hash(b.validate_)


def test_check_command_exit_codes(tmp_path):
    ok = subprocess.run([sys.executable, "-m", "tasks", "check"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "tasks", "check", "--set", "validate.examples=1000"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "validate.examples: must be ≤ 100, got 1000" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_parallel_layout_must_fit_the_model(tmp_path):
    p = write(tmp_path, base())
    assert problems_of(p, ["parallel.tp=3", "parallel.pp=5"]) == [
        "parallel.tp: must divide model n_heads (4) and n_kv_heads (2), got 3: kv heads are split over the "
        "tensor ranks, not replicated, so at most 2 (tp that fits: 1, 2)",
        "parallel.pp: at most model n_layers (4) stages, got 5"]
    assert load_params(p, ["parallel.pp=3"]).parallel.pp == 3  # uneven stages (2, 1, 1 blocks) are fine
    (line,) = problems_of(p, ["parallel.pp=2", "parallel.zero_stage=2"])
    assert line.startswith("parallel: zero_stage 2 is incompatible with pipeline parallelism")


def test_tensor_parallel_must_divide_the_swiglu_width():
    from specs.pretrain import ModelSpec, ParallelSpec, layout_problems

    model = ModelSpec(flavor="tiny", d_model=48, n_heads=3, n_kv_heads=3, ffn_multiple_of=64)  # SwiGLU width 128
    assert layout_problems(model, ParallelSpec(tp=3, dp=1)) == [
        "parallel.tp: must divide the SwiGLU width 128 (from model.d_model and model.ffn_multiple_of), got 3"]
    assert layout_problems(model, ParallelSpec(tp=1)) == []


def test_explicit_swiglu_width_overrides_the_multiple():
    """`model.ffn_hidden` sets the width no `ffn_multiple_of` gives (Llama 3 405B: 53248 for d_model 16384,
    where the rule's ~8/3·d rounded up to ≤ 4096 gives at most 45056); the built model and the tp check use it."""
    from specs.pretrain import ModelSpec, ParallelSpec, layout_problems
    from specs.architecture import ModelConfig, param_counts
    from tasks.train.modeling.model import Transformer

    assert ModelSpec(flavor="tiny", d_model=16384, n_heads=128, ffn_multiple_of=4096).ffn_width() == 45056
    model = ModelSpec(flavor="tiny", d_model=48, n_heads=3, n_kv_heads=3, ffn_hidden=90)
    cfg = ModelConfig.from_spec(model, vocab_size=64, seq_len=16)
    assert cfg.ffn_hidden == 90 and model.ffn_width() == 90
    net = Transformer(cfg, 0)
    assert net.layers[1].mlp.w1.weight.shape == (90, 48) and net.layers[1].mlp.w2.weight.shape == (48, 90)
    assert sum(p.numel() for p in net.parameters()) == param_counts(cfg).total
    assert layout_problems(model, ParallelSpec(tp=3, dp=1)) == []          # 90 = 3 × 30
    assert layout_problems(model.model_copy(update={"ffn_hidden": 91}), ParallelSpec(tp=3, dp=1)) == [
        "parallel.tp: must divide the SwiGLU width 91 (from model.ffn_hidden), got 3"]
