"""One filter protocol for clean and instruct (datatrove's shape): a Filter is a small unit with a `name` that
is called on a document and returns a `Verdict(keep, reason, signals)`; `run_filters` applies a list in its
declared order and stops at the first drop. The caller ledgers a drop as (filter name, reason, signals).

Clean's filters (documents are records: dicts with `text`, `source`, `lang`) are built from params by
`clean_filters`: `quality` (Gopher + C4 rules, reason `low_quality`), `language` (py3langid, reason
`language`), `toxicity` (word list, reason `toxic`) and `decontamination` (a 13-gram shared with an eval
prompt, a held-out SFT item or a benchmark file, reason `contaminated`), in the order of `clean.filters`. Instruct's filters
(documents are `Turns`) live in `tasks/data/curation/instruct_filters.py` and follow the same protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Protocol

from specs.clean import CleanSpec, LanguageSpec, QualitySpec, ToxicitySpec
from tasks.data.filtering import langid
from tasks.data.filtering import decontaminate
from tasks.data.filtering.decontaminate import EvalIndex
from tasks.data.filtering.quality import quality_scores
from tasks.data.filtering.toxicity import Lexicon, load_lexicon, tokens, toxicity


@dataclass(frozen=True)
class Verdict:
    keep: bool
    reason: str | None = None                                   # why it was dropped (None when kept)
    signals: dict[str, float] = field(default_factory=dict)     # the measurements the decision was made on


class Filter(Protocol):
    name: str

    def __call__(self, doc: Any) -> Verdict: ...


def run_filters(filters: Sequence[Filter], doc: Any) -> list[tuple[str, Verdict]]:
    """(name, verdict) of each filter applied in order, up to and including the first drop."""
    out: list[tuple[str, Verdict]] = []
    for f in filters:
        verdict = f(doc)
        out.append((f.name, verdict))
        if not verdict.keep:
            break
    return out


def run_filters_batch(filters: Sequence[Filter], docs: Sequence[Any]) -> list[list[tuple[str, Verdict]]]:
    """`[run_filters(filters, d) for d in docs]`, filter by filter: each filter sees the documents every earlier
    one kept, all at once through its `batch(docs) -> verdicts` where it has one (language id walks a batch
    faster than one document at a time), else one by one."""
    results: list[list[tuple[str, Verdict]]] = [[] for _ in docs]
    alive = list(range(len(docs)))
    for f in filters:
        batch = getattr(f, "batch", None)
        todo = [docs[i] for i in alive]
        verdicts = batch(todo) if batch is not None else [f(d) for d in todo]
        for i, verdict in zip(alive, verdicts):
            results[i].append((f.name, verdict))
        alive = [i for i, verdict in zip(alive, verdicts) if verdict.keep]
    return results


def first_drop(results: list[tuple[str, Verdict]]) -> tuple[str, Verdict] | None:
    """The dropping (name, verdict) of `run_filters`' result, or None when every filter kept the document."""
    return results[-1] if results and not results[-1][1].keep else None


def signals_json(signals: dict[str, float]) -> str:
    """Signals as the ledger's `detail`: sorted keys, floats rounded to 6 places (stable bytes on rerun)."""
    return json.dumps({k: round(v, 6) for k, v in sorted(signals.items())}, sort_keys=True)


@dataclass(frozen=True)
class FunctionFilter:
    """A filter from a plain function (for the instruct filters and tests)."""

    name: str
    fn: Callable[[Any], Verdict]

    def __call__(self, doc: Any) -> Verdict:
        return self.fn(doc)


# --- clean's filters --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QualityFilter:
    """Gopher + C4 rules under the source's profile; signals: every measurement, `rule:*` and `score`."""

    spec: QualitySpec
    name: str = "quality"

    def __call__(self, doc: dict[str, Any]) -> Verdict:
        return self.batch([doc])[0]

    def batch(self, docs: Sequence[dict[str, Any]]) -> list[Verdict]:
        """`[self(d) for d in docs]`, measured together (`quality.quality_scores`)."""
        rules = [getattr(self.spec, self.spec.profiles.get(d["source"], "prose")) for d in docs]
        return [Verdict(v.keep, v.reason, v.signals) for v in quality_scores([d["text"] for d in docs], rules)]


class TextFeatures:
    """What more than one filter derives from a document's text, each computed once, on first use: clean puts
    one under the document's `features` key (`features_of` makes one for a document without)."""

    def __init__(self, text: str):
        self.text = text

    @cached_property
    def lowered(self) -> str:
        return self.text.lower()

    @cached_property
    def word_runs(self) -> list[str]:
        """Decontamination's words: the `\\w+` runs of the lower-cased text."""
        return decontaminate.words(self.text)

    @cached_property
    def alnum_runs(self) -> list[str]:
        """Toxicity's words: the runs of letters and digits, which are the `\\w+` runs when no `_` occurs."""
        return self.word_runs if "_" not in self.lowered else tokens(self.lowered)


def features_of(doc: dict[str, Any]) -> TextFeatures:
    found = doc.get("features")
    return found if found is not None else TextFeatures(doc["text"])


