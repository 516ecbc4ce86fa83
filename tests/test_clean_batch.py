"""Clean's batched per-document work gives what the one-document-at-a-time computations give: language id equal
to py3langid's `classify` to the last bit, quality signals of a batch equal to each document's alone (and to brute
force), the shared tokenisation and the skip tests of toxicity, decontamination and normalisation equal to the
plain computations on planted look-alikes, `clean_records` equal to `clean_record` row by row, and the work table's
text column cut from the encoded bytes equal to the strings."""

from __future__ import annotations

import itertools
import random
import re
import unicodedata

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specs.clean import CleanSpec, DecontaminationSpec, ToxicitySpec
from tasks.data.cleanup import cleaning, normalize
from tasks.data.cleanup.textbatch import Encoded
from tasks.data.filtering import langid
from tasks.data.filtering.decontaminate import EvalIndex, words
from tasks.data.embedded import read_embedded
from tasks.data.filtering.filters import TextFeatures
from tasks.data.filtering.quality import measure, measure_many
from tasks.data.records import Doc
from tasks.data.filtering.toxicity import load_lexicon, parse_lexicon, tokens, toxicity
from tests.helpers.clean import build_corpus
from tests.helpers.quality import brute_ngrams

LOOKALIKES = [
    "", "a", "The sea.", "HELLO WORLD, THIS IS SHOUTED AT YOU", "Bonjour, je suis très content de vous voir.",
    "Der schnelle braune Fuchs springt über den faulen Hund.", "これは日本語の文です。",
    "Привет, как дела?",
    "def f(x):\n    return x + 1\n", "snake_case_name = other_name_2", "İstanbul ½ Ⅷ ٣ x² naïve café",
    "123 456 -- ... (x) #1 _ __init__ a1 \t\u00a0 …", "x" * 5000,
]


def corpus_texts(limit: int = 40) -> list[str]:
    docs = [d.text for name in ("encyclopedia", "literature", "docs", "code")
            for d in itertools.islice(read_embedded(name), limit) if isinstance(d, Doc)]
    return docs + LOOKALIKES


def test_langid_batch_is_py3langid_bit_for_bit(monkeypatch):
    texts = [t[:2000] for t in corpus_texts()]
    want = [langid.identifier().classify(t) for t in texts]
    assert langid.classify_many(texts) == want
    monkeypatch.setattr(langid, "CHUNK", 7)            # many chunks of mixed lengths, in shuffled order
    order = random.Random(0).sample(range(len(texts)), len(texts))
    assert langid.classify_many([texts[i] for i in order]) == [want[i] for i in order]
    assert {lang for lang, _ in want} >= {"en", "fr", "de", "ja", "ru"}


def random_doc(rng: random.Random) -> str:
    vocab = [rng.choice(["a", "bb", "ccc", "Ee", "é", "İx", "_", "12", "x_y", "--"]) + str(k)
             for k in range(rng.randint(2, 10))]
    ws = [rng.choice(vocab) for _ in range(rng.randint(0, 200))]
    if rng.random() < 0.4 and len(ws) > 40:                       # a long repeated run
        ws = ws[:40] + ws[5:30] + ws[40:]
    return rng.choice([" ", "\n", "  "]).join(ws)


def test_quality_batch_equals_each_document_alone_and_brute_force():
    rng = random.Random(7)
    texts = [random_doc(rng) for _ in range(60)] + corpus_texts(10)
    batch = measure_many(texts, [3] * len(texts))
    for text, got in zip(texts, batch):
        assert got == measure(text)
        if text.isascii() and text.split():        # brute force counts lower-cased characters
            for key, value in brute_ngrams(text).items():   # overlapping repeats can pass 1: clamped
                assert got[key] == pytest.approx(min(1.0, value) if key.startswith("top") else value), key
        no_letter = sum(1 for w in text.split() if not re.search(r"[^\W\d_]", w))
        assert got["alpha_words"] == (1.0 - no_letter / len(text.split()) if text.split() else 0.0)


def test_shared_word_runs_equal_each_filters_own():
    for text in corpus_texts(10) + [random_doc(random.Random(s)) for s in range(20)]:
        f = TextFeatures(text)
        assert f.word_runs == words(text) and f.alnum_runs == tokens(text.lower())


