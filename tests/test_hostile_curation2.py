"""prefer_data and instruct on hostile inputs, second round: the decontamination `benchmark_files` are DVC deps
of prefer_data (an edited benchmark file re-runs it) and are read a line at a time with a clear refusal naming the
file and line (not JSON, nested too deep, not UTF-8, not a regular file, too large); conversations and pairs
already dropped for length are neither scored nor held; a line naming a mapped key twice is refused as invalid
JSON (as ingest does), and prefer_data's `"prompt": null` beside `messages` takes the messages."""

from __future__ import annotations

import json
import os
import signal
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specs import Params
from tasks.core import datadeps, graph
from tasks.data.curation import preference_filters as pf
from tasks.data.curation.preference_filters import BenchmarkFileError
from tests.conftest import tiny_params
from tests.test_data_deps import OUTS, params_with


def traced_peak(call):
    """`call()`'s result and the peak of Python allocations while it ran (tracemalloc)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

def test_prefer_data_benchmark_files_are_its_data_deps(tmp_path):
    """Before: only the sources were listed, so editing bench.jsonl never re-ran prefer_data and `check` said ok."""
    params = params_with(
        tmp_path,
        prefer_data={"sources": [{"name": "uf", "kind": "files", "paths": ["downloads/uf/train-*.parquet"]}],
                     "benchmark_files": ["bench/own.jsonl", "downloads/uf/x.jsonl"]})
    assert datadeps.stage_deps(params, "prefer_data", tmp_path, OUTS) == ["downloads/uf", "bench/own.jsonl"]
    embedded_only = params_with(tmp_path, prefer_data={"benchmark_files": ["bench.jsonl"]})
    assert datadeps.stage_deps(embedded_only, "prefer_data", tmp_path, OUTS) == ["bench.jsonl"]


def test_check_says_dvc_yaml_lags_when_params_name_a_benchmark_file(tmp_path):
    """`python -m tasks check` on a project whose params name bench.jsonl and whose dvc.yaml lacks it."""
    import yaml

    raw = tiny_params(tmp_path)
    raw["prefer_data"] = {**raw.get("prefer_data", {}), "benchmark_files": ["bench.jsonl"]}
    (tmp_path / "bench.jsonl").write_text(json.dumps({"text": "What is the capital of France?"}) + "\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(Params.model_validate(raw).dump(), sort_keys=False))
    (tmp_path / "dvc.yaml").write_text(graph.dvc_yaml_text(graph.CODE_ROOT))   # generated without the file
    problems = graph.check_dvc_yaml(tmp_path)
    assert any("stage 'prefer_data' does not depend on bench.jsonl" in p for p in problems), problems
    (tmp_path / "dvc.yaml").write_text(graph.dvc_yaml_text(tmp_path))           # as `graph --write` makes it
    assert graph.check_dvc_yaml(tmp_path) == []
    assert "bench.jsonl" in yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]["prefer_data"]["deps"]


# --------------------------------------------------------------------------------- F6: hostile benchmark_files
def approve(root: Path) -> None:
    (root / "data" / "review_sft").mkdir(parents=True, exist_ok=True)
    (root / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))


def pair_rows(n: int, answer: str = "Knead the dough well and wait.") -> list[dict]:
    return [{"prompt": f"How do I bake bread number {i} at home?", "chosen": f"{answer} {i}", "rejected": "No."}
            for i in range(n)]


def write_rows(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def run_prefer(root: Path, max_pairs: int | None = None, **data):
    import tasks.prefer_data as prefer_data
    from specs.prefer import FilesPreferenceSource, PreferDataJob, PreferDataSpec
    from tasks.core.runner import StagePaths

    approve(root)
    source = FilesPreferenceSource(name="f", paths=["d"], max_pairs=max_pairs)
    job = PreferDataJob(data=PreferDataSpec(sources=[source], heldout_fraction=0, **data), eval_prompts=["zzz"])
    return prefer_data.run(job, StagePaths(root=root, stage="prefer_data", seed=7))


@pytest.mark.parametrize("name, body, expect", [
    ("bad.jsonl", b'{"text": "a fine benchmark question here"}\n{not json\n', "bench/bad.jsonl:2: invalid JSON"),
    ("deep.jsonl", b"\n" + b"[" * 200_000 + b"]" * 200_000 + b"\n", "bench/deep.jsonl:2: invalid JSON (nested"),
    ("nonutf8.txt", b"a fine line\n\xff\xfe broken\n", "bench/nonutf8.txt:2: not UTF-8"),
], ids=["not_json", "deep", "not_utf8"])
def test_a_benchmark_file_that_is_no_benchmark_is_refused_naming_file_and_line(tmp_path, name, body, expect):
    """Before: a bare JSONDecodeError / RecursionError / UnicodeDecodeError traceback naming no file."""
    write_rows(tmp_path / "d" / "pairs.jsonl", pair_rows(2))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / name).write_bytes(body)
    with pytest.raises(BenchmarkFileError) as err:
        run_prefer(tmp_path, benchmark_files=[f"bench/{name}"])
    assert expect in str(err.value) and "prefer_data.benchmark_files" in str(err.value)


class Hung(Exception):
    pass


def within(seconds: int, fn, *args):
    """`fn(*args)`, or Hung after `seconds` (a regression that blocks on a FIFO fails, not hangs, the suite)."""
    def ring(*_):
        raise Hung()

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_benchmark_file_that_is_a_device_or_fifo_is_refused_unread(tmp_path):
    """Before: a link to /dev/zero read until MemoryError, a FIFO blocked the stage forever."""
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.txt")
    for name in ("zero.txt", "fifo.txt"):
        with pytest.raises(BenchmarkFileError, match=f"{name} is not a regular file"):
            within(10, pf.benchmark_texts, tmp_path, name)
    with pytest.raises(BenchmarkFileError, match="missing.jsonl: cannot open it"):
        pf.benchmark_texts(tmp_path, "missing.jsonl")


def test_a_benchmark_file_or_line_over_its_cap_is_refused(tmp_path, monkeypatch):
    (tmp_path / "big.txt").write_text("a benchmark line of some words\n" * 10)    # 310 bytes
    monkeypatch.setattr(pf, "BENCHMARK_MAX_BYTES", 100)
    with pytest.raises(BenchmarkFileError, match="big.txt holds 310 bytes, over the 100-byte cap"):
        pf.benchmark_texts(tmp_path, "big.txt")
    monkeypatch.setattr(pf, "BENCHMARK_MAX_BYTES", 1000)
    monkeypatch.setattr(pf, "BENCHMARK_LINE_BYTES", 20)
    with pytest.raises(BenchmarkFileError, match="big.txt:1: line over the 20-byte cap"):
        pf.benchmark_texts(tmp_path, "big.txt")


def test_good_benchmark_files_read_as_before(tmp_path):
    """The clean stage's item rule: `text`, else every string (nested too); .txt one item a non-blank line."""
    write_rows(tmp_path / "b.jsonl", [{"text": "t1", "x": "no"}, "", {"q": "a", "choices": [["b"], {"c": "d"}]}])
    (tmp_path / "b.txt").write_bytes(b"one line\r\n\n  \ntwo line\n")
    assert pf.benchmark_texts(tmp_path, "b.jsonl") == [("b.jsonl:1", "t1"), ("b.jsonl:3", "a\nb\nd")]
    assert pf.benchmark_texts(tmp_path, "b.txt") == [("b.txt:1", "one line"), ("b.txt:4", "two line")]


