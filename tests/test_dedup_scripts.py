"""Near dedup on scripts written without spaces (each character a word unit) and on markdown copies."""

from __future__ import annotations

import re

import numpy as np
import pytest

from specs.clean import DedupSpec
from tasks.data.cleanup.normalize import shingle_text
from tasks.data.cleanup import textbatch
from tasks.data.dedup import hashloops, minhash
from tasks.data.dedup.lineprefix import prefixed_docs, strip_line_prefixes
from tasks.data.dedup.marks import hyphenated_docs, join_hyphenated
from tasks.data.dedup.segment import has_unspaced, split_unspaced
from tasks.data.dedup.wordhash import MUL, word_hashes

ZH = ("Python（派森）语言是一种功能强大而完善的通用型计算机程序设计语言，已经具有十多年的发展历史，成熟且稳定。"
      "这种语言具有非常简捷而清晰的语法特点，适合完成各种高层任务，几乎可以在所有的操作系统中运行。"
      "这种语言简单而强大，适合各种人士学习使用。目前，基于这种语言的相关技术正在飞速的发展，用户数量急剧扩大，"
      "相关的资源非常多。")
ZH_OTHER = ("这些进入介绍说明简介使用可以实现。发现同时全部广告实现方法其中自己。科技网上不要一直结果使用基本然后。"
            "这样注册很多首页商品以后具有增加。电子能够不同那些以后网络什么但是。报告学习简介这样显示建设为了搜索。")
JA = ("Python の開発は、1990 年ごろから開始されています。開発者の Guido van Rossum は教育用のプログラミング言語「ABC」の"
      "開発に参加していましたが、ABC は実用上の目的にはあまり適していませんでした。このため、Guido はより実用的な"
      "プログラミング言語の開発を開始し、英国 BBS 放送のコメディ番組「モンティ パイソン」のファンである Guido は"
      "この言語を「Python」と名づけました。")
TH = ("เฉยแปรงเตาเพียงเมตตากูกระถางสีแดง ชุมนุมใจไอศกรีมนิ่มสีแดงเนื่องจากแมลงคบ แมคหนูปากลืมคาวเยาวชนกีฬาแลกพิการ "
      "ดาวเทียมกว้างหนุนนุ่นเริ่มหม้อริมหาบ ถางสถานีเทเลแกรมเห็นหม้อขนมชั้นแข่งขันโง่ "
      "อัศจรรย์ที่เมตตาดาวเทียมบูดไต้หวันตัวอย่างพักผ่อน")
KO = "대한민국의 수도는 서울이며 가장 큰 도시이다. 서울은 한강을 끼고 있으며 인구는 약 천만 명이다. 부산은 두 번째로 큰 도시이다."


def jaccard(a: str, b: str, spec: DedupSpec = DedupSpec()) -> float:
    x, y = minhash.shingles(a, spec), minhash.shingles(b, spec)
    return len(np.intersect1d(x, y)) / len(np.union1d(x, y))


def one_char_changed(text: str, at: int) -> str:
    spots = [i for i, c in enumerate(text) if has_unspaced(c) and c.isalpha()]
    i = spots[at]
    return text[:i] + ("字" if text[i] != "字" else "文") + text[i + 1:]