def test_toxicity_phrase_skip_never_misses_a_phrase():
    lexicon = load_lexicon()
    spec = ToxicitySpec(min_hits=1, max_ratio=0.0)
    rng = random.Random(3)
    base = corpus_texts(5)[0].split(" ")
    for _ in range(200):
        phrase = rng.choice(lexicon.phrases).replace(" ", rng.choice([" ", "-", " - ", "\n"]))
        text = " ".join(base[:30]) + " " + rng.choice(["", "_", "x", "(", "'"]) + phrase.replace("'", "’") + \
            rng.choice(["", "_", "s", ".", "!"]) + " " + " ".join(base[30:60])
        lowered = text.lower()
        # the reference: the phrase regex alone, then the words left outside the matches
        expected = len(lexicon.phrase_re.findall(lowered))
        left = tokens(lexicon.phrase_re.sub(" ", lowered))
        expected += sum(1 for t in left if t in lexicon.words)
        assert toxicity(text, lexicon, spec).hits == expected, text
    lookalike = parse_lexicon(["son of a bitch"])        # every word present, never as the phrase
    assert toxicity("a son, of course, is a bitch to raise", lookalike, spec).hits == 0
    assert toxicity("Son-of-a-Bitch!", lookalike, spec).hits == 1


def test_decontamination_skip_equals_the_full_check():
    prompts = ["the quick brown fox jumps over the lazy dog near the river bank today",
               "translate the following sentence into french please now", "one two three four five six seven eight"]
    index = EvalIndex(prompts, DecontaminationSpec(ngram=9, mode="any", min_words=3))
    rng = random.Random(5)
    pool = " ".join(prompts).split() + ["alpha", "beta", "gamma"]
    for _ in range(300):
        text = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 40)))
        if rng.random() < 0.3:
            p = rng.choice(prompts).split()
            k = rng.randint(0, len(p) - 1)
            text += " " + " ".join(p[k:k + rng.randint(6, 12)])
        full = _full_check(index, text)
        assert index.check(text) == full and index.check(text, words(text)) == full
    assert index.check(prompts[2].upper()).equal                  # a text that is a prompt, word for word


def _full_check(index: EvalIndex, text: str):
    """The check with the run-of-indexed-words skip disabled."""
    saved, index.may_share = index.may_share, lambda tokens: True
    try:
        return index.check(text)
    finally:
        index.may_share = saved


@pytest.mark.parametrize("text", [
    "a  \nb\t\nc \t", "tail  ", "x\r\ny\rz", "nb\u00a0sp\u200bzw", "a\n\n\n\n\nb", "plain text", "\n\nlead\n",
    "Cafe\u0301 \ufb01", "ctl\x07\x0c", "",
])
def test_normalize_skips_only_steps_that_change_nothing(text):
    for form in ("NFC", "NFKC", "none"):
        plain = text.replace("\r\n", "\n").translate(normalize.TRANSLATION_TABLE)   # every step, none skipped
        if form != "none":
            plain = unicodedata.normalize(form, plain)
        plain = re.sub(r"\n{4,}", "\n\n\n", re.sub(r"[ \t]+$", "", plain, flags=re.MULTILINE))
        assert normalize.normalize_text(text, form) == plain.lstrip("\n").rstrip()


def test_clean_records_equal_clean_record_one_by_one(tmp_path):
    build_corpus(tmp_path)
    shards = sorted((tmp_path / "data/ingest/shards").glob("*.parquet"))
    rows = [r for s in shards for r in pq.read_table(s).to_pylist()]
    rows += [{**rows[0], "id": "wiki/blank", "text": " \u200b \n "}]
    spec = CleanSpec(quality={"profiles": {"code": "code"}})
    built = cleaning.filters_for(spec, tmp_path, (("prompt", "the " + rows[0]["text"][:400]),))
    batch = cleaning.clean_records(rows, spec, tmp_path, built)
    assert batch == [cleaning.clean_record(r, spec, tmp_path, built) for r in rows]
    reasons = {r["reason"] for r in batch}
    assert {None, "low_quality", "toxic", "empty", "contaminated"} <= reasons


def test_text_column_cut_from_the_encoded_bytes_equals_the_strings():
    texts = corpus_texts(5) + ["two\nlines\n", "\U0001d538 ☃ ½"]
    encoded = Encoded.of(texts)
    assert cleaning.text_array(texts, encoded).equals(pa.array(texts, pa.string()))
    other = [*texts[:-1], "changed since"]          # not the encoded texts: made from the strings
    assert cleaning.text_array(other, encoded).to_pylist() == other
