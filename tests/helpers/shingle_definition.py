"""The definition the compiled shingling path must equal: `wordhash.word_hashes` of each text folded by the chain of
folds, one after another (QP bodies, subtitles and markup links, `textforms.read_formats`; URL tracking parameters,
line prefixes, hyphenation, `shingle_text`, pointing, look-alikes, unspaced scripts), escapes and contractions
(`wordhash.spell_words`), then `hashloops.ngram_hashes`. Property tests compare `minhash.signatures_and_shingles`
with it."""

from __future__ import annotations

import numpy as np

from specs.clean import DedupSpec
from tasks.data.cleanup.lookalikes import fold_confusables
from tasks.data.cleanup.normalize import normalize_text, shingle_text
from tasks.data.cleanup.textbatch import Encoded, exact_keys, normalize_encoded
from tasks.data.dedup import hashloops, minhash, wordhash
from tasks.data.dedup.lineprefix import strip_line_prefixes, strip_tracking
from tasks.data.dedup.marks import drop_pointing, join_hyphenated, mark_words
from tasks.data.dedup.segment import split_unspaced
from tasks.data.dedup.textforms import format_docs, read_formats


def assert_compiled_path_is_the_definition(raw: list[str]) -> None:
    """The word shingles of `raw` through the stage's path (exact keys first, as clean computes them) equal the
    definition's, for every text with words (a text without words hashes its whole text)."""
    spec, batch = DedupSpec(), [normalize_text(t) for t in raw]
    encoded = normalize_encoded(raw)
    exact_keys(encoded)
    _, hashes, offsets = minhash.signatures_and_shingles(batch, spec, 1, encoded)
    units, lengths = wordhash.word_hashes([split_unspaced(fold_confusables(drop_pointing(shingle_text(
        join_hyphenated(strip_line_prefixes(strip_tracking(read_formats(t)))), spec.fold_entities, spec.fold_invisible,
        spec.fold_unicode, False, spec.fold_markup, confusables=False)))) for t in batch], word=mark_words()[1],
        escapes=spec.fold_escapes, joins=spec.join_contractions)
    want, want_offsets = hashloops.ngram_hashes(units, lengths, spec.shingle_size, wordhash.MUL)
    assert offsets.tolist() == want_offsets.tolist()
    words = np.repeat(lengths > 0, np.diff(want_offsets))
    assert np.array_equal(hashes[words], want[words])


def assert_scan_finds_every_changed_text(raw: list[str]) -> None:
    """`textforms.format_docs`' byte scan names every text of `raw` that `read_formats` changes (a superset)."""
    batch = Encoded.of(raw)
    found = set(format_docs(batch.data, batch.ends, DedupSpec()))
    for k, text in enumerate(raw):
        assert k in found or read_formats(text) == text, text
