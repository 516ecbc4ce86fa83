"""Instruct and prefer_data on hostile user lines, through the real stages: text no UTF-8 can hold (a JSON
"\\ud800" escape), prompts SFT's template cannot render (unknown roles, a system turn in the middle, turns out
of order) and JSON lines that are not objects are dropped with their reason and line, never a crash of the
stage (or of prefer_ref downstream)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from specs.instruct import InstructJob, InstructSpec
from specs.prefer import FilesPreferenceSource, PreferDataJob, PreferDataSpec
from tasks.core.runner import StagePaths

ANSWER = "The answer explains the topic in a few clear words, and that is the whole of it."


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def lines(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"
    path.write_bytes(text.encode("utf-8"))   # json.dumps writes "\ud800" as an escape, as a real file holds it


def test_instruct_drops_text_no_utf8_can_hold(tmp_path):
    import tasks.instruct as instruct

    lines(tmp_path / "inputs" / "chat.jsonl", [
        {"messages": [user("What is the capital of France today?"), assistant(ANSWER)]},
        {"messages": [user("How do lone surrogates \ud800 behave in a prompt?"), assistant(ANSWER + " Two.")]}])
    spec = InstructSpec.model_validate({"sources": [{"name": "chats", "kind": "files", "paths": ["inputs"]}],
                                        "heldout_count": 0, "max_train_pairs": None})
    result = instruct.run(InstructJob(instruct=spec, eval_prompts=["zzz"]),
                          StagePaths(root=tmp_path, stage="instruct", seed=7))
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in ledger] == [("chats/inputs/chat.jsonl:2", "format")]
    assert "not valid Unicode" in ledger[0]["reason"] and "\\ud800" in ledger[0]["excerpt"]
    assert result.counts["train"] == 1


def test_prefer_data_drops_prompts_sft_cannot_render_and_invalid_text(tmp_path):
    import tasks.prefer_data as prefer_data

    (tmp_path / "data" / "review_sft").mkdir(parents=True)
    (tmp_path / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))
    bad = {
        2: {"prompt": [user("hi there"), {"role": "tool", "content": "x"}, user("and now?")]},
        3: {"prompt": [user("first question"), {"role": "system", "content": "be nice"}, user("second one")]},
        4: {"prompt": [user("two users"), user("in a row")]},
        5: {"prompt": [assistant("assistant first"), user("then the user asks")]},
        6: {"prompt": "a lone surrogate \ud800 in the prompt"},
        7: {"prompt": "a fine prompt", "rejected": "a lone surrogate \udfff in the answer"},
        8: "\"a JSON string, not an object\"",
    }
    rows = [{"prompt": "How do I bake bread at home?", "chosen": "Knead the dough well.", "rejected": "No."}]
    rows += [v if isinstance(v, str) else {"chosen": "A kind answer here.", "rejected": "A rude one.", **v}
             for _, v in sorted(bad.items())]
    lines(tmp_path / "d" / "pairs.jsonl", rows)
    job = PreferDataJob(data=PreferDataSpec(sources=[FilesPreferenceSource(name="f", paths=["d"])],
                                            heldout_fraction=0), eval_prompts=["zzz"])
    result = prefer_data.run(job, StagePaths(root=tmp_path, stage="prefer_data", seed=7))
    dropped = {r["id"]: r for r in pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()}
    assert set(dropped) == {f"f/d/pairs.jsonl:{n}" for n in bad}
    assert all(r["filter"] == "parse" for r in dropped.values())
    assert "role 'tool'" in dropped["f/d/pairs.jsonl:2"]["reason"]
    assert "alternate" in dropped["f/d/pairs.jsonl:3"]["reason"]
    assert "not valid Unicode" in dropped["f/d/pairs.jsonl:7"]["reason"]
    assert dropped["f/d/pairs.jsonl:8"]["reason"].endswith("expected an object, got str")
    assert result.counts["train"] == 1


def test_prefer_data_ledgers_a_parquet_file_cut_short(tmp_path):
    import pyarrow as pa

    import tasks.prefer_data as prefer_data

    (tmp_path / "data" / "review_sft").mkdir(parents=True)
    (tmp_path / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))
    (tmp_path / "d").mkdir()
    pq.write_table(pa.Table.from_pylist([{"prompt": f"How do I bake bread {i}?", "chosen": "Knead it well.",
                                          "rejected": "No."} for i in range(20)]), tmp_path / "d" / "a.parquet")
    whole = (tmp_path / "d" / "a.parquet").read_bytes()
    (tmp_path / "d" / "b.parquet").write_bytes(whole[: len(whole) // 2])
    job = PreferDataJob(data=PreferDataSpec(sources=[FilesPreferenceSource(name="f", paths=["d"])],
                                            heldout_fraction=0), eval_prompts=["zzz"])
    result = prefer_data.run(job, StagePaths(root=tmp_path, stage="prefer_data", seed=7))
    dropped = pq.read_table(tmp_path / "data" / "prefer_data" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in dropped] == [("f/d/b.parquet", "parse")]
    assert "unreadable file" in dropped[0]["reason"] and str(tmp_path) not in dropped[0]["reason"]
    assert result.counts["train"] == 20


def test_instruct_does_not_read_a_link_out_of_its_folder(tmp_path):
    import os

    import tasks.instruct as instruct

    (tmp_path / "secret.txt").write_text("API_KEY=hunter2\n")
    lines(tmp_path / "inputs" / "chat.jsonl",
          [{"messages": [user("What is the capital of France today?"), assistant(ANSWER)]}])
    os.symlink(tmp_path / "secret.txt", tmp_path / "inputs" / "notes.jsonl")
    spec = InstructSpec.model_validate({"sources": [{"name": "chats", "kind": "files", "paths": ["inputs"]}],
                                        "heldout_count": 0, "max_train_pairs": None})
    instruct.run(InstructJob(instruct=spec, eval_prompts=["zzz"]), StagePaths(root=tmp_path, stage="instruct", seed=7))
    ledger = pq.read_table(tmp_path / "data" / "instruct" / "dropped.parquet").to_pylist()
    assert [(r["id"], r["filter"]) for r in ledger] == [("chats/inputs/notes.jsonl", "parse")]
    assert "outside" in ledger[0]["reason"] and "hunter2" not in json.dumps(ledger)
