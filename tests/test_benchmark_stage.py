"""The benchmark stage on small upstream outputs: shipped tasks built from held-out text only, before → after scores
with standard errors, byte-identical reruns, the gate, both ways in (adapter and lm-eval's HF backend) giving the
same scores, no outside connection, and a task that leaks a connection failing the stage."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks.eval.lm_eval_offline import OutsideConnection
from tests.helpers.benchmark import TRAINED_MODULE, make_upstream, prose, run_stage

@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = make_upstream(tmp_path_factory.mktemp("bench-stage"))
    result, scores = run_stage(root)
    return root, result, scores


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_scores_before_and_after_with_standard_errors(staged):
    root, result, scores = staged
    assert result.ok and scores["models"]["after"] == {"what": "sft", "path": "data/sft", "backend": "forgeline"}
    assert scores["models"]["before"]["what"] == "pretrain"
    tasks = scores["tasks"]
    assert set(tasks) == {"forgeline_docstring_cloze", "forgeline_prose_choice", "forgeline_prose_ppl"}
    for name in ("forgeline_docstring_cloze", "forgeline_prose_choice"):
        acc = tasks[name]["metrics"]["acc"]
        assert 0 <= acc["after"] <= 1 and 0 < acc["after_stderr"] < 0.5 and acc["before"] is not None
        assert tasks[name]["n"] == 12 and acc["higher_is_better"] is True
    ppl = tasks["forgeline_prose_ppl"]["metrics"]["word_perplexity"]
    assert ppl["after"] > 1 and ppl["after_stderr"] is None and ppl["higher_is_better"] is False
    assert result.counts["after"]["forgeline_prose_choice"]["acc_stderr"] == tasks["forgeline_prose_choice"][
        "metrics"]["acc"]["after_stderr"]
    card = scores["card"]
    assert card["columns"] == ["task", "metric", "before (pretrain)", "after (sft)", "n"]
    assert len(card["rows"]) == 7 and all(len(r) == 5 for r in card["rows"])
    assert scores["lm_eval"]["command_on_export"].startswith(
        "lm_eval run --model hf --model_args pretrained=data/export/hf,dtype=float32,prefix_token_id=0 --tasks ")


def test_shipped_tasks_hold_only_text_the_model_did_not_train_on(staged):
    root, _, _ = staged
    folder = root / "data" / "benchmark" / "tasks"
    train = {i for row in pq.read_table(root / "data/mix/train.idx.parquet").column("doc_ids").to_pylist()
             for i in row}
    trained_text = [t for i, t in enumerate(prose()) if f"lit/{i}" in train]
    choice = [json.loads(line) for line in (folder / "forgeline_prose_choice.jsonl").read_text().splitlines()]
    assert choice and not any(d["context"] in t for d in choice for t in trained_text)
    cloze = [json.loads(line) for line in (folder / "forgeline_docstring_cloze.jsonl").read_text().splitlines()]
    assert len(cloze) == 12 and not any(d["origin"].startswith(TRAINED_MODULE + "#") for d in cloze)
    yaml_text = (folder / "forgeline_prose_choice.yaml").read_text()
    assert "dataset_path: json" in yaml_text and "data/benchmark/tasks/forgeline_prose_choice.jsonl" in yaml_text


def test_rerun_writes_the_same_bytes(staged, tmp_path):
    root, _, scores = staged
    before = _tree(root / "data" / "benchmark")
    copy = make_upstream(tmp_path / "again")
    run_stage(copy)
    assert _tree(copy / "data" / "benchmark") == before


def test_the_gate_fails_below_a_minimum_and_on_a_regression(staged):
    root, _, scores = staged
    acc = scores["tasks"]["forgeline_prose_choice"]["metrics"]["acc"]
    result, gated = run_stage(root, gate={"min_scores": {"forgeline_prose_choice/acc": acc["after"] + 0.01,
                                                         "forgeline_docstring_cloze/acc": 0.0},
                                          "max_regression": 0.0})
    checks = {c["check"]: c for c in gated["gate"]}
    assert not result.ok and "FAILED" in result.summary and result.counts["gate_failed"] >= 1
    assert not checks[f"forgeline_prose_choice/acc ≥ {acc['after'] + 0.01:g}"]["passed"]
    assert checks["forgeline_docstring_cloze/acc ≥ 0"]["passed"]
    regression = [c for c in gated["gate"] if "regression" in c["check"]]
    assert len(regression) == 4  # acc and acc_norm of the two multiple-choice tasks; perplexities are not read
    for c in regression:
        task, metric = c["check"].split(" ")[0].split("/")
        cell = gated["tasks"][task]["metrics"][metric]
        assert c["measured"] == pytest.approx(cell["before"] - cell["after"]) and c["passed"] == (c["measured"] <= 0)


@pytest.mark.slow
def test_hf_backend_gives_the_adapters_scores_and_nothing_reaches_outside(staged, tmp_path, monkeypatch):
    root, _, scores = staged
    copy = make_upstream(tmp_path / "hf")
    outside: list = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):  # any non-loopback attempt by anything in the stage fails this test
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            outside.append(address)
            raise OSError("test: no network")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in (None, "", "127.0.0.1", "::1", "localhost"):
            outside.append(host)
            raise OSError("test: no network")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # the stage must switch them on itself
        monkeypatch.delenv(var, raising=False)
    result, hf = run_stage(copy, backend="hf")
    assert outside == [] and result.ok and hf["models"]["after"]["backend"] == "hf"
    for task, row in scores["tasks"].items():
        for metric, cell in row["metrics"].items():
            other = hf["tasks"][task]["metrics"][metric]
            for key in ("after", "before"):
                assert other[key] == pytest.approx(cell[key], rel=1e-4), (task, metric, key)
    assert (copy / "work" / "benchmark" / "after-hf" / "model.safetensors").is_file()


def test_a_task_that_reaches_for_the_network_fails_the_stage_even_if_it_swallows_the_error(staged, tmp_path):
    root, _, _ = staged
    copy = make_upstream(tmp_path / "leak")
    tasks = copy / "my_tasks"
    tasks.mkdir()
    (tasks / "leaky.py").write_text(
        "import socket\n\ndef process_docs(ds):\n    try:\n        socket.getaddrinfo('huggingface.co', 443)\n"
        "    except Exception:\n        pass\n    return ds\n")
    (tasks / "items.jsonl").write_text('{"q": "2+2?", "c": [" 4", " 5"]}\n')
    (tasks / "leaky.yaml").write_text(
        "task: leaky\ndataset_path: json\ndataset_kwargs: {data_files: {test: my_tasks/items.jsonl}}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{c}}'\n"
        "doc_to_target: 0\nprocess_docs: !function leaky.process_docs\n")
    with pytest.raises(OutsideConnection, match="huggingface.co"):
        run_stage(copy, tasks=["leaky"], include_path=["my_tasks"])


def test_the_model_card_shows_before_and_after(staged):
    from specs.export import ExportSpec
    from tasks.eval.export_card import build_card
    from tasks.train.inputs.chat import jinja_template
    from tasks.train.hf.hf_card import render_card
    from tasks.train.hf.hf_export import hf_config
    from tests.helpers.benchmark import CFG

    root, _, scores = staged
    card = build_card(ExportSpec(), {}, [], jinja_template(), root, root / "data" / "sft")
    assert len(card["benchmarks"]) == len(scores["card"]["rows"])
    assert "lm_eval run --model hf" in card["benchmark_notes"]
    text = render_card(card, hf_config(CFG), 1, {})
    assert "## Benchmarks\n\n| task | metric | before (pretrain) | after (sft) | n |" in text
    acc = scores["tasks"]["forgeline_prose_choice"]["metrics"]["acc"]
    assert (f"| forgeline_prose_choice | acc | {acc['before']:.4g} ± {acc['before_stderr']:.2g} | "
            f"{acc['after']:.4g} ± {acc['after_stderr']:.2g} | 12 |") in text
