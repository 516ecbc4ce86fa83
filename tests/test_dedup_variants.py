"""Clean's dedup against near-duplicate variants of real documents it was not written beside
(`tests/helpers/dedup_variants.py`): formatting-only copies are removed, edited copies are removed exactly when
their word-5-gram Jaccard is ≥ the threshold, and look-alikes stay apart, all through clean's own phase 1 and
`cleaning.deduplicate`. Before the shingle folds (`clean.dedup.fold_*`) copies with ZWJ/ZWNJ inside words or
HTML entities left in were missed (recall 0 and 0.31), and full-width letters or ligatures as soon as the copy
also had a footer (0 and 0.60); the test with the folds off keeps that measurement honest."""

from __future__ import annotations

import html
import random
import re

import numpy as np
import pytest

from specs.clean import CleanSpec, DedupSpec
from tests.helpers import dedup_variants as dv
from tasks.data.dedup.minhash import shingle_sets, shingles
from tasks.data.cleanup.normalize import shingle_text
from tasks.data.cleanup.textmarks import fold_emphasis
from tasks.data.dedup.marks import fold_digraphs
from tests.helpers.synthetic_corpus import exact_jaccard

CLEAN = CleanSpec()
NO_FOLDS = CLEAN.model_copy(update={"dedup": CLEAN.dedup.model_copy(update=dict(
    fold_entities=False, fold_invisible=False, fold_unicode=False, fold_markup=False,
    fold_confusables=False))})


@pytest.fixture(scope="module")
def docs():
    return dv.originals(6)          # 24 real documents, 6 per embedded corpus, no two alike


def brute_jaccard(a: str, b: str, n: int = 5) -> float:
    """Word n-gram Jaccard by a sliding window over `str.split` tokens with punctuation cut away (not the
    regex tokenizer of the library), on ASCII text where both definitions agree: escapes written out (`\\n`) read
    as spaces, then a contraction's end after one space, then an apostrophe between two word characters, joined
    (`DedupSpec.fold_escapes`, `join_contractions`)."""
    def grams(text: str) -> set[str]:
        text = re.sub(r"\\[ntr]", "  ", text, flags=re.I)
        text = re.sub(r"(?<=\w) (?=(?:t|s|d|m|ll|re|ve)(?!\w))", "", text, flags=re.I)
        text = re.sub(r"(?<=\w)'(?=\w)", "", text)
        words = "".join(c.lower() if c.isalnum() or c == "_" else " " for c in text).split()
        return {" ".join(words[k:k + n]) for k in range(max(1, len(words) - n + 1))}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def test_originals_are_real_and_distinct(docs):
    assert {d.split("/")[0] for d, _ in docs} == {"literature", "encyclopedia", "code", "docs"}
    assert all(len(t.split()) >= 150 for _, t in docs)
    assert max(exact_jaccard(a, b) for (_, a), (_, b) in zip(docs, docs[1:])) < 0.5


def test_truth_agrees_with_an_independent_brute_force(docs):
    ascii_docs = [(i, t) for i, t in docs if t.isascii()][:8]
    kind = dv.edit_kind("4% words changed", ascii_docs, 3, 0.8)
    for a, b in kind.pairs:
        assert exact_jaccard(kind.texts[a], kind.texts[b]) == pytest.approx(brute_jaccard(kind.texts[a],
                                                                                           kind.texts[b]))


@pytest.mark.parametrize("footer", [False, True])
@pytest.mark.parametrize("name", list(dv.FORMATS))
def test_formatting_copies_are_removed(docs, name, footer):
    kind = dv.format_kind(name, docs, 1, footer)
    assert len(kind.truth) >= len(docs) - 2          # a footer keeps J ≥ 0.8 on all but the shortest documents
    result = dv.evaluate(kind, CLEAN)
    assert result["recall"] == 1.0 and result["false"] == 0, result


@pytest.mark.parametrize("name,fmt", [(n, None) for n in dv.EDITS] + [(n, "all formats") for n in dv.FORMATTED_EDITS])
def test_edited_copies_follow_their_exact_jaccard(docs, name, fmt):
    kind = dv.edit_kind(name, docs, 1, 0.8, fmt)
    keeper = dv.groups(kind.texts, CLEAN)
    for a, b in kind.pairs:                         # exact verification: never a pair below the threshold
        assert keeper[a] != keeper[b] or (a, b) in kind.truth, (a, exact_jaccard(kind.texts[a], kind.texts[b]))
    # LSH (16 bands × 8 rows) finds a pair at J = 0.8 with probability 0.947, at 0.85 with 0.994: right at the
    # threshold a miss is by design, above 0.85 it would be a bug
    missed = [(p, kind.jaccard[p]) for p in kind.truth if keeper[p[0]] != keeper[p[1]]]
    assert all(j < 0.85 for _, j in missed), missed
    result = dv.evaluate(kind, CLEAN)
    assert result["false"] == 0, result
    assert result["true"] < 10 or result["recall"] >= 0.9, result