@dataclass(frozen=True)
class ToxicityFilter:
    spec: ToxicitySpec
    lexicon: Lexicon
    name: str = "toxicity"

    def __call__(self, doc: dict[str, Any]) -> Verdict:
        tox = toxicity(doc["text"], self.lexicon, self.spec, features_of(doc).alnum_runs)
        signals = {"hits": float(tox.hits), "ratio": tox.ratio, **{f"word:{w}": 1.0 for w in tox.matched}}
        return Verdict(tox.keep, tox.reason, signals)


def detect_language(text: str, sample_chars: int = 2_000) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of the first `sample_chars` characters."""
    lang, prob = langid.identifier().classify(text[:sample_chars])
    return lang, float(prob)


@dataclass(frozen=True)
class LanguageFilter:
    """Keeps a document whose detected language is allowed for its source with at least `min_confidence`.
    Signals: `confidence` and `lang:<code>` = confidence (the code rides in the key: signals are numbers)."""

    spec: LanguageSpec
    code_sources: frozenset[str] = frozenset()
    name: str = "language"

    def __post_init__(self) -> None:
        known = set(langid.identifier().nb_classes)
        unknown = sorted({c for codes in self.spec.allowed.values() for c in codes} - known)
        if unknown:  # a typo would silently drop a whole source
            raise ValueError(f"clean.language.allowed: unknown language code(s) {', '.join(unknown)}; "
                             f"py3langid knows ISO 639-1 codes such as en, fr, de")

    def allowed(self, doc: dict[str, Any]) -> list[str]:
        """The languages allowed for this document's source: params, else its declared tag; [] = any."""
        if self.spec.exempt_code and doc["source"] in self.code_sources:
            return []
        if doc["source"] in self.spec.allowed:
            return self.spec.allowed[doc["source"]]
        declared = doc.get("lang") or ""
        # a declared tag the model does not know (e.g. `python`) cannot be checked
        return [declared] if declared in langid.identifier().nb_classes else []

    def __call__(self, doc: dict[str, Any]) -> Verdict:
        allowed = self.allowed(doc)
        if not allowed:
            return Verdict(True)
        return self.judge(allowed, *detect_language(doc["text"], self.spec.sample_chars))

    def batch(self, docs: Sequence[dict[str, Any]]) -> list[Verdict]:
        """`[self(d) for d in docs]`, the documents that need it identified together (`tasks.data.filtering.langid`)."""
        allowed = [self.allowed(d) for d in docs]
        todo = [i for i, a in enumerate(allowed) if a]
        verdicts = [Verdict(True)] * len(docs)
        found = langid.classify_many([docs[i]["text"][:self.spec.sample_chars] for i in todo])
        for i, (lang, prob) in zip(todo, found):
            verdicts[i] = self.judge(allowed[i], lang, prob)
        return verdicts

    def judge(self, allowed: list[str], lang: str, prob: float) -> Verdict:
        signals = {"confidence": round(prob, 6), f"lang:{lang}": round(prob, 6)}
        keep = lang in allowed and prob >= self.spec.min_confidence
        return Verdict(keep, None if keep else "language", signals)


@dataclass(frozen=True, eq=False)
class DecontaminationFilter:
    """Drops a document sharing an n-gram with an indexed benchmark text (mode and threshold: the index's
    spec). Signals: `shared` n-grams, `of` (the smaller side's n-gram count), `share`, `ngram` (the length
    compared) and `match:<name>` = shared (the matched text's name rides in the key: signals are numbers)."""

    index: EvalIndex
    name: str = "decontamination"

    def __call__(self, doc: dict[str, Any]) -> Verdict:
        hit = self.index.check(doc["text"], features_of(doc).word_runs if self.index.sizes else [])
        if hit is None:
            return Verdict(True)
        signals = {"shared": float(hit.shared), "of": float(hit.of), "share": round(hit.share, 6),
                   "ngram": float(self.index.n_of[hit.eval_index]), f"match:{self.index.name(hit)}": float(hit.shared)}
        return Verdict(False, "contaminated", signals)


def clean_filters(spec: CleanSpec, root: Path, index_texts: Sequence[tuple[str, str]] = ()) -> list[Filter]:
    """Clean's enabled filters in the order `spec.filters` declares; `index_texts` are the (name, text) pairs
    the decontamination filter drops overlaps with."""
    built: dict[str, Filter] = {}
    if spec.quality.enabled:
        built["quality"] = QualityFilter(spec.quality)
    if spec.language.enabled:
        code = frozenset(s for s, p in spec.quality.profiles.items() if p == "code")
        built["language"] = LanguageFilter(spec.language, code)
    if spec.toxicity.enabled:
        wordlist = str(root / spec.toxicity.wordlist) if spec.toxicity.wordlist else None
        built["toxicity"] = ToxicityFilter(spec.toxicity, _lexicon(wordlist))
    if spec.decontamination.enabled:
        names, texts = [n for n, _ in index_texts], [t for _, t in index_texts]
        built["decontamination"] = DecontaminationFilter(EvalIndex(texts, spec.decontamination, names))
    return [built[name] for name in spec.filters if name in built]


@lru_cache(maxsize=4)
def _lexicon(path: str | None) -> Lexicon:
    return load_lexicon(Path(path) if path else None)