@pytest.mark.parametrize("text", [ZH, JA, TH], ids=["zh", "ja", "th"])
def test_one_character_changed_is_a_near_duplicate(text):
    # Before, a sentence was one "word": one changed character removed most shingles (J 0.0-0.5)
    copy = one_char_changed(text, len(text) // 3)
    assert jaccard(text, copy) >= 0.9
    assert jaccard(text, copy + "又加了一句话。") >= 0.8


@pytest.mark.parametrize("text", [ZH, JA, TH], ids=["zh", "ja", "th"])
def test_near_copies_are_removed_and_distinct_texts_kept(text):
    copies = [one_char_changed(text, k) for k in (3, 20, 40)]
    texts = [text, *copies, ZH_OTHER, KO]
    ids = [f"d{k}" for k in range(len(texts))]
    spec = DedupSpec()
    result = minhash.near_duplicates(ids, minhash.signatures(texts, spec), None, spec,
                                     lambda q: minhash.shingle_sets([texts[ids.index(i)] for i in q], spec))
    assert sorted(d for d, _, _ in result.dropped) == ["d1", "d2", "d3"]


def test_each_character_is_a_unit_and_other_words_stay_whole():
    # the shingles are those of the text with every CJK/kana/Thai character spaced out; Latin words, digits and
    # Hangul eojeol stay one unit each
    for text in (ZH, JA, TH, "𠀀𠀁𠀂𠀃𠀄𠀅 Ｆｕｌｌ ｗｉｄｔｈ 漢字 &amp; かな"):
        spaced = split_unspaced(shingle_text(text))
        words, _ = word_hashes([spaced])
        assert len(words) == len(re.findall(r"\w+", spaced.lower()))
        grams = hashloops.ngram_hashes(words, np.array([len(words)]), 5, MUL)[0]
        assert np.array_equal(minhash.shingles(text, DedupSpec()), np.unique(grams))
    assert split_unspaced("Guido は ABC") == "Guido  は  ABC"
    assert len(minhash.shingles(KO, DedupSpec())) == len(KO.split()) - 4     # one unit per eojeol
    assert split_unspaced(KO) == KO and not has_unspaced("plain ASCII, café, Ελληνικά, русский")


def test_distinct_chinese_texts_stay_apart():
    assert jaccard(ZH, ZH_OTHER) < 0.05


PLAIN = ("The city of Paris is the capital of France and its largest city. It lies on the river Seine in the north "
         "of the country, and its metropolitan area holds about twelve million people. Paris is known for its "
         "museums, its architecture and its food, and it receives tens of millions of visitors every year.")


def test_markdown_links_fold_to_their_text():
    # each link's URL added ~6 words (`https en wikipedia org wiki paris`): the copy was no near duplicate
    md = ("# " + PLAIN.replace("Paris", "[Paris](https://en.wikipedia.org/wiki/Paris)")
          .replace("France", "**[France](https://en.wikipedia.org/wiki/France \"France\")**")
          .replace("Seine", "![Seine](/images/seine.png)"))
    assert jaccard(PLAIN, md) == 1.0
    assert jaccard(PLAIN, md, DedupSpec(fold_markup=False)) < 0.5


def test_a_markdown_link_target_may_hold_parentheses():
    # Wikipedia's disambiguated titles (`/wiki/Paris_(mythology)`): with `(` refused in the target such links stayed
    # whole (a probe: 3 in 70 words, J 0.63); one level of balanced parentheses is read, an unbalanced one is not
    md = (PLAIN.replace("Paris", "[Paris](https://en.wikipedia.org/wiki/Paris_(France))")
          .replace("Seine", "[Seine](https://en.wikipedia.org/wiki/Seine_(river) \"Seine (river)\")"))
    assert jaccard(PLAIN, md) == 1.0
    assert shingle_text("[Paris](https://x.org/a_(b) is") == "[Paris](https://x.org/a_(b) is"


def test_markdown_link_text_may_wrap_onto_a_second_line():
    # text filled to 80 columns breaks lines inside a link's text: such a link was left as it was, its URL's
    # words in every 5-gram around it (the dedup audit: J 0.31 with the same links unwrapped)
    md = (PLAIN.replace("capital of France", "[capital of\nFrance](https://en.wikipedia.org/wiki/France)")
          .replace("river Seine", "[river\nSeine](https://en.wikipedia.org/wiki/Seine \"Seine\")")
          .replace("its architecture", "![its\narchitecture](/images/paris.png)"))
    assert jaccard(PLAIN, md) == 1.0
    assert jaccard(PLAIN, md, DedupSpec(fold_markup=False)) < 0.6
    # a blank line ends a markdown link: what spans one is text, and stays (a near miss, J 0.79)
    blank = md.replace("river\nSeine", "river\n\nSeine")
    assert "[river\n\nSeine](https://" in shingle_text(blank) and jaccard(PLAIN, blank) < 0.8
    # an edited copy with wrapped links is compared on its words alone, and stays apart (J 0.76)
    assert jaccard(PLAIN, md.replace("twelve million", "two million").replace("every year", "in summer")) < 0.8


def test_code_that_looks_like_a_link_is_left_alone():
    code = "result = handlers[key](request.args)\nvalue = table[row](column) + [a](b)\n" * 3
    assert np.array_equal(minhash.shingles(code, DedupSpec()), minhash.shingles(code, DedupSpec(fold_markup=False)))


CODE = "\n".join(["def area(width, height):", "    \"\"\"The area of a rectangle of the given size.\"\"\"",
                  "    if width < 0 or height < 0:", "        raise ValueError('sizes must not be negative')",
                  "    return width * height", "", "", "def perimeter(width, height):",
                  "    return 2 * (width + height)", "", "print(area(3, 4), perimeter(3, 4))"])
LOG = [("INFO", "worker started with four threads and an empty queue"), ("DEBUG", "connected to the database at db01"),
       ("INFO", "accepted job 17 from the scheduler for nightly export"), ("WARNING", "job 17 is slow: 40 s so far"),
       ("INFO", "job 17 finished and wrote 3 files to the bucket"), ("INFO", "worker idle, waiting for jobs")]


def test_line_numbers_and_timestamps_are_not_shingled():
    # before: every line's number or timestamp was in nearly every 5-gram (J 0.1-0.3), no copy was found
    listing = "\n".join(f"{n:>4}  {line}".rstrip() for n, line in enumerate(CODE.split("\n"), 1))
    assert jaccard(CODE, listing) == 1.0
    monday = "\n".join(f"2024-03-04 09:00:{k:02d},{k * 37:03d} {lvl} {msg}" for k, (lvl, msg) in enumerate(LOG))
    tuesday = "\n".join(f"[2024-03-05T17:{k:02d}:13.5Z] {lvl} {msg}" for k, (lvl, msg) in enumerate(LOG))
    assert jaccard(monday, tuesday) == 1.0
    assert jaccard(monday, tuesday, DedupSpec(fold_line_prefixes=False)) < 0.5


def test_text_with_a_few_numbered_lines_is_left_alone():
    # a numbered list inside prose, a table of years, a text whose first line has no prefix: shingled as before
    texts = ["Steps to follow:\n1. Open the valve.\n2. Wait ten minutes.\n3. Close the valve.",
             "2019 was dry\nthe harvest was small\n2020 was wet\nbut the harvest was large\nand prices fell",
             "In 1990 the river flooded.\n1991 was calm.\n1992 was calm too.",
             "12 apples"]
    for text in texts:
        on, off = minhash.shingles(text, DedupSpec()), minhash.shingles(text, DedupSpec(fold_line_prefixes=False))
        assert np.array_equal(on, off), text
    assert strip_line_prefixes("1. a b\n2. c d\n3. e f") == " a b\n c d\n e f"     # all lines numbered: dropped


def test_batch_search_finds_every_text_whose_prefixes_go():
    rng = np.random.default_rng(5)
    pieces = ["12 ", "  7  ", "[", "2024-01-02 03:04:05 ", "word ", "\n", "\n\n", "\t3\t", "x", " "]
    texts = ["".join(rng.choice(pieces, size=int(rng.integers(0, 30)))) for _ in range(400)]
    data, ends = textbatch.joined(texts)
    found = set(prefixed_docs(data, ends))
    changed = {k for k, t in enumerate(texts) if strip_line_prefixes(t) is not t}
    assert changed and changed <= found


# Faker's hi_IN / ta_IN names and bn_BD / ar_AA / he_IL lorem words (text we did not write); pointing added by hand
HI = ("संमानित अरुणा सेनगुप्ता काली खत्री अकोला लखनऊ हिन्दी भाषा में लिखा गया यह वाक्य केवल परीक्षण के लिए है "
      "और इसमें कई शब्द हैं जिनमें मात्राएँ और हलंत आते हैं जैसे क्षेत्र प्रश्न द्वारा")
TA = "வர்ணவதி நம்பெருமாள் ஏகசந்திரா ஜம்சேத்பூர் சகாரன்பூர் தமிழ் மொழியில் எழுதப்பட்ட சொற்கள் இங்கே உள்ளன"
AR_PLAIN, AR_POINTED = "دارت وبولندا تزامنا العمليات لم شعار يطول تصب كثيرة ساعة", \
    "دَارَتْ وَبُولَنْدَا تَزَامُنًا الْعَمَلِيَّاتُ لَمَّ شِعَارٌ يَطُولُ تُصَبُّ كَثِيرَةٌ سَاعَةٌ"
HE_PLAIN, HE_POINTED = "שלום עולם זה טקסט בעברית עם מילים רבות מאוד", "שָׁלוֹם עוֹלָם זֶה טֶקְסְט בְּעִבְרִית עִם מִילִּים רַבּוֹת מְאוֹד"


def test_indic_vowel_signs_and_viramas_stay_inside_their_word():
    # before: each vowel sign / virama (Mn/Mc, no `\w`) split its word, `हिन्दी` read as `ह`, `न`, `द`
    for text in (HI, TA):
        assert len(minhash.shingles(text, DedupSpec())) == len(text.split()) - 4
        assert len(minhash.shingles(text, DedupSpec(marks_in_words=False))) > len(text.split())
    # the marks of Thai (shingled per character) still drop out as they did
    assert np.array_equal(minhash.shingles(TH, DedupSpec()), minhash.shingles(TH, DedupSpec(marks_in_words=False)))


def test_a_copy_with_or_without_pointing_is_the_same_text():
    stress, plain = "Молоко́ было́ свежим и холо́дным сегодня утром в деревне", \
        "Молоко было свежим и холодным сегодня утром в деревне"
    for a, b in ((AR_PLAIN, AR_POINTED), (HE_PLAIN, HE_POINTED), (plain, stress)):
        assert jaccard(a, b) == 1.0
        assert jaccard(a, b, DedupSpec(fold_pointing=False)) < 0.5
    # Indic vowel signs are letters, not pointing: a word without them is another word
    assert jaccard(HI, re.sub("[\u093e-\u094d]", "", HI)) < 0.2


def test_a_word_hyphenated_at_a_line_break_is_one_word():
    # joined where the text spells the word whole elsewhere (`city`, `Paris`: twice each in PLAIN)
    wrapped = PLAIN.replace("largest city", "largest ci-\nty").replace("Paris is known", "Pa-\n   ris is known")
    assert jaccard(PLAIN, wrapped) == 1.0
    assert jaccard(PLAIN, wrapped, DedupSpec(fold_hyphenation=False)) < 0.9
    # a compound a wrapper broke at its hyphen stays two words where the text writes it on one line elsewhere;
    # without evidence either way a break is joined (a word cut at the margin: most occur once)
    text = "keyword-\nonly arguments, and keyword-only defaults"
    assert join_hyphenated(text) is text
    assert join_hyphenated("keyword-\nonly arguments") == "keywordonly arguments"
    assert join_hyphenated("a note-\nbook, the notebook") == "a notebook, the notebook"
    assert join_hyphenated("a note-\nbook, the notebook, a note-book") == "a notebook, the notebook, a note-book"
    # a hyphen before a number, a list dash, a dash line, a dash before a capital (a speech broken off): left alone
    for text in ("range 1-\n2 of it", "items:\n-\nfirst", "----\n----", "a -\nb", "to whose falls-\nHeaven prosper"):
        assert join_hyphenated(text) is text
    data, ends = textbatch.joined(["x-\ny", "plain", "a - b", "z-\n"])
    assert hyphenated_docs(data, ends) == [0, 3]


def test_combining_marks_are_found_in_planes_0_1_14_only():
    import sys
    import unicodedata

    assert all(c >> 16 in (0, 1, 14) for c in range(sys.maxunicode + 1)
               if unicodedata.category(chr(c)) in ("Mn", "Mc"))