def test_look_alikes_stay_apart(docs):
    for kind in dv.look_alike_kinds(docs, 1, 0.8):
        assert len(kind.pairs) >= 3
        assert all(exact_jaccard(kind.texts[a], kind.texts[b]) < 0.5 for a, b in kind.pairs), kind.name
        result = dv.evaluate(kind, CLEAN)
        assert result["predicted"] == 0, result


def test_without_the_folds_entity_and_joiner_copies_are_missed(docs):
    kind = dv.format_kind("HTML entities", docs, 1, False)
    assert dv.evaluate(kind, NO_FOLDS)["recall"] <= 0.6
    assert dv.evaluate(kind, CLEAN)["recall"] == 1.0
    # ZWJ/ZWNJ inside these (ASCII) words were missed too (recall 0) until normalization removed them between
    # ASCII characters, where they only hide a token: now such a copy is an exact duplicate, folds or not.
    kind = dv.format_kind("ZWJ/ZWNJ", docs, 1, False)
    assert dv.evaluate(kind, NO_FOLDS)["recall"] == dv.evaluate(kind, CLEAN)["recall"] == 1.0
    kind = dv.format_kind("full-width letters", docs, 1, True)
    assert dv.evaluate(kind, NO_FOLDS)["recall"] <= 0.1


def test_decisions_are_identical_on_rerun(docs):
    kind = dv.format_kind("all formats", docs, 1, True)
    assert dv.groups(kind.texts, CLEAN) == dv.groups(dict(reversed(kind.texts.items())), CLEAN)


@pytest.mark.parametrize("copy,plain", [
    ("it&#39;s a &quot;test&quot; &amp; more&nbsp;here", 'it\'s a "test" & more\u00a0here'),
    ("wo\u200drd and\u200c that\u200e", "word and that"),
    ("\uff37\uff49\uff44\uff45 letters", "wide letters"),
    ("\ufb01nd the o\ufb03ce", "find the office"),
    ("STRASSE", "straße"),
    ("it&amp;#39;s a &amp;amp;quot;test&amp;amp;quot;", 'it\'s a "test"'),         # escaped twice, thrice
])
def test_shingle_text_folds_planted_copies(copy, plain):
    assert shingle_text(copy).lower() == shingle_text(plain).lower()     # the shingler lowercases ASCII itself
    spec = DedupSpec(shingle_size=2)
    assert np.array_equal(shingles(copy, spec), shingles(plain, spec))


@pytest.mark.parametrize("a,b", [
    ("the price is 10 dollars", "the price is 12 dollars"),       # facts: numbers are not folded
    ("resume the job", "résister the job"),                        # Latin diacritics fold, letters do not
    ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",                       # Persian: ZWNJ dropped,
     "\u0645\u06cc \u062e\u0648\u0627\u0647\u0645"),                             # not made a space
    ("a &lt; b", "a &gt; b"),
    ("a &amp;lt; b", "a &amp;gt; b"),
])
def test_shingle_text_keeps_look_alikes_apart(a, b):
    assert shingle_text(a) != shingle_text(b)


def test_ascii_text_shingles_as_before(docs):
    """With no `&` and no non-ASCII character the folds change only the German digraphs (`ae` → `a`, in every
    text) and markdown's `_emphasis_` (`marks.fold_digraphs`, `textmarks.fold_emphasis`)."""
    texts = [t for _, t in docs if t.isascii() and "&" not in t]
    assert len(texts) >= 6
    plain = [fold_digraphs(fold_emphasis(t)) for t in texts]
    for folded, raw in zip(shingle_sets(texts, CLEAN.dedup), shingle_sets(plain, NO_FOLDS.dedup)):
        assert np.array_equal(folded, raw)
    assert all(shingle_text(t) == p for t, p in zip(texts, plain))


def test_each_fold_can_be_turned_off():
    text = "o\ufb03ce &amp; wo\u200drd"
    assert shingle_text(text, entities=False) == "office &amp; word"
    assert shingle_text(text, invisible=False) == "office & wo\u200drd"
    assert shingle_text(text, unicode=False) == "o\ufb03ce & word"