# ------------------------------------------------------------------------- F4: instruct's oversized conversations
ANSWER = "The answer explains the topic in a few clear words, and that is the whole of it."


def chat(prompt: str, answer: str = ANSWER) -> dict:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def run_instruct(root: Path, **source):
    import tasks.instruct as instruct
    from specs.instruct import InstructJob, InstructSpec
    from tasks.core.runner import StagePaths

    spec = InstructSpec.model_validate({"sources": [{"name": "chats", "kind": "files", "paths": ["inputs"], **source}],
                                        "heldout_count": 0, "max_train_pairs": None})
    return instruct.run(InstructJob(instruct=spec, eval_prompts=["zzz"]),
                        StagePaths(root=root, stage="instruct", seed=7))


def test_instruct_does_not_score_a_conversation_dropped_for_length(tmp_path, monkeypatch):
    """Before: every conversation was scored, a 50 MB answer dropped for `length` took 19 s of scoring."""
    import tasks.instruct as instruct

    scored: list[str] = []
    real = instruct.quality_score
    monkeypatch.setattr(instruct, "quality_score", lambda turns: scored.append(turns.prompt) or real(turns))
    write_rows(tmp_path / "inputs" / "chat.jsonl", [chat("What is the capital of France today?"),
                                                     chat("Tell me everything about rivers.", "word " * 2000),
                                                     chat("How do rivers carve their valleys?")])
    result = run_instruct(tmp_path)
    assert result.counts["dropped_by_filter"] == {"length": 1} and result.counts["train"] == 2
    assert sorted(scored) == ["How do rivers carve their valleys?", "What is the capital of France today?"]
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert ledger[0]["excerpt"].startswith("Tell me everything about rivers.\nword word")


