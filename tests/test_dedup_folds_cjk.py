"""Near dedup reads Traditional and Simplified Chinese alike (`tasks/data/dedup/hanfold.py`, under
`DedupSpec.fold_unicode`): a Chinese text converted between the two scripts by OpenCC's phrase converters (s2t,
s2tw, s2hk, t2s, tw2s) shared ~0.1 of its word 5-grams with its original and was kept; now it is removed, in
memory and by clean's real path, with word and char shingles. Hard negatives stay apart: other Chinese text on
the same topic, Japanese text on it, and notices from one template with other key content (a Traditional copy of
one is read as its Simplified text, no closer). `control_` tests held before too: the compiled path equals the
definition, and with the fold switched off the scripts stay apart."""

from __future__ import annotations

import re

import opencc
import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import CleanSpec, DedupSpec
from tests.helpers import dedup_variants as dv
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard

CLEAN = CleanSpec()
YANGTZE = ("长江是中国第一长河，发源于青藏高原的唐古拉山脉，流经十一个省级行政区，最后在上海注入东海。长江流域面积广阔，"
           "气候温和，雨量充沛，是中国重要的农业和工业地区。历史上，长江两岸出现了许多繁华的城市，例如重庆、武汉和南京。"
           "近年来，政府加强了对长江生态环境的保护，禁止在部分河段捕鱼，并开始修复沿岸的湿地。")
YELLOW_RIVER = ("黄河是中国第二长河，发源于青海省的巴颜喀拉山脉，流经九个省级行政区，最后在山东注入渤海。黄河中游流经黄土"
                "高原，河水携带大量泥沙，因此颜色浑黄。历史上，黄河多次改道，给两岸人民带来了严重的洪水灾害。近年来，"
                "政府在黄河流域修建了水库和堤坝，并开始治理水土流失。")
LIBRARY_TW = ("臺北市政府昨天宣佈，將在明年擴建市立圖書館，增設兒童閱覽室和自習空間。據負責官員表示，工程預計於秋季開始，"
              "為期約十八個月，施工期間讀者仍可使用部分設施。市民可以在市政府網站上查閱設計圖，並在下個月底前提出意見。"
              "許多家長對這項計畫表示歡迎，認為孩子們將有更多讀書的地方。")
YANGTZE_JA = ("長江は中国で最も長い川で、青海チベット高原の唐古拉山脈に源を発し、十一の省級行政区を流れて、上海で東シナ海"
              "に注ぐ。流域は広く、気候は温暖で雨が多く、中国の重要な農業と工業の地域である。歴史上、長江の両岸には重慶、"
              "武漢、南京など多くの繁華な都市が生まれた。近年、政府は長江の生態環境の保護を強化している。")
# words whose Traditional spelling is a Simplified character too (`hanfold.PHRASE_FORMS`)
RESPELLED = ("我们需要了解用户的反馈，并及时回复每一封邮件。请不要找借口，先确定坐标系，再想象一下家具的摆放位置，"
             "仿佛经济正在复苏。会议结束以后，请把答复发给项目负责人，并了解他们的意见。")
NOTICE = ("关于{company}{event}的公告\n尊敬的各位客户：本公司定于{date}在{place}举行{event}，联系人{name}。\n"
          "本公司董事会及全体董事保证本公告内容不存在任何虚假记载、误导性陈述或者重大遗漏，并对其内容的真实性、"
          "准确性和完整性承担个别及连带责任。特此公告。")


def convert(text: str, config: str) -> str:
    return opencc.OpenCC(config).convert(text)


COPIES = {
    "Simplified → Traditional (s2t)": (YANGTZE, convert(YANGTZE, "s2t")),
    "Simplified → Taiwan (s2tw)": (YANGTZE, convert(YANGTZE, "s2tw")),
    "Simplified → Hong Kong (s2hk)": (RESPELLED, convert(RESPELLED, "s2hk")),
    "Traditional → Simplified (t2s)": (LIBRARY_TW, convert(LIBRARY_TW, "t2s")),
    "Taiwan → Simplified (tw2s)": (LIBRARY_TW, convert(LIBRARY_TW, "tw2s")),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_converted_copy_is_a_near_duplicate(name):
    original, copy = COPIES[name]
    assert jaccard(original, copy) == 1.0          # the fold reads the scripts alike, character for character
    assert_near_copy(original, copy)


def test_converted_copies_are_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_char_shingles_read_both_scripts_alike():
    assert jaccard(YANGTZE, convert(YANGTZE, "s2t"), DedupSpec(shingle="char")) == 1.0


def test_words_the_phrase_converter_respells_read_as_their_simplified_words():
    # `了解` → `瞭解`, `回复` → `回覆`, `借口` → `藉口`, `坐标` → `座標`, `想象` → `想像` (OpenCC's phrases)
    assert jaccard(RESPELLED, convert(RESPELLED, "s2t")) == 1.0


def test_the_fold_is_a_function_of_each_character():
    from tasks.data.dedup.hanfold import simplified_table, simplify_han
    table = simplified_table()
    keys = "".join(chr(c) for c in range(len(table)) if table[c] != c)
    assert len(keys) > 5000 and simplify_han("漢語 發展 瞭解 回覆") == "汉语 发展 了解 回复"
    assert simplify_han(simplify_han(keys)) == simplify_han(keys)            # its own output stays as it is
    assert all(len(simplify_han(c)) == 1 for c in keys)
    plain = "Ünïcode ｆｕｌｌ かな ひらがな 한국어 ไทย 😀 𠀀"
    assert simplify_han(plain) is plain


_SCRIPT = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf"
                     "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]")
