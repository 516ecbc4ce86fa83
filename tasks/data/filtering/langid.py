"""Language identification of many documents at once, equal bit for bit to py3langid's `classify` on each.

py3langid (0.4) classifies a text by walking its UTF-8 bytes through a DFA (one Python loop iteration per
byte, ~40 % of its time on 2 KB documents), counting the n-gram features the DFA emits, and scoring them with a
naive-Bayes table. Here the DFA walk is one numpy step per byte *position* for a whole batch of documents at once
(the documents sorted by length, so step t advances only those longer than t), and the model's float16 table is
widened to float32 once per process (57 MB), so each document's gather is one `np.take` and no cast. The
scoring itself is py3langid's arithmetic in its order (features in the order of their first occurrence, the
same float32 matrix product, softmax at temperature sqrt(bytes), script aliases folded), so the language and the
probability are the very floats `classify` returns: `tests/test_clean_batch.py` checks that on prose, code,
other languages, upper-case, short and empty texts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

CHUNK = 1024          # documents walked together: the per-step numpy overhead is shared, memory stays ~10 MB
_UNSEEN = np.iinfo(np.int64).max


@lru_cache(maxsize=1)
def identifier() -> LanguageIdentifier:
    """py3langid's model (an npz inside its wheel: no pickle, no download), loaded once per process."""
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


class BatchModel:
    """The arrays of one py3langid model in the shapes a batched walk and a per-document gather want."""

    def __init__(self, model: LanguageIdentifier):
        self.classes = list(model.nb_classes)
        self.nextmove = np.frombuffer(model.tk_nextmove, dtype=np.uint32)           # [rows * 256]
        self.rowbase = np.asarray(model.tk_row, dtype=np.int64) << 8                # state -> its row's offset
        self.output = np.asarray(model.tk_output, dtype=np.int32)                   # state -> feature, or -1
        self.ptc = np.asarray(model.nb_ptc).astype(np.float32)                      # [features, classes]
        self.pc = np.asarray(model.nb_pc)
        self.first = np.full(len(self.ptc), _UNSEEN, dtype=np.int64)                   # scratch, per feature
        self.count = np.zeros(len(self.ptc), dtype=np.int64)                          # scratch, per feature
        first: dict[str, int] = {}
        self.aliases = []                   # (first column, duplicate column) of a label listed twice (srl -> sr)
        for i, c in enumerate(self.classes):
            if c in first:
                self.aliases.append((first[c], i))
            else:
                first.setdefault(c, i)

    def features(self, encoded: Sequence[bytes]) -> list[np.ndarray]:
        """The feature the DFA emits at each byte of each text (-1 where none): py3langid's `visit_counts`
        walk, done for all texts together. Texts sorted longest first walk the least padding."""
        lengths = np.array([len(b) for b in encoded], dtype=np.int64)
        longest = int(lengths.max()) if len(encoded) else 0
        grid = np.zeros((len(encoded), longest), dtype=np.uint8)
        for j, b in enumerate(encoded):
            grid[j, :len(b)] = np.frombuffer(b, dtype=np.uint8)
        grid = np.ascontiguousarray(grid.T)                                         # [position, text]
        emitted = np.full((longest, len(encoded)), -1, dtype=np.int32)
        # texts still walking at step t (longer than t): a prefix, when the texts come longest first
        walking = len(encoded) - np.searchsorted(np.sort(lengths), np.arange(longest), side="right")
        if np.any(np.diff(lengths) > 0):
            walking[:] = len(encoded)                                               # unsorted: walk them all
        base = np.full(len(encoded), self.rowbase[0], dtype=np.int64)               # every walk starts in state 0
        for t in range(longest):
            k = int(walking[t])
            state = self.nextmove[base[:k] + grid[t, :k]]
            emitted[t, :k] = self.output[state]
            base[:k] = self.rowbase[state]
        emitted = np.ascontiguousarray(emitted.T)
        return [emitted[j, :n] for j, n in enumerate(lengths.tolist())]

    def first_seen_counts(self, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The distinct features of `found` in the order of their first occurrence (the order py3langid's
        Counter has, so the matrix product adds in its order) and their counts as float32; without a sort,
        on two scratch arrays over the feature space that are reset after use."""
        positions = np.arange(len(found))
        np.minimum.at(self.first, found, positions)
        np.add.at(self.count, found, 1)
        idx = found[self.first[found] == positions].astype(np.intp)
        counts = self.count[idx].astype(np.float32)
        self.first[found] = _UNSEEN
        self.count[found] = 0
        return idx, counts

    def classify(self, n_bytes: int, emitted: np.ndarray) -> tuple[str, float]:
        """(language, probability) from one text's emitted features: py3langid's `_decide` + `classify`."""
        found = emitted[emitted >= 0]
        if len(found):
            idx, counts = self.first_seen_counts(found)
            scores = np.log1p(counts) @ np.take(self.ptc, idx, axis=0) + self.pc
        else:                                              # no feature: uniform scores (norm_probs)
            scores = np.full(len(self.classes), 0.0, dtype=np.float32)
        scores *= 1.0 / math.sqrt(n_bytes or 1)
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
        for i, j in self.aliases:
            scores[i] += scores[j]
            scores[j] = 0.0
        best = int(scores.argmax())
        return self.classes[best], float(scores[best])


@lru_cache(maxsize=1)
def batch_model() -> BatchModel:
    return BatchModel(identifier())


def encode(text: str) -> bytes:
    """The bytes py3langid classifies (its `_encode`: upper-case text lower-cased, NFC, UTF-8)."""
    return LanguageIdentifier._encode(text)


def classify_many(texts: Sequence[str]) -> list[tuple[str, float]]:
    """(ISO 639-1 code, probability) of each text: `identifier().classify(text)` for each, at batch speed."""
    model = batch_model()
    encoded = [encode(t) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -len(encoded[i]))
    out: list[tuple[str, float]] = [("", 0.0)] * len(texts)
    for lo in range(0, len(order), CHUNK):
        chunk = order[lo:lo + CHUNK]
        for i, emitted in zip(chunk, model.features([encoded[i] for i in chunk])):
            out[i] = model.classify(len(encoded[i]), emitted)
    return out