def test_char_shingles_are_folded_too(docs):
    char = CleanSpec(dedup=DedupSpec(shingle="char", shingle_size=12))
    char_off = CleanSpec(dedup=char.dedup.model_copy(update=NO_FOLDS.dedup.model_dump(include={
        "fold_entities", "fold_invisible", "fold_unicode"})))
    kind = dv.format_kind("all formats", docs, 1, True)
    assert dv.evaluate(kind, char)["recall"] == 1.0
    assert dv.evaluate(kind, char_off)["recall"] <= 0.1


def test_quotes_fold_only_when_asked():
    text = "\u201cdon\u2019t\u201d \u2013 or \u2014 x\u2032"
    assert shingle_text(text, quotes=True) == "\"don't\" - or - x'"
    assert shingle_text(text) == text                  # word shingles drop punctuation either way
    word, char = DedupSpec(shingle_size=2), DedupSpec(shingle="char", shingle_size=4)
    assert np.array_equal(shingles(text, word), shingles("\"don't\" - or - x'", word))
    assert np.array_equal(shingles(text, char), shingles("\"don't\" - or - x'", char))
    assert not np.array_equal(shingles(text, char), shingles("\"don't\" + or + x'", char))


def test_edits_straddle_the_threshold(docs):
    """The edit kinds hold true negatives near the threshold, so 'no false merge' above means something."""
    kinds = {name: dv.edit_kind(name, docs, 1, 0.8) for name in dv.EDITS}
    assert all(j < 0.8 for j in kinds["truncated to 70%"].jaccard.values())
    assert all(0.85 <= j < 0.95 for j in kinds["truncated to 90%"].jaccard.values())
    near_misses = [j for k in kinds.values() for j in k.jaccard.values() if 0.6 <= j < 0.8]
    assert len(near_misses) >= 40


def as_html_page(text: str) -> str:
    """`text` as a scraped page that kept its markup: head, style, a wrapper and a tag with attributes per
    paragraph."""
    paras = "".join(f'<p class="article-body para" data-index="{k}">{p}</p>\n'
                    for k, p in enumerate(q for q in text.split("\n\n") if q.strip()))
    return ('<html><head><title>Article</title><style>p { color: #333; }</style></head><body>'
            f'<div class="main-content" id="article">\n{paras}</div></body></html>')


def test_markup_left_in_is_read_as_html(docs):
    """A copy that kept its HTML markup is a near duplicate of its plain text (before `fold_markup` each tag and
    attribute were words of their own: an adversarial review measured recall 0.07 on such copies)."""
    texts = {}
    for doc_id, text in docs:
        if not doc_id.startswith("code/"):
            texts[doc_id], texts[f"{doc_id}.html"] = text, as_html_page(text)
    off = CLEAN.model_copy(update={"dedup": CLEAN.dedup.model_copy(update={"fold_markup": False})})
    joined = {}
    for name, spec in (("on", CLEAN), ("off", off)):
        keeper = dv.groups(texts, spec)
        joined[name] = sum(keeper[d] == keeper[f"{d}.html"] for d in texts if not d.endswith(".html"))
        assert len(set(keeper.values())) >= len(texts) // 2      # no page merged with another's copy
    assert joined["on"] == 18 and joined["off"] <= 6, joined


def escaped(text: str, rng: random.Random, times: int) -> str:
    """`text` with HTML entities left in (`dv.FORMATS["HTML entities"]`), escaped again `times - 1` times, as a
    feed re-encoded by a CMS has it (`&amp;quot;`, `&amp;amp;lt;`)."""
    copy = dv.FORMATS["HTML entities"](text, rng)
    for _ in range(times - 1):
        copy = copy.replace("&", "&amp;")
    return copy


def test_entities_escaped_twice_or_thrice_are_decoded(docs):
    """Copies escaped twice or three times are near duplicates, a 70 % truncation escaped twice (J < 0.8) stays
    apart. Decoded once, each `&quot;` or `&amp;` left was a word (`quot`, `amp`): the dedup audit found no copy
    escaped twice (recall 0, J 0.29)."""
    rng, texts = random.Random(2), {}
    for doc_id, text in docs:
        short = dv.EDITS["truncated to 70%"](text, rng, text)
        texts.update({doc_id: text, f"{doc_id}~2": escaped(text, rng, 2), f"{doc_id}~3": escaped(text, rng, 3),
                      f"{doc_id}~70": escaped(short, rng, 2)})
    keeper = dv.groups(texts, CLEAN)
    assert [d for d, _ in docs if not keeper[d] == keeper[f"{d}~2"] == keeper[f"{d}~3"]] == []
    assert [d for d, _ in docs if keeper[d] == keeper[f"{d}~70"]] == []