_CHARS = st.sampled_from("ab 1,.\n漢汉語语發发乾干瞭了覆复著着裡里ひカｶไ한é\u0301😀𠀀𪚥\U00031350\ud800\uf900")


@settings(max_examples=300, deadline=None)
@given(st.text(_CHARS, max_size=40))
def test_split_unspaced_spaces_out_each_unit_as_the_regex_did(text):
    from tasks.data.dedup.hanfold import simplify_han
    from tasks.data.dedup.segment import split_unspaced
    assert split_unspaced(text, simplify=False) == _SCRIPT.sub(r" \g<0> ", text)
    assert split_unspaced(text) == _SCRIPT.sub(r" \g<0> ", simplify_han(text))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(_CHARS, max_size=60).map(lambda t: t + " " + convert(YANGTZE[:40], "s2t")), max_size=4))
def test_control_compiled_path_is_the_definition_for_traditional_text(raw):
    assert_compiled_path_is_the_definition(raw + [f"<div><p>{LIBRARY_TW}</p><p>a</p><p>b</p></div>"])


def test_hard_negative_other_chinese_text_on_the_same_topic_stays_apart():
    other = convert(YELLOW_RIVER, "s2t")
    assert jaccard(YANGTZE, other) < 0.05
    assert dv.groups({"a": YANGTZE, "b": other}, CLEAN) == {"a": "a", "b": "b"}


def test_hard_negative_japanese_text_on_the_same_topic_stays_apart():
    for text in (YANGTZE, convert(YANGTZE, "s2t")):
        assert jaccard(text, YANGTZE_JA) < 0.05
        assert dv.groups({"a": text, "b": YANGTZE_JA}, CLEAN) == {"a": "a", "b": "b"}


def test_hard_negative_notices_of_one_template_with_other_key_content_stay_apart():
    a = NOTICE.format(company="华东电气股份有限公司", event="年度股东大会", date="2024年5月20日",
                      place="上海市浦东新区世纪大道100号", name="王建国")
    b = NOTICE.format(company="南方食品集团", event="产品召回说明会", date="2023年11月3日",
                      place="广州市天河区体育西路8号", name="李丽华")
    assert 0.3 < jaccard(a, b) < 0.8
    assert jaccard(a, convert(b, "s2t")) == jaccard(a, b)      # the same as their Simplified texts, no more
    assert dv.groups({"a": a, "b": convert(b, "s2t")}, CLEAN) == {"a": "a", "b": "b"}


def test_control_without_fold_unicode_the_scripts_stay_apart():
    assert jaccard(YANGTZE, convert(YANGTZE, "s2t"), DedupSpec(fold_unicode=False)) < 0.3


def test_control_digit_group_separators_are_read_alike_already():
    # word shingles split a number at its separators: `1,234,567`, `1 234 567`, `1.234.567`, with NBSP, thin or
    # narrow no-break space (NFKC reads them as spaces) are the same words `1 234 567`; only an ungrouped
    # `1234567` is one other word (left: routing every text with a grouped number through the Python folds)
    text = ("去年全市财政支出{a}元，其中教育经费{b}元，道路建设{c}元，比十年前增加了{d}元。The city spent {a} on roads, "
            "{b} on schools and {c} on parks, {d} more than a decade earlier.")
    nums = {k: f"{n:,}" for k, n in zip("abcd", (1234567, 45000000, 987654, 3100000000))}
    for sep in (" ", ".", "\u00a0", "\u2009", "\u202f"):
        copy = text.format(**{k: v.replace(",", sep) for k, v in nums.items()})
        assert jaccard(text.format(**nums), copy) == 1.0
