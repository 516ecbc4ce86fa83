"""Near dedup's shingle folds for edits a crawl makes between copies of one text (a probe of crawl edits found
each missed): emoji variation selectors, words hyphenated at line breaks (`-` or U+2010), markdown reference links,
wiki citation markers, numbered-list numbers, Arabic tatweel and letter variants, Persian keyboard letters, Hindi
nukta and chandrabindu, Russian `ё`. Each copy below was J < 0.8 with its original before its fold and kept by
clean; now J ≥ 0.8 and it is removed, through clean's phase 1 and dedup (in memory) and its real path
(`process_shard` per ingest shard, then the out-of-core `dedup_global`). Distinct texts stay apart, and the
compiled word path equals the folds' definition on text made of these pieces."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import CleanSpec, DedupSpec
from specs.run import ExecutorSpec
from tasks.data.cleanup import cleaning
from tasks.data.cleanup.normalize import normalize_text
from tasks.data.cleanup.textmarks import fold_marks, marked_docs
from tasks.data.cleanup import textbatch
from tasks.data.dedup import dedup_global, minhash
from tasks.data.dedup.marks import drop_pointing, join_hyphenated
from tasks.data.records import RECORD_SCHEMA, write_table
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.helpers import dedup_variants as dv

CLEAN = CleanSpec()
ROOT = Path(__file__).resolve().parents[1]
EN = ("The river rises in a shallow bog and runs east through a narrow wooded valley where it is joined by several "
      "fast mountain streams. Below the village it enters a broad plain, slows down and begins to meander, forming "
      "lakes and wide wetlands that flood almost every winter. Farmers along its banks grow barley and keep cattle.")
RECIPE = ("Method\n• Mash the ripe bananas in a large bowl.\n• Stir in the melted butter and brown sugar.\n"
          "• Fold in the flour gently with a spoon.\n• Bake until a skewer comes out clean.\n"
          "• Cool on a rack before slicing.")
AR = ("وتتضمن الخطة إصلاح شبكات التوزيع القديمة التي تفقد جزءا كبيرا من المياه بسبب التسربات وتشجيع المزارعين على "
      "استخدام أنظمة الري بالتنقيط بدلا من الري بالغمر كما تنص على إنشاء محطات جديدة لتحلية مياه البحر ومعالجة المياه "
      "العادمة لإعادة استخدامها في الزراعة والصناعة على مدى السنوات العشر القادمة")
FA = ("یکی از مدیران شهرداری گفت که هدف این طرح کاهش تعداد روزهای آلوده در فصل سرما است و بیشتر آلودگی هوای تهران از "
      "خودروها و موتورسیکلت‌های قدیمی ناشی می‌شود و نوسازی ناوگان حمل و نقل عمومی باید در اولویت قرار گیرد")
HI = ("ज़िला प्रशासन ने राहत और बचाव कार्य तेज़ कर दिए हैं आपदा प्रबंधन की टीमें नावों की मदद से फँसे हुए लोगों को "
      "सुरक्षित स्थानों पर पहुँचा रही हैं अब तक करीब दो हजार लोगों को राहत शिविरों में ले जाया गया है जहाँ उनके लिए खाने "
      "पीने के पानी और दवाइयों का इंतज़ाम किया गया है")
RU = ("Озеро вытянуто с северо-востока на юго-запад почти на шестьсот тридцать километров и похоже на огромный "
      "полумесяц, в него впадает более трёхсот рек и ручьёв, а вытекает лишь одна Ангара. Вода озера отличается "
      "необыкновенной прозрачностью, и камни на дне видны на большой глубине; её объём огромен.")


def _numbered(text: str, mark: str) -> str:
    lines, n = [], 0
    for line in text.split("\n"):
        n = n + 1 if line.startswith("• ") else 0
        lines.append(mark.format(n) + line[2:] if n else line)
    return "\n".join(lines)


def _hyphenated(text: str, hyphen: str) -> str:
    return dv.hyphen_wrap(text, 30, hyphen)   # one paragraph at 30 columns: every long word crossing it cut


def _reference_links(text: str) -> str:
    words = ["river", "valley", "village", "wetlands"]
    for n, word in enumerate(words, 1):
        text = text.replace(word, f"[{word}][{n}]", 1)
    return text + "\n\n" + "\n".join(f"[{n}]: https://en.wikipedia.org/wiki/{w.title()}" for n, w in
                                      enumerate(words, 1))


# (original, copy): each J < 0.8 before its fold
COPIES = {
    "emoji with VS16": (EN, EN.replace("streams.", "streams. \u2764\ufe0f").replace("down and", "down \u2600\ufe0f and")
                        .replace("winter.", "winter. \u2615\ufe0f")),
    "keycap list": (RECIPE, _numbered(RECIPE, "{}\ufe0f\u20e3 ")),
    "numbered list 1.": (RECIPE, _numbered(RECIPE, "{}. ")),
    "numbered list 1)": (RECIPE, _numbered(RECIPE, "{}) ")),
    "hyphenated at line breaks": (EN, _hyphenated(EN, "-")),
    "hyphenated with U+2010": (EN, _hyphenated(EN, "\u2010")),
    "reference links": (EN, _reference_links(EN)),
    "wiki citation markers": (EN, EN.replace("streams.", "streams.[1]").replace("winter.", "winter.[2][3]")
                              .replace("down and", "down[citation needed] and").replace("cattle.", "cattle.[4]")),
    "Arabic tatweel": (AR, AR.replace("الخطة", "الخطـــة").replace("المزارعين", "المـزارعين")
                       .replace("القديمة", "القديـمة")),
    "Arabic hamza left out": (AR, AR.replace("أ", "ا").replace("إ", "ا")),
    "Arabic final yeh as alef maksura": (AR, AR.replace("ي ", "ى ")),
    "Arabic teh marbuta as heh": (AR, AR.replace("ة ", "ه ")),
    "Persian on an Arabic keyboard": (FA, FA.replace("ی", "ي").replace("ک", "ك")),
    "Hindi without nukta": (HI, HI.replace("\u093c", "")),
    "Hindi chandrabindu as anusvara": (HI, HI.replace("\u0901", "\u0902")),
    "Russian ё as е": (RU, RU.replace("ё", "е")),
    "Hangul filler inside words": (EN, re.sub(r"[A-Za-z]{4,}", lambda m: m[0][:2] + "\u3164" + m[0][2:], EN)),
    "halfwidth Hangul filler": (RU, re.sub(r"\w{4,}", lambda m: m[0][:1] + "\uffa0" + m[0][1:], RU)),
}


def jaccard(a: str, b: str, spec: DedupSpec = CLEAN.dedup) -> float:
    x, y = minhash.shingle_sets([normalize_text(a), normalize_text(b)], spec)
    return len(np.intersect1d(x, y)) / len(np.union1d(x, y))


def real_keepers(texts: list[str], folder) -> dict[int, int]:
    """Row -> the row kept for it, by clean's real path: `process_shard` on an ingest shard, then
    `dedup_global.deduplicate` (filters, PII and quality off)."""
    spec, executor = CleanSpec(filters=[], pii={"enabled": False}, quality={"enabled": False}), ExecutorSpec(workers=1)
    rows = [{"id": f"{k:07d}", "text": t, "source": "fold", "lang": "xx", "origin": f"fold:{k}", "meta": "{}",
             "media": []} for k, t in enumerate(texts)]
    write_table(rows, RECORD_SCHEMA, folder / "s.in.parquet")
    cleaning.process_shard(folder / "s.in.parquet", folder / "s.parquet", spec, 1, ROOT,
                           dedup_global.plan_buckets(len(texts), spec, executor))
    d = dedup_global.deduplicate(dedup_global.layout_of(folder, ["s"]), spec, 1, executor)["decisions"]
    return dict(zip(d.rows.tolist(), d.keeper.tolist()))


def assert_near_copy(original: str, copy: str) -> None:
    """`copy` differs from `original`, its shingles are within the threshold and the in-memory path merges them."""
    assert copy != original and jaccard(original, copy) >= 0.8
    assert dv.groups({"a": original, "b": copy}, CLEAN) == {"a": "a", "b": "a"}


def assert_copies_removed(copies: dict[str, tuple[str, str]], folder: Path) -> None:
    """Clean's real path keeps every original and removes each copy for its own original."""
    originals = list(dict.fromkeys(original for original, _ in copies.values()))
    keeper = real_keepers(originals + [copy for _, copy in copies.values()], folder)

    def final(k: int) -> int:
        while k in keeper:
            k = keeper[k]
        return k
    assert not keeper.keys() & set(range(len(originals)))
    assert [final(len(originals) + n) for n in range(len(copies))] == [originals.index(o) for o, _ in copies.values()]


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_with_the_edit_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_without_their_folds_the_copies_were_missed():
    off = {"emoji with VS16": None, "numbered list 1.": dict(fold_markup=False),
           "reference links": dict(fold_markup=False), "wiki citation markers": dict(fold_markup=False),
           "hyphenated at line breaks": dict(fold_hyphenation=False), "Arabic hamza left out": dict(fold_pointing=False),
           "Russian ё as е": dict(fold_pointing=False), "Hindi without nukta": dict(fold_pointing=False),
           "Hangul filler inside words": dict(fold_invisible=False),
           "halfwidth Hangul filler": dict(fold_invisible=False)}
    for name, update in off.items():
        if update:
            assert jaccard(*COPIES[name], DedupSpec(**update)) < 0.8, name
    # a variation selector is no word, whatever the folds (it was a word of its own: J 0.67 for this copy)
    assert jaccard(*COPIES["emoji with VS16"], DedupSpec(fold_invisible=False)) == 1.0