def as_feed_item(text: str) -> str:
    """`text` as an RSS item's body: its page (`as_html_page`, the text's own `<` and `&` escaped) escaped."""
    return html.escape(as_html_page(html.escape(text, quote=False)))


def test_escaped_markup_of_a_feed_item_is_read_as_html(docs):
    """A feed item's escaped page (`&lt;p class=&quot;article-body …&quot;&gt;`) is a near duplicate of its text,
    the item of a 70 % truncation stays apart. With entities decoded after the markup step, its tags and
    attributes were words: the dedup audit found 6 % of such copies (J 0.57)."""
    texts = {}
    for doc_id, text in docs:
        short = dv.EDITS["truncated to 70%"](text, None, text)
        texts.update({doc_id: text, f"{doc_id}.rss": as_feed_item(text), f"{doc_id}.70.rss": as_feed_item(short)})
    keeper = dv.groups(texts, CLEAN)
    assert [d for d, _ in docs if keeper[d] != keeper[f"{d}.rss"]] == []
    assert [d for d, _ in docs if keeper[d] == keeper[f"{d}.70.rss"]] == []


@pytest.mark.parametrize("text,read", [
    ("&lt;div&gt;&lt;p&gt;Hello there&lt;/p&gt;&lt;p&gt;World &amp;amp; co and all&lt;/p&gt;&lt;/div&gt;",
     "Hello there World & co and all"),
    ("&amp;lt;div&amp;gt;&amp;lt;p&amp;gt;Hello again, my old friend&amp;lt;/p&amp;gt;&amp;lt;br&amp;gt;"
     "&amp;lt;/div&amp;gt;", "Hello again, my old friend"),
    # a page whose text shows escaped tags (a tutorial) keeps them as text, and so does prose naming one tag
    ("<html><body><p>Write &lt;b&gt;bold&lt;/b&gt; like &lt;i&gt;this&lt;/i&gt;</p><div>x</div></body></html>",
     "Write <b>bold</b> like <i>this</i> x"),
    ("use &lt;p&gt; for paragraphs", "use <p> for paragraphs"),
])
def test_escaped_tags_are_decoded_before_the_markup_step(text, read):
    assert shingle_text(text).strip() == read


TEMPLATES = [      # code: markup with a few visible words or none (Angular, Vue, Jinja, plain forms)
    '<ul class="list">\n  <li *ngFor="let item of items" (click)="select(item)">\n    <img [src]="item.url">\n'
    '  </li>\n</ul>\n',
    '<form (ngSubmit)="save()"><input name="q" [(ngModel)]="q"><button type="submit"></button></form>',
    '<div v-if="user"><span>{{ user.name }}</span><img :src="user.avatar" alt=""></div>',
    '<tr class="row" data-id="{{ row.id }}"><td class="cell">{{ row.total }}</td><td><b>x</b></td></tr>',
    '<nav><a href="/">Home</a><a href="/docs">Docs</a><a href="/blog">Blog</a></nav>',
    '<section id="hero" class="flex items-center"><h1 class="text-4xl font-bold">Home</h1></section>',
]


def test_templates_that_show_little_text_are_shingled_as_written(docs):
    """Markup whose visible text is under a shingle's worth of words (a code template) is its content: read as its
    visible text, every such template shingled to one empty shingle and any two were near duplicates (J = 1)."""
    assert all(shingle_text(t) is t for t in TEMPLATES)
    texts = {f"tpl/t{k}.html": t for k, t in enumerate(TEMPLATES)}
    texts.update({doc_id: text for doc_id, text in docs[:4]})
    texts.update({f"{doc_id}.html": as_html_page(text) for doc_id, text in docs[:4]})   # page copies still fold
    keeper = dv.groups(texts, CLEAN)
    assert {keeper[d] for d in texts if d.startswith("tpl/")} == {d for d in texts if d.startswith("tpl/")}
    assert all(keeper[d] == keeper[f"{d}.html"] for d, _ in docs[:4])


@pytest.mark.parametrize("text", [
    "if a<b and c>d: return x<y",                                  # comparisons, not tags
    "List<Map<String, Integer>> m = new HashMap<>();",             # generics
    "Use <b>bold</b> once",                                         # fewer than three tags
    "template <typename T> T max(T a, T b) { return a > b ? a : b; }",
])
def test_markup_fold_leaves_code_and_maths_alone(text):
    assert shingle_text(text) is text


