"""The benchmark's offline guarantees: outside connections refused (even when a library swallows the error), the
Hugging Face libraries switched offline and restored, and task definitions that would reach the Hub refused by
name before anything loads (a Hub dataset, a URL, a metric lm-eval would fetch, a group over Hub tasks)."""

from __future__ import annotations

import os
import socket

import pytest

from tasks.eval.lm_eval_offline import OutsideConnection, no_outside_connections, offline, offline_problems

LOCAL_TASK = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{q}}}}"
doc_to_choice: "{{{{c}}}}"
doc_to_target: 0
metric_list: {metrics}
"""


def test_outside_hosts_are_refused_and_loopback_is_not():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)  # the kernel completes the handshake into the backlog: no accept needed
    with no_outside_connections() as attempts:
        with socket.create_connection(server.getsockname(), timeout=5):
            pass  # loopback works (Prefect's local server, a Dask scheduler on 127.0.0.1)
        assert socket.getaddrinfo("localhost", 80)
        assert attempts == []
    server.close()
    for reach in (lambda: socket.create_connection(("93.184.216.34", 443), timeout=1),
                  lambda: socket.getaddrinfo("huggingface.co", 443)):
        with pytest.raises(OutsideConnection, match="outside connection"):
            with no_outside_connections():
                reach()
    assert socket.socket.connect is not None and socket.getaddrinfo.__module__ == "socket"  # restored


def test_an_attempt_a_library_swallows_still_fails_the_block():
    with pytest.raises(OutsideConnection, match="huggingface.co"):
        with no_outside_connections():
            try:
                socket.getaddrinfo("huggingface.co", 443)
            except Exception:  # what a "best effort" lookup (a model's hub sha) does with the error
                pass


def test_offline_switches_the_hf_libraries_and_restores_them(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    with offline(tmp_path / "hf_home"):
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"
        assert os.environ["HF_HOME"] == str(tmp_path / "hf_home") and hub.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ and hub.HF_HUB_OFFLINE is False
    assert os.environ.get("HF_HOME") != str(tmp_path / "hf_home")


def test_tasks_that_would_reach_the_hub_are_named_before_anything_loads(tmp_path):
    from lm_eval.tasks import TaskManager

    data = tmp_path / "items.jsonl"
    data.write_text('{"q": "2+2?", "c": [" 4", " 5"]}\n')
    acc = '[{metric: acc}]'
    files = {
        "good": LOCAL_TASK.format(name="good", data=data, metrics=acc),
        "hub": LOCAL_TASK.format(name="hub", data=data, metrics=acc).replace("dataset_path: json",
                                                                              "dataset_path: allenai/ai2_arc"),
        "url": LOCAL_TASK.format(name="url", data="https://example.org/x.jsonl", metrics=acc),
        "missing": LOCAL_TASK.format(name="missing", data=tmp_path / "nope.jsonl", metrics=acc),
        "fetched_metric": LOCAL_TASK.format(name="fetched_metric", data=data, metrics="[{metric: sacrebleu_score}]"),
        "hf_metric": LOCAL_TASK.format(name="hf_metric", data=data, metrics="[{metric: acc, hf_evaluate: true}]"),
        "mygroup": "group: mygroup\ntask: [good, hub]\n",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    index = TaskManager(include_path=str(tmp_path), include_defaults=False).task_index
    assert offline_problems(["good"], index, tmp_path) == []
    problems = offline_problems([n for n in files if n != "good"] + ["arc_easy"], index, tmp_path)
    text = "\n".join(problems)
    assert "hub: dataset_path 'allenai/ai2_arc' is a Hugging Face Hub dataset" in text
    assert "url: data file 'https://example.org/x.jsonl' is a URL" in text
    assert f"missing: data file {tmp_path / 'nope.jsonl'} does not exist" in text
    assert "fetched_metric: metric 'sacrebleu_score' is not one of lm-eval's own" in text
    assert "hf_metric: metric 'acc' asks for Hugging Face `evaluate`" in text
    assert "hub (in mygroup): dataset_path 'allenai/ai2_arc'" in text  # a group's Hub member is found
    # lm-eval's own tasks are not indexed: they name Hub datasets
    assert "arc_easy: no such task in the shipped tasks, benchmark.files or benchmark.include_path" in text
