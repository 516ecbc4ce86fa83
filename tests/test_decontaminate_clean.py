"""Clean's `decontamination` filter: a pretraining document sharing a word 13-gram with an evaluate prompt, an SFT
held-out conversation or a benchmark file's item is dropped as `contaminated`; 12 shared words are not enough;
the ledger names the matched text and the shared count; counts are per source; a rerun is byte-identical."""

from __future__ import annotations

import itertools
import json
import re

import pyarrow.parquet as pq
import pytest

from specs import Params
from specs.clean import CleanSpec, DecontaminationSpec
from tasks.core.runner import run_stage
from tasks.data.filtering import filters
from tasks.data.filtering.decontaminate import benchmark_file_texts, keep_indexable
from tasks.data.embedded import read_embedded
from tasks.data.records import RECORD_SCHEMA, Doc, write_table
from tests.helpers.clean import record

PROMPT = ("Describe how the lighthouse keeper measured the height of the evening tide against the old "
          "granite steps near the harbour")                                        # 20 words
ANSWER = ("The committee agreed that every migrating stork should be counted twice before the autumn "
          "census closes its ledgers")                                             # 18 words
BENCH = ("Which gear ratio lets a tandem bicycle climb a steep gravel pass while both riders keep "
         "an even cadence")                                                        # 19 words
SHORT = "the quick brown fox jumps"                                                # 5 words: not indexed


def brute_shared(a: str, b: str, n: int) -> int:
    """Distinct word n-grams common to a and b, by an independent tokenizer (letters and digits only)."""
    def grams(text: str) -> set[tuple[str, ...]]:
        w = re.sub(r"[^a-z0-9]+", " ", text.lower()).split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    return len(grams(a) & grams(b))


def mangle(words: list[str]) -> str:
    """The same words in another case with punctuation between them (it must not hide the overlap)."""
    return " ".join(w.upper() + ("," if i % 3 == 0 else "") if i % 2 else w.capitalize() + "."
                    for i, w in enumerate(words))


def decon_filter(texts, **spec) -> filters.Filter:
    clean = CleanSpec(filters=["decontamination"], decontamination=DecontaminationSpec(**spec))
    (f,) = filters.clean_filters(clean, root=None, index_texts=texts)  # root unused: no wordlist is read
    return f


def test_thirteen_shared_words_drop_twelve_keep():
    f = decon_filter([("evaluate.prompts:tide", PROMPT)])
    words = PROMPT.split()
    filler = "Our town newsletter printed a long story about the harbour this week, and then:"
    quoted = f"{filler} {mangle(words[2:16])} Nobody knew why."                 # 14 words verbatim
    v = f({"text": quoted, "source": "wiki"})
    assert not v.keep and v.reason == "contaminated"
    assert v.signals["shared"] == brute_shared(quoted, PROMPT, 13) == 2
    assert v.signals["match:evaluate.prompts:tide"] == 2 and v.signals["ngram"] == 13
    twelve = f"{filler} {mangle(words[4:16])} Nobody knew why."                 # only 12 consecutive words
    assert brute_shared(twelve, PROMPT, 12) == 1 and f({"text": twelve, "source": "wiki"}).keep
    assert not decon_filter([("p", PROMPT)], ngram=12)({"text": twelve, "source": "wiki"}).keep
    # a look-alike: 14 words but the middle one changed, so no run of 13 survives
    altered = words[2:9] + ["lantern"] + words[10:16]
    assert f({"text": f"{filler} {' '.join(altered)}", "source": "wiki"}).keep


def test_fraction_mode_and_short_texts():
    long_doc = "Intro. " + PROMPT + " " + " ".join(f"word{i}" for i in range(200))
    # containment of the smaller side: the whole prompt is inside the document, share 1.0
    v = decon_filter([("p", PROMPT)], mode="fraction", threshold=0.9)({"text": long_doc, "source": "s"})
    assert not v.keep and v.signals["share"] == 1.0 and v.signals["of"] == 8   # 20 - 13 + 1 prompt 13-grams
    # 4 of the prompt's 8 13-grams (the document has more than 8, so the prompt is the smaller side)
    half = "Intro. " + " ".join(PROMPT.split()[:16]) + " " + " ".join(f"tail{i}" for i in range(20))
    assert decon_filter([("p", PROMPT)], mode="fraction", threshold=0.6)({"text": half, "source": "s"}).keep
    assert not decon_filter([("p", PROMPT)], mode="fraction", threshold=0.5)({"text": half, "source": "s"}).keep
    kept, short = keep_indexable([("a", SHORT), ("b", PROMPT)], min_words=8)
    assert kept == [("b", PROMPT)] and short == 1


def test_benchmark_files_parse_jsonl_strings_and_txt_lines(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"question": "Q one?", "choices": ["a", {"x": "b"}], "n": 3})
                                      + "\n\n" + json.dumps({"text": "T two", "question": "ignored"}) + "\n")
    (tmp_path / "t.txt").write_text("first line\n\n  \nthird line\n")
    assert benchmark_file_texts(tmp_path / "t.jsonl", "t.jsonl") == [("t.jsonl:1", "Q one?\na\nb"),
                                                                       ("t.jsonl:3", "T two")]
    assert benchmark_file_texts(tmp_path / "t.txt", "t.txt") == [("t.txt:1", "first line"),
                                                                 ("t.txt:4", "third line")]
    (tmp_path / "t.csv").write_text("x\n")
    with pytest.raises(ValueError, match="neither"):
        benchmark_file_texts(tmp_path / "t.csv", "t.csv")


