"""Hostile text in mix: documents whose "words" are enormous (a DNA sequence, a line of '=', Chinese without
punctuation) train the tokenizer in bounded time and are still tokenized whole."""

from __future__ import annotations

import random
import signal

import pytest

from tasks.core.files import atomic_path
from tasks.data.mixing.tokenizer import (MAX_TRAIN_PIECE, encode_documents, load_tokenizer, new_byte_level_bpe,
                                         roundtrip_ok, training_pieces)
from tasks.data.records import RECORD_SCHEMA, write_table
from tests.helpers.mix import run_mix, write_corpus

rng = random.Random(5)
LONG = {"line": "Header.\n" + "=" * 400_000,
        "dna": "Sequence: " + "".join(rng.choice("ACGT") for _ in range(150_000)),
        **{f"cjk{i}": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(200_000)) for i in range(2)}}


def test_training_pieces_cut_only_long_pre_tokens():
    tok = new_byte_level_bpe()
    plain = ["def f(x):\n    return x  # " + "-" * 93, "a river, a town.", " " * 200 + "x"]
    assert training_pieces(tok, plain) == (plain, 0)  # nothing over the limit: passed as it is
    text = "before " + "a" * (2 * MAX_TRAIN_PIECE + 7) + " after"
    pieces, cut = training_pieces(tok, [text])
    assert cut == 1 and "".join(pieces) == text
    assert pieces == ["before", " " + "a" * (MAX_TRAIN_PIECE - 1), "a" * MAX_TRAIN_PIECE, "a" * 8, " after"]


def test_enormous_words_train_in_bounded_time_and_are_tokenized_whole(tmp_path):
    root = tmp_path / "p"
    write_corpus(root, {"prose": (40, 200)})
    rows = [{"id": f"long/{k}", "text": t, "source": "long", "lang": "zh", "origin": k, "meta": "{}", "media": []}
            for k, t in LONG.items()]
    with atomic_path(root / "data" / "clean" / "shards" / "long-00000.parquet") as tmp:
        write_table(rows, RECORD_SCHEMA, tmp)
    # Before: BPE training cost (merges) x (pre-token length): one 200,000-character Chinese "word" alone took
    # ~90 s. Now ~3 s here for the whole stage.
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("tokenizer training on enormous words did not finish"))
    signal.alarm(60)
    try:
        _, report = run_mix(root, tokenizer={"vocab_size": 1024, "train_chars": 2_000_000},
                            weights={"prose": 0.5, "long": 0.5}, token_budget=None, min_val_docs=1)
    finally:
        signal.alarm(0)
    assert report["tokenizer"]["train_chars"] > 350_000  # the enormous words were in the sample
    tok = load_tokenizer(root / "data" / "mix" / "tokenizer.json")
    assert roundtrip_ok(tok, LONG.values())
    # every document was tokenized whole: the source's tokens are its encoded documents' and an end token each
    encoded = len(LONG) + sum(len(a) for a in encode_documents(tok, list(LONG.values()), "<u2"))
    long = report["sources"]["long"]
    assert long["tokens_available"] + long["val_tokens"] == encoded
    assert long["train_documents"] + long["val_documents"] == len(LONG)