def test_instruct_holds_only_the_conversations_it_keeps(tmp_path):
    """Before: every conversation of a source was held before any filter ran (1 GB lines: 1.6 GB per 50 MB
    line); now one dropped conversation at a time. 40 answers of 1 MB dropped for length: ~8 MB, not 40."""
    big = 1 << 20
    write_rows(tmp_path / "warm" / "inputs" / "chat.jsonl", [chat("How do rivers carve their valleys?")])
    run_instruct(tmp_path / "warm")    # the first run imports and builds the embedded data (~70 MB): not traced
    write_rows(tmp_path / "inputs" / "chat.jsonl",
               [chat(f"Question number {i} about rivers?", f"{i} " + "w" * big) for i in range(40)]
               + [chat("How do rivers carve their valleys?")])
    result, peak = traced_peak(lambda: run_instruct(tmp_path))
    assert result.counts["dropped_by_filter"] == {"length": 40} and result.counts["train"] == 1
    assert peak < 16 * big, peak


def test_instruct_max_pairs_takes_the_same_conversations_from_a_bounded_heap(tmp_path):
    """The seeded pick of `max_pairs` is the lowest hash_unit("take", seed, id) then id, as before."""
    import tasks.instruct as instruct

    write_rows(tmp_path / "inputs" / "chat.jsonl",
               [chat(f"Question {i}: how do rivers carve valley number {i} on earth?") for i in range(20)])
    result = run_instruct(tmp_path, max_pairs=5)
    ids = [f"chats/inputs/chat.jsonl:{i}" for i in range(1, 21)]
    want = sorted(sorted(ids, key=lambda c: (instruct.hash_unit("take", 7, c), c))[:5])
    train = [json.loads(x)["id"] for x in (tmp_path / "data" / "instruct" / "train.jsonl").read_text().splitlines()]
    assert sorted(train) == want
    assert result.counts["not_taken"] == 15 and result.counts["read"] == 5


# ------------------------------------------------------------------------ F5: prefer_data's over-length pairs
@pytest.mark.parametrize("max_pairs", [None, 100])
def test_prefer_data_holds_only_the_pairs_it_keeps(tmp_path, max_pairs):
    """Before: every pair was held before any filter ran (10 pairs of 50 MB: 1.6 GB). 40 pairs with a 1 MB
    answer, dropped for length as they are read: a few MB, not 40 (with `max_pairs` too: its heap holds their
    ledger rows, not their text)."""
    big = 1 << 20
    write_rows(tmp_path / "warm" / "d" / "p.jsonl", pair_rows(1))
    run_prefer(tmp_path / "warm")    # the first run imports and builds what every run shares: not traced
    write_rows(tmp_path / "d" / "pairs.jsonl", pair_rows(40, "w" * big) + [
        {"prompt": "A short question that stays?", "chosen": "A kind answer here.", "rejected": "No."}])
    result, peak = traced_peak(lambda: run_prefer(tmp_path, max_pairs))
    assert result.counts["dropped_by_filter"] == {"length": 40} and result.counts["train"] == 1
    assert peak < 16 * big, peak