def build(root):
    """Six articles and three modules; four carry planted quotes. Returns the expected contaminated ids."""
    wiki = [d for d in itertools.islice(read_embedded("encyclopedia"), 8) if isinstance(d, Doc)][:6]
    code = [d for d in itertools.islice(read_embedded("code"), 12) if isinstance(d, Doc)][:3]
    texts = {f"wiki/{d.key}": d.text for d in wiki} | {f"code/{d.key}": d.text for d in code}
    ids = list(texts)
    words = PROMPT.split()
    texts[ids[1]] += "\n\n" + mangle(words[3:17]) + "."                      # eval prompt, 14 words
    texts[ids[2]] += "\n\n" + " ".join(words[:12]) + "."                     # 12 words only: kept
    texts[ids[3]] += "\n\nAs the quiz asked: " + BENCH.lower() + "? Answer: 3:1."  # benchmark item 2
    texts[ids[4]] += "\n\n" + SHORT.upper() + "!"                            # too short to be indexed
    texts[ids[7]] += "\n# " + ANSWER + "\n"                                  # held-out SFT answer, in code
    rows = [record(i.split("/")[0], i.split("/", 1)[1], t) for i, t in texts.items()]
    shards = root / "data/ingest/shards"
    shards.mkdir(parents=True)
    for n in range(0, len(rows), 4):
        write_table(rows[n:n + 4], RECORD_SCHEMA, shards / f"mixed-{n // 4:05d}.parquet")
    (root / "bench").mkdir()
    (root / "bench/tasks.jsonl").write_text(json.dumps({"question": "An unrelated question about the moon?"})
                                            + "\n" + json.dumps({"question": BENCH, "choices": ["1:1", "3:1"]}))
    (root / "bench/short.txt").write_text(SHORT + "\n")
    (root / "data/instruct").mkdir(parents=True)
    (root / "data/instruct/heldout.jsonl").write_text(json.dumps(
        {"id": "pairs/7", "source": "pairs", "score": 0.9, "messages": [
            {"role": "user", "content": "How are storks counted?"}, {"role": "assistant", "content": ANSWER}]}) + "\n")
    return {ids[1]: "evaluate.prompts:tide", ids[3]: "bench/tasks.jsonl:2", ids[7]: "heldout.jsonl:pairs/7"}


PARAMS = {"run": {"seed": 5},
          "ingest": {"sources": [{"name": "wiki", "kind": "embedded", "corpus": "encyclopedia"},
                                 {"name": "code", "kind": "embedded", "corpus": "code", "lang": "python"}]},
          "evaluate": {"prompts": [{"id": "tide", "category": "prose", "text": PROMPT}]},
          "clean": {"quality": {"enabled": False}, "filters": ["decontamination"],
                    "dedup": {"exact": False, "near": False},
                    "decontamination": {"benchmark_files": ["bench/tasks.jsonl", "bench/short.txt"]}}}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    out = []
    for name in ("a", "b"):
        root = tmp_path_factory.mktemp(f"decon-{name}")
        expected = build(root)
        out.append((root, run_stage("clean", Params.model_validate(PARAMS), root), expected))
    return out


def test_stage_drops_contaminated_documents_per_source(two_runs):
    root, result, expected = two_runs[0]
    ledger = pq.read_table(root / "data/clean/dropped.parquet").to_pylist()
    assert {r["id"] for r in ledger} == set(expected) and {r["reason"] for r in ledger} == {"contaminated"}
    for r in ledger:
        detail = json.loads(r["detail"])
        assert detail["filter"] == "decontamination"
        (match,) = [k for k in detail["signals"] if k.startswith("match:")]
        assert match == f"match:{expected[r['id']]}"
        source_text = {"evaluate.prompts:tide": PROMPT, "bench/tasks.jsonl:2": BENCH,
                       "heldout.jsonl:pairs/7": ANSWER}[expected[r["id"]]]
        assert detail["signals"]["shared"] == brute_shared(r["text"], source_text, 13) > 0
    by_source = result.counts["by_source"]
    assert by_source["wiki"].get("dropped:contaminated") == 2 and by_source["wiki"]["kept"] == 4
    assert by_source["code"].get("dropped:contaminated") == 1 and by_source["code"]["kept"] == 2
    assert result.counts["dropped_by_reason"] == {"contaminated": 3}
    report = json.loads((root / "data/clean/report.json").read_text())["decontamination"]
    # indexed: the prompt, the held-out item, BENCH; short (< 8 words): the moon question (6) and SHORT (5)
    assert report["indexed"] == 3 and report["short"] == 2
    assert report["by_origin"] == {"bench/tasks.jsonl": 1, "evaluate.prompts": 1, "heldout.jsonl": 1}


def test_rerun_is_byte_identical(two_runs):
    (a, _, _), (b, _, _) = two_runs
    files = sorted(p.relative_to(a / "data/clean") for p in (a / "data/clean").rglob("*") if p.is_file()
                   and p.name != "manifest.json")
    assert any(f.name == "dropped.parquet" for f in files)
    for f in files:
        assert (a / "data/clean" / f).read_bytes() == (b / "data/clean" / f).read_bytes(), f
