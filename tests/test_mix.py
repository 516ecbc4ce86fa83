"""Stage `mix`: weighted mixing, repetition cap, determinism, hash split, packed index, tokenizer round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from specs.mix import MixSpec
from tasks.data.mixing.mixplan import hash_keys, hash_unit, split_val
from tasks.data.mixing.packing import PackedDataset
from tasks.data.mixing.tokenizer import load_tokenizer, roundtrip_ok
from tests.helpers.mix import run_mix, write_corpus


CORPUS = {"prose": (150, 300), "code": (120, 200), "tiny": (12, 100)}


def _fresh(tmp_path: Path, name: str = "p") -> tuple[Path, dict[str, str]]:
    root = tmp_path / name
    return root, write_corpus(root, CORPUS)


def test_realized_shares_follow_weights(tmp_path):
    root, _ = _fresh(tmp_path)
    weights = {"prose": 0.5, "code": 0.3, "tiny": 0.2}
    result, report = run_mix(root, token_budget=60_000, weights=weights)
    for s, w in weights.items():
        row = report["sources"][s]
        assert row["target_share"] == pytest.approx(w)
        assert abs(row["realized_share"] - w) <= 0.02, (s, row)
        assert not row["capped"] and row["epochs"] <= 4
    assert report["sources"]["tiny"]["epochs"] > 1  # upsampled ...
    assert report["sources"]["prose"]["epochs"] < 1  # ... and downsampled in one mix
    assert abs(report["realized_tokens"] - 60_000) / 60_000 < 0.02
    assert result.counts["train_tokens"] == report["realized_tokens"]
    assert result.counts["by_source"]["tiny"]["realized_share"] == report["sources"]["tiny"]["realized_share"]
    assert "| tiny |" in result.summary and len(result.table) == 3

    _, report = run_mix(root, token_budget=40_000, weights={"prose": 7, "code": 3, "tiny": 0})  # general:code 7:3
    shares = {s: v["realized_share"] for s, v in report["sources"].items()}
    assert shares["prose"] == pytest.approx(0.7, abs=0.02) and shares["tiny"] == 0


def test_no_weights_and_no_budget_use_everything_once(tmp_path):
    root, _ = _fresh(tmp_path)
    _, report = run_mix(root, token_budget=None)
    for row in report["sources"].values():
        assert row["epochs"] == 1 and row["realized_tokens"] == row["tokens_available"]


def test_repetition_cap_is_honoured_and_shortfall_reported(tmp_path):
    root, _ = _fresh(tmp_path)
    weights = {"prose": 0.4, "code": 0.1, "tiny": 0.5}  # tiny has ~1.5k tokens: 0.5 x 60k needs ~20 epochs
    _, report = run_mix(root, token_budget=60_000, weights=weights, max_repetition=3)
    tiny = report["sources"]["tiny"]
    assert tiny["capped"] and tiny["epochs"] <= 3 and tiny["shortfall_tokens"] > 0
    assert tiny["realized_tokens"] <= 3 * tiny["tokens_available"]
    assert tiny["realized_share"] < 0.5 - 0.1
    assert abs(report["realized_tokens"] - 60_000) / 60_000 < 0.02  # redistributed: the budget holds
    assert report["sources"]["prose"]["realized_share"] > 0.4  # ... taking more than its target

    _, shrunk = run_mix(root, token_budget=60_000, weights=weights, max_repetition=3, on_shortfall="shrink")
    assert shrunk["sources"]["tiny"]["epochs"] <= 3 and shrunk["sources"]["tiny"]["capped"]
    assert shrunk["realized_tokens"] < 60_000 * 0.75  # the others stay at target: fewer tokens overall
    assert abs(shrunk["sources"]["prose"]["realized_tokens"] - 24_000) < 1_000


def test_same_params_give_byte_identical_outputs(tmp_path):
    outs = []
    for name in ("a", "b"):
        root, _ = _fresh(tmp_path, name)
        run_mix(root, token_budget=30_000, weights={"prose": 0.6, "code": 0.3, "tiny": 0.1}, shard_sequences=100)
        out = root / "data" / "mix"
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outs[0] == outs[1]
    assert {"tokenizer.json", "train-00000.bin", "train-00001.bin", "train.idx.parquet", "val.idx.parquet",
            "packing.json", "report.json"} <= set(outs[0])

    root, _ = _fresh(tmp_path, "other-seed")
    run_mix(root, seed=8, token_budget=30_000, weights={"prose": 0.6, "code": 0.3, "tiny": 0.1}, shard_sequences=100)
    other = root / "data" / "mix"
    assert (other / "tokenizer.json").read_bytes() == outs[0]["tokenizer.json"]  # sample ignores the seed
    assert (other / "train-00000.bin").read_bytes() != outs[0]["train-00000.bin"]  # the shuffle does not


def ids_of_split(out: Path, split: str, source: str) -> set[str]:
    docs = pq.read_table(out / f"{split}.idx.parquet").column("doc_ids").combine_chunks().flatten().to_pylist()
    return {i for i in docs if i.startswith(source + "/")}


def test_val_split_is_disjoint_and_stable(tmp_path):
    root, _ = _fresh(tmp_path)
    _, report = run_mix(root, token_budget=20_000, val_fraction=0.1)
    out = root / "data" / "mix"
    ids = {split: set(pq.read_table(out / f"{split}.idx.parquet").column("doc_ids").combine_chunks().flatten()
                      .to_pylist()) for split in ("train", "val")}
    assert ids["val"] and not ids["train"] & ids["val"]
    assert {i.split("/")[0] for i in ids["val"]} == set(CORPUS)  # every source has val documents

    for s, (n, _) in CORPUS.items():  # the split of each source's ids, then of the same ids plus 200 new ones
        ids = [f"{s}/doc{k:04d}" for k in range(n)]
        grown = ids + [f"{s}/new{k}" for k in range(200)]
        keys = hash_keys(ids, "val")
        val = {i for i, v in zip(ids, split_val(keys, 0.1, 1)) if v}
        val2 = {i for i, v in zip(grown, split_val(hash_keys(grown, "val"), 0.1, 1)) if v}
        below = {i for i in ids if hash_unit("val", i) < 0.1}  # the threshold, recomputed per id
        assert {i for i, v in zip(ids, split_val(keys, 0.1, 0)) if v} == below and below <= val
        # what the stage packed (min_val_docs 3 tops tiny up; the last documents may sit in the dropped tail)
        staged = {i for i, v in zip(ids, split_val(keys, 0.1, 3)) if v}
        assert ids_of_split(out, "val", s) <= staged and report["sources"][s]["val_documents"] == len(staged)
        assert len(staged) == max(len(below), 3)
        assert val <= val2 and not (set(ids) - val) & val2  # old documents never change sides
        assert abs(len(val2) / len(grown) - 0.1) < 0.06


def test_index_names_the_documents_of_each_sequence(tmp_path):
    root, texts = _fresh(tmp_path)
    run_mix(root, token_budget=20_000, weights={"prose": 0.5, "code": 0.3, "tiny": 0.2}, shard_sequences=50)
    out = root / "data" / "mix"
    tok = load_tokenizer(out / "tokenizer.json")
    eos = tok.token_to_id("<|endoftext|>")
    for split in ("train", "val"):
        ds = PackedDataset(out, split)
        assert len(ds) > 0 and ds[0].shape == (65,) and ds[0].dtype == np.uint16
        for i in range(len(ds)):
            seq = np.asarray(ds[i])
            if i + 1 < len(ds):
                assert seq[-1] == ds[i + 1][0]  # windows share one boundary token
            for start, end, doc_id, source in ds.spans(i):
                assert doc_id.startswith(source + "/")
                piece = seq[start:end]
                assert eos not in piece[:-1]  # a document's tokens never contain the boundary token
                text = tok.decode([int(t) for t in piece if t != eos])
                assert text in texts[doc_id], (split, i, doc_id)
            assert ds.docs(i) == [d for _, _, d, _ in ds.spans(i)] and len(ds.sources(i)) == len(ds.docs(i))


def test_tokenizer_round_trips_text(tmp_path):
    root, texts = _fresh(tmp_path)
    run_mix(root, token_budget=10_000)
    tok = load_tokenizer(root / "data" / "mix" / "tokenizer.json")
    samples = [next(iter(texts.values())), "  leading and trailing  ", "tabs\tand\nnewlines\r\n",
               "naïve café — 東京 🚀 ∑x²", "def f(x):\n    return {'a': [1, 2]}\n", "<|endoftext|> in text", ""]
    assert roundtrip_ok(tok, samples)
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.token_to_id("<|pad|>") == 1
    assert tok.token_to_id("<|reserved_13|>") == 15


def test_special_token_text_inside_a_document_is_not_a_boundary(tmp_path):
    from tasks.data.mixing.tokenizer import encode_documents

    root, _ = _fresh(tmp_path)
    run_mix(root, token_budget=10_000)
    tok = load_tokenizer(root / "data" / "mix" / "tokenizer.json")
    (ids,) = encode_documents(tok, ["see <|endoftext|> here"], "<u2")
    assert 0 not in ids and tok.decode(ids.tolist()) == "see <|endoftext|> here"


def test_weights_must_match_the_sources(tmp_path):
    root, _ = _fresh(tmp_path)
    with pytest.raises(ValueError, match=r"not in the cleaned data: nosuch"):
        run_mix(root, weights={"prose": 1, "code": 1, "tiny": 1, "nosuch": 1})
    with pytest.raises(ValueError, match=r"lacks source\(s\) present in the cleaned data: tiny"):
        run_mix(root, weights={"prose": 1, "code": 1})
    _, report = run_mix(root, token_budget=None, weights={"prose": 1, "code": 1, "tiny": 0})
    assert report["sources"]["tiny"]["realized_tokens"] == 0
    assert max(report["sources"][s]["epochs"] for s in ("prose", "code")) == pytest.approx(1, abs=0.05)


def test_spec_bounds():
    with pytest.raises(ValidationError, match="vocab_size must exceed"):
        MixSpec(tokenizer={"vocab_size": 512, "reserved_special_tokens": 300})
    with pytest.raises(ValidationError, match="uint16"):
        MixSpec(dtype="uint16", tokenizer={"vocab_size": 70_000})
    with pytest.raises(ValidationError, match="weights must be finite"):
        MixSpec(weights={"code": -1})
    with pytest.raises(ValidationError, match="extra"):
        MixSpec(token_budgets=5)
    assert MixSpec(tokenizer={"vocab_size": 70_000}).token_dtype() == "<u4"
    assert MixSpec().token_dtype() == "<u2"
