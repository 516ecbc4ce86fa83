"""Stage `prefer_data`: downloaded sets in TRL's and open-instruct's shapes (jsonl and parquet), every pair kept or
dropped with its reason, prompt dedup, decontamination against evaluate's prompts and benchmark files, the held-out
slice, the length-bias report, and the embedded default's rejected kinds (with a stand-in for the SFT model)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.prefer import EmbeddedPreferenceSource, FilesPreferenceSource, PreferDataJob, PreferDataSpec
from tasks import prefer_data
from tasks.core.runner import StagePaths
from tasks.data.curation.preference import embedded_pairs
from tests.helpers.sft import write_jsonl

SEED = 7


def conv(prompt: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]


def approve(root: Path) -> None:
    (root / "data" / "review_sft").mkdir(parents=True, exist_ok=True)
    (root / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "approve", "reviewer": "auto", "mode": "auto", "sample_sha256": "0" * 64, "items": []}))


def run(root: Path, sources: list, **data) -> tuple[object, dict, list[dict], list[dict], list[dict]]:
    job = PreferDataJob(data=PreferDataSpec(sources=sources, **data),
                        eval_prompts=["Describe the lighthouse keeper's daily routine on the northern coast."])
    result = prefer_data.run(job, StagePaths(root=root, stage="prefer_data", seed=SEED))
    out = root / "data" / "prefer_data"
    read = lambda n: [json.loads(x) for x in (out / n).read_text().splitlines()]  # noqa: E731
    return result, json.loads((out / "report.json").read_text()), read("train.jsonl"), read("heldout.jsonl"), \
        pq.read_table(out / "dropped.parquet").to_pylist()


@pytest.fixture
def root(tmp_path) -> Path:
    approve(tmp_path)
    (tmp_path / "downloads").mkdir()
    good = [{"prompt": f"How do I bake bread number {i} at home?", "chosen": f"Knead the dough well, {i}.",
             "rejected": "No."} for i in range(12)]
    trl_shape = good + [
        {"prompt": [{"role": "user", "content": "How do I bake bread number 3 at home?"}],   # exact dup prompt
         "chosen": [{"role": "assistant", "content": "Use flour."}], "rejected": "Use sand."},
        {"prompt": "Same?", "chosen": "  yes  ", "rejected": "yes"},                          # identical
        {"prompt": "Empty?", "chosen": "fine", "rejected": "   "},                             # empty
        {"prompt": "Describe the lighthouse keeper's daily routine on the northern coast.",   # contaminated
         "chosen": "He climbs.", "rejected": "He sleeps."},
        {"prompt": "Quote the benchmark.", "chosen": "The quick brown fox jumps over the lazy dog twice daily.",
         "rejected": "No."},                                                                    # benchmark item
        {"prompt": "multi", "chosen": conv("a", "b") + conv("c", "d"), "rejected": "x"},       # 2-turn answer
    ]
    write_jsonl(tmp_path / "downloads" / "trl.jsonl", trl_shape)
    (tmp_path / "downloads" / "trl.jsonl").open("a").write("{not json\n")
    rows = [{"chosen": conv(f"What is the capital of country {i}?", f"City {i}."),
             "rejected": conv(f"What is the capital of country {i}?", "I do not know.")} for i in range(5)]
    rows.append({"chosen": conv("one", "a"), "rejected": conv("two", "b")})  # prompts differ: refused
    rows.append({"prompt": "Name a river.", "chosen": conv("Name a river.", "The Nile."),   # UltraFeedback's
                 "rejected": conv("Name a river.", "A road.")})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "downloads" / "oi.parquet")  # lists of structs
    write_jsonl(tmp_path / "bench.jsonl", [{"question": "the quick brown fox jumps over the lazy dog", "answer": "A"}])
    return tmp_path


def test_every_pair_is_kept_or_dropped_with_its_reason(root):
    sources = [FilesPreferenceSource(name="trl", paths=["downloads/trl.jsonl"]),
               FilesPreferenceSource(name="oi", paths=["downloads/oi.parquet"], split="heldout")]
    result, report, train, heldout, dropped = run(root, sources, benchmark_files=["bench.jsonl"], heldout_count=2)
    by = {r["filter"]: r for r in dropped}
    assert set(by) == {"parse", "identical", "empty", "decontamination", "exact_duplicate"}
    assert sum(r["filter"] == "parse" for r in dropped) == 3  # bad JSON, a two-turn answer, differing prompts
    assert "bench.jsonl:1" in next(r["reason"] for r in dropped if r["id"] == "trl/downloads/trl.jsonl:17")
    assert "eval prompt #0" in by["decontamination"]["reason"] or "bench" in by["decontamination"]["reason"]
    assert "asked before by trl/downloads/trl.jsonl:4" in by["exact_duplicate"]["reason"]
    assert report["read"] == len(train) + len(heldout) + len(dropped) == 26
    assert any(p["chosen"] == "The Nile." and p["rejected"] == "A road." for p in heldout)
    assert {p["source"] for p in heldout} == {"oi", "trl"} and sum(p["source"] == "trl" for p in heldout) == 2
    assert all(p["prompt"][-1]["role"] == "user" and p["chosen"] != p["rejected"] for p in train + heldout)
    oi = next(p for p in heldout if p["source"] == "oi")
    assert oi["prompt"] == [{"role": "user", "content": oi["prompt"][0]["content"]}] and oi["chosen"].startswith("City")
    bias = report["length_bias"]
    assert bias["pairs"] == len(train + heldout) and set(bias["by_source"]) == {"oi", "trl"}
    assert bias["by_source"]["trl"]["chosen_longer_share"] == 1.0   # "Knead the dough well, i." vs "No."
    assert bias["by_source"]["oi"]["chosen_longer_share"] == 0.0    # "City i." vs "I do not know."
    assert result.counts["chosen_rejected_length_ratio"] == bias["ratio_of_means"]


def test_rerun_is_byte_identical_and_near_duplicate_prompts_go(root):
    write_jsonl(root / "downloads" / "near.jsonl", [
        {"prompt": "Please explain how the old water mill by the river grinds the grain into flour", "chosen": "a b",
         "rejected": "c"},
        {"prompt": "Please explain how the old water mill by the river grinds the grain into fine flour",
         "chosen": "d e", "rejected": "f"}])
    sources = [FilesPreferenceSource(name="near", paths=["downloads/near.jsonl"])]
    run(root, sources)
    out = root / "data" / "prefer_data"
    first = {n: (out / n).read_bytes() for n in ("train.jsonl", "heldout.jsonl", "dropped.parquet", "report.json")}
    _, report, train, heldout, dropped = run(root, sources)
    assert {n: (out / n).read_bytes() for n in first} == first
    assert [r["filter"] for r in dropped] == ["near_duplicate"] and len(train + heldout) == 1
    assert report["dedup"]["near_dropped"] == 1


def test_an_unapproved_sft_model_is_refused(root):
    (root / "data" / "review_sft" / "decision.json").write_text(json.dumps(
        {"decision": "reject", "reviewer": "ada", "notes": "rambles", "mode": "terminal",
         "sample_sha256": "0" * 64, "items": []}))
    with pytest.raises(ValueError, match="rejected the SFT model.*rambles"):
        run(root, [FilesPreferenceSource(name="trl", paths=["downloads/trl.jsonl"])])


def test_embedded_default_builds_each_rejected_kind(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"id": f"t{i}", "source": "s" + str(i % 2), "messages":
                                            conv(f"Question {i}?", f"Answer {i} is a long one here.")}
                                           for i in range(12)])
    write_jsonl(tmp_path / "heldout.jsonl", [{"id": f"h{i}", "source": "s0",
                                              "messages": conv(f"Held {i}?", f"Held {i}.")} for i in range(2)])
    asked = []

    def fake_sft(prompts):
        asked.extend(p[-1]["content"] for p in prompts)
        return [f"greedy {p[-1]['content']}" if "1" not in p[-1]["content"] else "  " for p in prompts]

    src = EmbeddedPreferenceSource(name="inst", rejected=["sft_greedy", "other_answer", "truncated"], max_pairs=9)
    pairs, not_taken = embedded_pairs(src, tmp_path, SEED, fake_sft)
    assert not_taken == 3 and len(pairs) == 11 and [p.split for p in pairs[-2:]] == ["heldout"] * 2
    kinds = {p.kind for p in pairs}
    assert kinds == {"sft_greedy", "other_answer", "truncated"}
    for p in pairs:
        assert p.chosen.startswith(("Answer", "Held")) and p.prompt[-1]["role"] == "user"
        if p.kind == "sft_greedy":
            assert p.rejected == f"greedy {p.prompt[-1]['content']}" and "1" not in p.prompt[-1]["content"]
        elif p.kind == "truncated":
            assert p.chosen.startswith(p.rejected) and len(p.rejected.split()) == len(p.chosen.split()) // 2
        else:
            assert p.rejected != p.chosen and p.rejected.startswith(("Answer", "Held"))
    empty = [q for q in asked if "1" in q]  # the model ended its turn at once: another prompt's answer instead
    assert empty and all(p.kind == "other_answer" for p in pairs if p.prompt[-1]["content"] in empty)
    assert sorted(set(asked) - set(empty)) == sorted(p.prompt[-1]["content"] for p in pairs if p.kind == "sft_greedy")
    again, _ = embedded_pairs(src, tmp_path, SEED, fake_sft)
    assert [p.record() for p in again] == [p.record() for p in pairs]


def test_the_readme_recipe_reads_ultrafeedback_binarized(tmp_path):
    """README's `prefer-downloaded` fragment as written, on files shaped like UltraFeedback-binarized's parquet
    (prompt string, prompt_id, whole chosen/rejected conversations, messages, scores) at the paths it names."""
    from specs.prefer import PreferRefSpec
    from tests.helpers.recipes import readme_recipes

    params = readme_recipes()["prefer-downloaded"].params
    approve(tmp_path)
    folder = tmp_path / "downloads" / "ultrafeedback" / "data"
    folder.mkdir(parents=True)
    for split, n in (("train_prefs", 6), ("test_prefs", 2)):
        rows = [{"prompt": f"{split} question {i}: how do rivers form?", "prompt_id": f"{split}-{i:04d}",
                 "chosen": conv(f"{split} question {i}: how do rivers form?", f"Rain gathers into streams, {i}."),
                 "rejected": conv(f"{split} question {i}: how do rivers form?", "Rivers are made of bread."),
                 "messages": conv(f"{split} question {i}: how do rivers form?", f"Rain gathers into streams, {i}."),
                 "score_chosen": 8.0, "score_rejected": 2.0} for i in range(n)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{split}-00000-of-00001.parquet")
    job = PreferDataJob(data=PreferDataSpec.model_validate(params["prefer_data"]))
    prefer_data.run(job, StagePaths(root=tmp_path, stage="prefer_data", seed=SEED))
    out = tmp_path / "data" / "prefer_data"
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    heldout = [json.loads(x) for x in (out / "heldout.jsonl").read_text().splitlines()]
    assert sorted(p["id"] for p in heldout) == [f"ultrafeedback_test/test_prefs-000{i}" for i in range(2)]
    assert len(train) == 6
    assert all(p["chosen"].startswith("Rain") and p["rejected"] == "Rivers are made of bread." for p in train + heldout)
    assert PreferRefSpec.model_validate(params["prefer_ref"]).row_len == 2048
