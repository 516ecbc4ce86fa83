"""Invariants of clean's filters (quality, language, toxicity, decontamination) on any text: they never raise,
drop only with a reason from their declared set (and keep with none), decide the same twice, and the batch path
(`run_filters_batch`) decides as the one-document path (`run_filters`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specs.clean import CleanSpec
from tasks.data.filtering.filters import Verdict, clean_filters, run_filters, run_filters_batch

REPO = Path(__file__).resolve().parents[1]
REASONS = {"quality": "low_quality", "language": "language", "toxicity": "toxic", "decontamination": "contaminated"}
SOURCES = ("web", "code", "notes")
PROMPT = "the quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire tonight"


@lru_cache(maxsize=1)
def filters():
    spec = CleanSpec(quality={"profiles": {"code": "code"}}, language={"allowed": {"web": ["en"], "code": ["en"]}},
                     toxicity={"min_hits": 1, "max_ratio": 0.0}, decontamination={"ngram": 5, "min_words": 3})
    built = clean_filters(spec, REPO, [("prompt", PROMPT)])
    assert [f.name for f in built] and {f.name for f in built} <= set(REASONS)
    return built


PIECES = ["the", "The", " ", "\n", "\n\n", ".", "!", "…", "- ", "• ", "lorem", "ipsum", "def f(x):", "    return x",
          "Bonjour", "été", "日本語", "Привет", "😀", "\u200b", "\u202e", "\x00", "\ud800", "&amp;", "<p>", "_", "1234",
          PROMPT, "quick brown fox jumps over", "damn", "shit", "idiot", "privacy policy", "lorem ipsum dolor"]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet=st.characters(blacklist_categories=()),
                                                                    max_size=8)), max_size=30).map("".join)
docs = st.builds(lambda text, source, lang: {"text": text, "source": source, "lang": lang},
                 texts, st.sampled_from(SOURCES), st.sampled_from(["en", "fr", "", "python", "xx"]))


def outcome(verdicts: list[Verdict]) -> list[tuple[bool, str | None, dict]]:
    return [(v.keep, v.reason, v.signals) for v in verdicts]


@settings(max_examples=120, deadline=None)
@given(st.lists(docs, min_size=1, max_size=6))
def test_each_filter_is_total_declared_and_deterministic(batch):
    # each filter alone (in a chain, quality drops most generated text before the others see it)
    for f in filters():
        one = outcome([f(d) for d in batch])
        for keep, reason, signals in one:
            assert (reason is None) == keep and (keep or reason == REASONS[f.name]), (f.name, one)
            assert all(isinstance(v, float) for v in signals.values()), (f.name, one)
        assert outcome([f(d) for d in batch]) == one, f.name
        if hasattr(f, "batch"):
            assert outcome(f.batch(batch)) == one, f.name


@settings(max_examples=60, deadline=None)
@given(st.lists(docs, min_size=1, max_size=6))
def test_the_batch_chain_decides_as_one_document_at_a_time(batch):
    chain = filters()
    assert [[(n, *outcome([v])[0]) for n, v in r] for r in run_filters_batch(chain, batch)] == \
        [[(n, *outcome([v])[0]) for n, v in run_filters(chain, d)] for d in batch]