DISTINCT = [      # texts that share a template or a vocabulary, each pair with the edits the folds read
    (RECIPE, "Method\n• Whisk the eggs with a fork.\n• Warm the milk in a small pan.\n• Pour the custard into "
             "cups.\n• Steam for twelve minutes.\n• Chill overnight before serving."),
    ("Results\n1. Anna Berg\n2. Carl Dahl\n3. Eva Fors\n4. Gus Holm\n5. Ida Jung\n6. Kai Lund",
     "Results\n1. Kai Lund\n2. Ida Jung\n3. Gus Holm\n4. Eva Fors\n5. Carl Dahl\n6. Anna Berg"),   # reversed
    (_hyphenated(EN, "-"), _hyphenated(RU, "-")),
    (AR[:len(AR) // 2], COPIES["Arabic hamza left out"][1][len(AR) // 2:]),
    (COPIES["wiki citation markers"][1], COPIES["reference links"][1].replace("river", "glacier")
     .replace("village", "town").replace("barley", "rye").replace("fast", "cold").replace("plain", "basin")),
]


@pytest.mark.parametrize("a,b", DISTINCT)
def test_distinct_texts_stay_apart(a, b):
    assert jaccard(a, b) < 0.5
    assert dv.groups({"a": a, "b": b}, CLEAN) == {"a": "a", "b": "b"}


@pytest.mark.parametrize("text", [
    "x = arr[12]\ny = arr[3] + m[1][2]\nprint(a[0])",                  # code's subscripts: no marker after `.`
    "See the notes:\n[1] Smith, J. River basins.\n[2] Berg, A. Wetlands.",   # a reference list, not markers
    "pi is 3.14 and\n2019. was a year\n1. 2. 3.\n12.5 percent",          # no list item
    "[Paris][1] without a definition, and [x]: not a URL",
])
def test_marks_that_are_not_these_are_left_alone(text):
    assert fold_marks(text) is text
    data, ends = textbatch.joined([text])
    assert marked_docs([text], data, ends) == set()


@pytest.mark.parametrize("copy,plain", [
    ("It flows east.[12] Then, in 1990,[a] it flooded[citation needed] again.[3][4]",
     "It flows east. Then, in 1990, it flooded again."),
    ("A [river][r] and a [lake][].\n\n[r]: https://x.org/river\n[lake]: </lake> \"The lake\"", "A river and a lake.\n"),
    ("Steps\n1. Mix\n  2) Bake\n10. Cool", "Steps\nMix\nBake\nCool"),
])
def test_marks_read_as_the_text_they_mark(copy, plain):
    assert fold_marks(copy) == plain


def test_a_hyphenated_compound_or_two_words_stay_apart():
    # the compound on one line elsewhere, part of a longer compound, a part of another compound, or both parts
    # words elsewhere: not joined
    for text in ("keyword-\nonly and keyword-only", "angle-addr-\nstart", "the decimal-\npoint: a decimal point",
                 "non-\nnegative or non-zero", "the left-\nhand and the right-hand side"):
        assert join_hyphenated(text) is text
    assert join_hyphenated("the infor-\nmation and the val\u2010\n   ley") == "the information and the valley"


def test_spelling_folds_keep_distinct_words_apart():
    # the folds read variants as one letter; other letters stay as they are (no diacritic folded; another
    # script's digits are read as the ASCII digit of the same value, no other)
    assert drop_pointing("ёлка أحمد مكتبة على یک") == "елка احمد مكتبه علي يك"
    assert drop_pointing("елка ель жёлудь") != drop_pointing("ель елка желудь жёлудь")
    assert drop_pointing("résumé naïve") == "résumé naïve" and drop_pointing("هذا ٢٠٣٠") == "هذا 2030"


PIECES = ["the", "Word", " ", "\n", "\n\n", "\t", "7", ".", "[", "]", "ёлка", "ЁЖ", "أحمد", "إلى", "مكتبة", "على",
          "ـ", "یک", "کتاب", "ज़िला", "फ़", "\u0901", "ऩ", "❤\ufe0f", "1\ufe0f\u20e3 ", "\n1. ", "\n 2) ", "12. ", ".[3]",
          "[citation needed]", "[x][1]", "\n[1]: https://a.b/c", "infor\u2010\n", "exam-\n", "ple", "été", "а", "’",
          "[a](https://x.y/z)", "日本", "😀", "&amp;", "<p>x</p><p>y</p><div>z</div>", "\u200d"]
texts = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_folds_definition(raw):
    """The compiled path (a text without a hint is not folded; the exact keys' folds reused) equals the chain of
    folds, on text made of the pieces these folds read."""
    assert_compiled_path_is_the_definition(raw)