def test_prefer_data_max_pairs_takes_the_same_pairs_and_ledgers_the_taken_long_ones(tmp_path):
    """The seeded pick is the lowest seeded_unit("take", seed, id) then id, as before; a taken pair dropped for
    length while read is ledgered with its reason, a pair not taken is only counted."""
    from tasks.data.curation.preference import seeded_unit

    rows = pair_rows(20)
    for i in (0, 5, 11, 17):
        rows[i]["chosen"] = "w" * 9000
    rows.insert(3, "{not json")
    write_rows(tmp_path / "d" / "pairs.jsonl", rows)
    result = run_prefer(tmp_path, max_pairs=8)
    ids = [f"f/d/pairs.jsonl:{n}" for n in range(1, 22) if n != 4]
    taken = set(sorted(ids, key=lambda p: (seeded_unit("take", 7, p), p))[:8])
    long = {f"f/d/pairs.jsonl:{n}" for n in (1, 7, 13, 19)}   # rows 0, 5, 11, 17 after the inserted line
    dropped = pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()
    assert {(r["id"], r["filter"]) for r in dropped} == \
        {("f/d/pairs.jsonl:4", "parse")} | {(p, "length") for p in taken & long}
    assert all("chosen of 9000 characters > 8000" in r["reason"] for r in dropped if r["filter"] == "length")
    train = {json.loads(x)["id"] for x in (tmp_path / "data" / "prefer_data" / "train.jsonl").read_text().splitlines()}
    assert train == taken - long
    assert result.counts["not_taken"] == 12 and result.counts["read"] == 9


# ------------------------------------------------------------------------------- F13 / F15: prefer_data's shapes
def test_prefer_data_refuses_a_mapped_key_given_twice_in_one_line(tmp_path):
    """Before: `{"prompt": "a", ..., "prompt": "b"}` silently kept the last prompt; ingest refuses it as
    invalid_json, and so does prefer_data now (a key it does not read may repeat)."""
    write_rows(tmp_path / "d" / "pairs.jsonl", [
        '{"prompt": "How do I bake bread at home?", "chosen": "Knead it.", "rejected": "No.", '
        '"prompt": "How do I poison bread?"}',
        '{"prompt": "How do I bake a cake?", "chosen": "Whisk it.", "rejected": "No.", "x": 1, "x": 2}',
        '{"prompt": "Mention \\"prompt\\" twice: \\"prompt\\"?", "chosen": "Fine.", "rejected": "No."}'])
    result = run_prefer(tmp_path)
    dropped = pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in dropped] == [("f/d/pairs.jsonl:1", "parse")]
    assert "key 'prompt' appears more than once" in dropped[0]["reason"]
    assert result.counts["train"] == 2


def test_instruct_refuses_a_mapped_key_given_twice_in_one_line(tmp_path):
    write_rows(tmp_path / "inputs" / "chat.jsonl", [
        '{"prompt": "What is the capital of France today?", "response": "Paris is.", '
        '"response": "' + ANSWER + '"}',
        json.dumps(chat("How do rivers carve their valleys?"))])
    result = run_instruct(tmp_path)
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in ledger] == [("chats/inputs/chat.jsonl:1", "parse")]
    assert "invalid JSON (key 'response' appears more than once in the object)" in ledger[0]["reason"]
    assert result.counts["train"] == 1


def test_prefer_data_takes_the_prompt_from_messages_when_prompt_is_null(tmp_path):
    """Before: a `"prompt": null` beside `messages` hid them: the pair was read as the implicit-prompt shape and
    refused ("no prompt field")."""
    msgs = [{"role": "user", "content": "How do I bake bread at home?"}]
    write_rows(tmp_path / "d" / "pairs.jsonl", [{"prompt": None, "messages": msgs, "chosen": "Knead the dough.",
                                                  "rejected": "No."}])
    result = run_prefer(tmp_path)
    train = [json.loads(x) for x in (tmp_path / "data" / "prefer_data" / "train.jsonl").read_text().splitlines()]
    assert result.counts["train"] == 1 and train[0]["prompt"] == msgs