CYRILLIC = str.maketrans("aeopcxyAEOPCXH", "аеорсхуАЕОРСХН")   # Cyrillic look-alikes of Latin letters


def salted(text: str, every: int) -> str:
    """`text` with the Latin letters of every `every`-th word swapped for Cyrillic look-alikes."""
    words = text.split(" ")
    return " ".join(w.translate(CYRILLIC) if k % every == 0 else w for k, w in enumerate(words))


def test_look_alike_letters_are_read_as_latin(docs):
    """Copies salted with Cyrillic look-alikes (in every 5th word, or every word) are near duplicates; before
    `fold_confusables` an adversarial review found 1 of 30 such copies at 5 % of the words, 0 at 20 %."""
    texts = {}
    for doc_id, text in docs:
        texts[doc_id], texts[f"{doc_id}.5"], texts[f"{doc_id}.1"] = text, salted(text, 5), salted(text, 1)
    off = CLEAN.model_copy(update={"dedup": CLEAN.dedup.model_copy(update={"fold_confusables": False})})
    joined = {}
    for name, spec in (("on", CLEAN), ("off", off)):
        keeper = dv.groups(texts, spec)
        joined[name] = sum(keeper[d] == keeper[f"{d}.{k}"] for d, _ in docs for k in (5, 1))
    assert joined["on"] == 2 * len(docs) and joined["off"] <= 2, joined


RUSSIAN = ("Вчера на заседании городского совета депутаты обсудили проект нового бюджета на следующий год. По "
           "словам председателя, расходы на образование вырастут почти на сорок процентов, а средства на ремонт дорог "
           "будут распределены между районами поровну. Жители смогут высказать своё мнение на публичных слушаниях, "
           "которые пройдут в конце месяца в здании администрации. Расчёты выполнены на Python.")
GREEK = ("Η Αθήνα είναι η πρωτεύουσα και η μεγαλύτερη πόλη της Ελλάδας. Είναι μια από τις αρχαιότερες πόλεις του "
         "κόσμου, με καταγεγραμμένη ιστορία που εκτείνεται σε περίπου 3.400 χρόνια, και σήμερα η μητροπολιτική "
         "περιοχή της έχει περίπου τρία εκατομμύρια κατοίκους που ζουν γύρω από την Ακρόπολη.")
LATIN_LOOKS = str.maketrans("аеорсАЕОРСοΟ", "aeopcAEOPCoO")   # Latin look-alikes of Cyrillic and Greek letters


def _jaccard(a: str, b: str) -> float:
    x, y = shingle_sets([a, b], CLEAN.dedup)
    return len(np.intersect1d(x, y)) / len(np.union1d(x, y))


@pytest.mark.parametrize("text", [RUSSIAN, GREEK], ids=["russian", "greek"])
def test_text_in_other_scripts_folds_alike_with_its_copies(text):
    """Every text is folded, whatever its script: a Russian or Greek text and its copy with one Latin look-alike
    letter, a fifth of its words salted with them, or in upper case, share their shingles (before, the fold ran
    only on a text where a word mixed scripts, so the copy with one Latin `o` was folded and its original not:
    J 0.00, not a near duplicate)."""
    words = text.split(" ")
    salt = next(k for k, w in enumerate(words) if k >= 9 and w.translate(LATIN_LOOKS) != w)
    one = " ".join(w.translate(LATIN_LOOKS) if k == salt else w for k, w in enumerate(words))
    fifth = " ".join(w.translate(LATIN_LOOKS) if k % 5 == 0 else w for k, w in enumerate(words))
    assert one != text and fifth != text
    assert _jaccard(text, one) == _jaccard(text, fifth) == _jaccard(text, text.upper()) == 1.0
    assert _jaccard(text, text.replace("Python", "Pythonе")) >= 0.8 if "Python" in text else True
    assert dv.groups({"a": text, "b": one, "c": fifth}, CLEAN) == {"a": "a", "b": "a", "c": "a"}


def test_folded_scripts_stay_apart():
    """Folding does not join different texts: the Russian and Greek ones, each half of one, and each against
    a Latin text share no shingle."""
    half = len(RUSSIAN) // 2
    pairs = [(RUSSIAN, GREEK), (RUSSIAN[:half], RUSSIAN[half:]), (GREEK, "the city is one of the oldest in the world")]
    assert all(_jaccard(a, b) == 0.0 for a, b in pairs)
