"""Near dedup's shingle folds for Latin diacritics, forum/wiki/markdown markup and look-alike apostrophes, and the
line-prefix rule that keeps timetables apart (a probe of new edit kinds found each copy missed, and timetables
merged). Each copy below was J < 0.8 with its original before its fold and kept by clean; now J ≥ 0.8 and it is
removed, through clean's phase 1 and dedup (in memory) and its real path (`process_shard`, then
`dedup_global`). Different texts in one language or template stay apart, code keeps its `snake_case`, other
scripts keep their marks, and the compiled word path (texts no Python fold reads) equals the folds' definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import CleanSpec, DedupSpec
from tasks.data.cleanup.normalize import shingle_text
from tasks.data.cleanup.textmarks import fold_emphasis, fold_source_marks
from tasks.data.dedup import hashloops, wordhash
from tasks.data.dedup.lineprefix import strip_line_prefixes
from tasks.data.dedup.marks import fold_digraphs, fold_latin, latin_bytes
from tasks.data.dedup.wordfolds import word_breaks
from tests.helpers import dedup_variants as dv
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import EN, assert_copies_removed, assert_near_copy, jaccard, real_keepers

CLEAN = CleanSpec()
DE = ("Die Stadtverwaltung hat am Dienstag höhere Gebühren für die Müllabfuhr beschlossen. Die Kosten für das "
      "Projekt belaufen sich auf rund zwölf Millionen Euro. Anwohnerinnen und Anwohner können ihre Einwände bis "
      "Ende März schriftlich einreichen. Für Fußgänger wird während der Bauarbeiten eine Umleitung über die "
      "Südstraße eingerichtet. Viele Geschäftsleute befürchten Umsatzeinbußen, Ärzte begrüßten die Pläne.")
DE_OTHER = ("Der Gemeinderat hat am Montag neue Öffnungszeiten für das Hallenbad beschlossen. Künftig öffnet es "
            "schon um sechs Uhr, und Schülerinnen und Schüler zahlen während der Ferien keinen Eintritt. Die Kosten "
            "für das zusätzliche Personal übernimmt größtenteils der Landkreis. Für Familien wird außerdem ein "
            "günstigerer Jahrespass eingeführt, über den die Bürger bis Ende März abstimmen können.")
FR = ("Selon la mairie, le conseil municipal a approuvé la rénovation de la médiathèque. Le coût total du projet est "
      "estimé à douze millions d'euros. Les habitants peuvent déposer leurs remarques en mairie jusqu'à la fin du "
      "mois. Une déviation sera mise en place pendant toute la durée du chantier, a précisé l'élu chargé des "
      "travaux, qui espère une réouverture avant l'été prochain.")
FR_OTHER = ("Selon la préfecture, le conseil régional a approuvé la création d'une piste cyclable le long du canal. "
            "Le coût total du projet est estimé à trois millions d'euros. Les riverains peuvent déposer leurs "
            "remarques en ligne jusqu'à la fin du mois prochain. Une passerelle sera construite près de l'écluse, a "
            "précisé l'élue chargée des transports, qui espère une inauguration à l'automne.")
ES = ("El ayuntamiento aprobó el martes la ampliación de la biblioteca municipal, que incluirá una sala de lectura "
      "para niños y un jardín interior. Según la alcaldesa, las obras comenzarán en otoño y durarán unos dieciocho "
      "meses. Los vecinos podrán consultar el proyecto en la página web del ayuntamiento hasta el próximo lunes.")
VI = ("Thành phố đã khánh thành cây cầu mới bắc qua sông vào sáng thứ Hai. Theo chính quyền, cây cầu giúp giảm ùn "
      "tắc giao thông ở khu trung tâm và rút ngắn thời gian đi lại của người dân.")
VI_OTHER = ("Nhà trường đã tổ chức lễ khai giảng năm học mới vào sáng thứ Hai. Theo hiệu trưởng, năm nay trường có "
            "thêm ba phòng học mới và một thư viện dành cho học sinh ở khu ngoại thành.")
LAKE = ("The lake lies in a deep basin carved by a glacier and is fed by two small rivers from the north. Along "
        "its eastern shore a narrow road runs past old fishing villages, and in summer boats carry visitors to the "
        "island in the middle, where a ruined chapel stands among the pines. Fishermen along its banks catch trout.")
TRANSLITERATED = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue", "ß": "ss"})
STRIPPED = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "Ä": "A", "Ö": "O", "Ü": "U", "ß": "ss"})
ACCENTS = str.maketrans("éèêàâçôûîïùáíóúñü", "eeeaacouiiuaiouNu".replace("N", "n"))


def _marked(text: str, every: int, mark: str) -> str:
    """Every `every`-th word of `text` (its letters) wrapped in `mark` (`{}` for the word)."""
    words = text.split(" ")
    return " ".join(mark.format(w) if k % every == 3 and w.isalpha() else w for k, w in enumerate(words))


WIKI = _marked(EN, 6, "[[{0} (topic)|{0}]]").replace("streams.", "streams.<ref>{{cite web|url=https://x.org/s|"
                                                       "title=Streams {{lang|fr|ruisseaux}}}}</ref>")
# (original, copy): each J < 0.8 before its fold
COPIES = {
    "German umlauts transliterated": (DE, DE.translate(TRANSLITERATED)),
    "German umlauts stripped": (DE, DE.translate(STRIPPED)),
    "French accents stripped": (FR, FR.translate(ACCENTS)),
    "Spanish accents stripped": (ES, ES.translate(ACCENTS)),
    "_italic_ and __bold__": (EN, _marked(_marked(EN, 5, "_{}_"), 7, "__{}__")),
    "BBCode": (EN, "[quote]" + _marked(_marked(EN, 5, "[b]{}[/b]"), 7, "[url=https://f.example/t/9]{}[/url]")
               + "[/quote]"),
    "MediaWiki source": (EN, "'''" + WIKI.replace("The river", "The river'''", 1)),
    "footnote superscripts": (EN, _marked(EN, 5, "{}\u00b9\u00b2")),
    "HTML <sup> footnotes": (EN, "<p>" + _marked(EN, 5, "{}<sup>3</sup>").replace(". ", ".</p><p>") + "</p>"),
    "modifier-letter apostrophe": ("It's the river's course, and it won't change: " + EN[:160],
                                   "It\u02bcs the river\u02bcs course, and it won\u02bct change: " + EN[:160]),
    "acute accent as apostrophe": ("It's the river's course, and it won't change: " + EN[:160],
                                   "It\u00b4s the river\u00b4s course, and it won\u00b4t change: " + EN[:160]),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_with_the_edit_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_without_their_folds_the_copies_were_missed():
    for name, off in [("German umlauts transliterated", "fold_unicode"), ("French accents stripped", "fold_unicode"),
                      ("_italic_ and __bold__", "fold_markup"), ("BBCode", "fold_markup"),
                      ("MediaWiki source", "fold_markup"), ("modifier-letter apostrophe", "fold_unicode")]:
        assert jaccard(*COPIES[name], DedupSpec(**{off: False})) < 0.8, name


def timetable(start: int, step: int, style: str) -> str:
    stops = ["Central Station", "Market Square", "Town Hall", "Hospital", "University", "Riverside", "Airport"]
    times = [start + k * step for k in range(len(stops))]
    stamp = {"hhmm": "{:02d}{:02d}", "hh:mm:ss": "{:02d}:{:02d}:00"}[style]
    return "\n".join(f"{stamp.format(t // 60, t % 60)} {stop} (platform {k % 3 + 1})"
                     for k, (t, stop) in enumerate(zip(times, stops)))


@pytest.mark.parametrize("style", ["hhmm", "hh:mm:ss"])
def test_timetables_of_other_trips_stay_apart(style, tmp_path):
    # their times were read as line prefixes and dropped: every timetable of one line's stops was J 1.0 to every other
    tables = [timetable(start, step, style) for start, step in ((6 * 60 + 12, 3), (9 * 60 + 41, 4), (17 * 60 + 5, 2))]
    assert all(strip_line_prefixes(t) is t for t in tables)
    assert jaccard(tables[0], tables[1]) < 0.5
    assert real_keepers(tables, tmp_path) == {}


def test_listings_and_logs_still_lose_their_prefixes():
    code = "def area(w, h):\n    return w * h\n\n\nprint(area(3, 4))\nprint(area(5, 6))"
    for first in (1, 118):
        listing = "\n".join(f"{n:>4}  {line}".rstrip() for n, line in enumerate(code.split("\n"), first))
        assert jaccard(code, listing) == 1.0
    log = "\n".join(f"{stamp} INFO worker {k} finished job {k * 7}" for k, stamp in
                    enumerate(["06:12:01", "06:12:07", "06:13:44", "06:15:00"]))
    assert strip_line_prefixes(log) == "\n".join(f" INFO worker {k} finished job {k * 7}" for k in range(4))
    assert strip_line_prefixes("[06:12:00] a\n[06:15:00] b\n[06:19:00] c") == " a\n b\n c"
    assert strip_line_prefixes("2024-05-01 06:12 a\n2024-05-01 06:15 b\n2024-05-01 06:19 c") == " a\n b\n c"
    for numbers in ("0612 a\n0615 b\n0619 c", "12 a\n7 b\n3 c", "06:12:00 a\n06:15:00 b\n06:19:00 c"):
        assert strip_line_prefixes(numbers) is numbers


DISTINCT = [      # same language, vocabulary or template; each pair read with the new folds
    (DE, DE_OTHER), (DE.translate(TRANSLITERATED), DE_OTHER), (FR, FR_OTHER), (FR.translate(ACCENTS), FR_OTHER),
    (VI, VI_OTHER), (VI, VI.replace("cây cầu", "con đường").replace("sông", "núi").replace("giao thông", "ô nhiễm")),
    ("def load_user_profile(user_id):\n    return fetch_profile(user_id, cache_ttl=60)\n" * 3,
     "def loaduserprofile(userid):\n    return fetchprofile(userid, cachettl=60)\n" * 3),
    (_marked(EN, 5, "[b]{}[/b]"), _marked(LAKE, 5, "[i]{}[/i]")),
]


@pytest.mark.parametrize("a,b", DISTINCT)
def test_distinct_texts_stay_apart(a, b):
    assert jaccard(a, b) < 0.5
    assert dv.groups({"a": a, "b": b}, CLEAN) == {"a": "a", "b": "b"}


def test_marks_of_other_scripts_and_code_are_left_alone():
    assert fold_latin("हिन्दी й ё ά עִבְרִית كَتَبَ") == "हिन्दी й ё ά עִבְרִית كَتَبَ"     # no Latin base letter
    assert fold_latin("Gebühren Straße cœur e\u0301te\u0301 İ".casefold()) == "gebuhren strasse coeur ete i"
    assert fold_digraphs("Gebuehren queue ValueError") == "Gebuhren quu ValuError"
    assert fold_emphasis("my_var __init__(x) _a b_ a_(b) ___c___ _d") == "my_var init(x) a b a_(b) ___c___ _d"
    for code in ("x = a[i] + m[b]\ny = s[u]", "a[[0, 1]] and [[ -f x ]]", "{{ user.name }} {{ x }}"):
        assert fold_source_marks(code) is code
    assert fold_source_marks("[b]x[/b] [*]y [[T (a)|t]] {{c|{{d}}}} ''i''") == "x [*]y t  i"
    assert shingle_text("10 m\u00b2, x\u00b2 and 5\u00b2") == "10 m, x and 52"     # after a letter only


def test_compiled_folds_equal_the_text_folds():
    # the word loop's digraphs and the byte pass's Latin letters read as the text folds do
    texts = ["ValueError queue Gebuehren aee uEe OE", "café æther Straße naïve ñ ǘ", "plain words", ""]
    want, want_counts = wordhash.word_hashes([fold_digraphs(fold_latin(t)) for t in texts])
    data, ends = wordhash_batch(texts)
    hashloops.blank_non_words(data, ends, np.arange(len(texts)), word_breaks(True, True), latin_bytes())
    got, counts = hashloops.word_hashes(data, ends, wordhash.POW, np.full(len(texts), 2**64 - 1, np.uint64))
    assert np.array_equal(got, want) and np.array_equal(counts, want_counts)


def wordhash_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = [t.encode() for t in texts]
    data = np.frombuffer(b"".join(r + b"\n" for r in raw) + bytes(8), np.uint8).copy()
    return data, np.cumsum([len(r) + 1 for r in raw]) - 1


PIECES = ["the", "Word", "queue", "Aero", "oE", "e", " ", "\n", "\t", ".", "(", "_", "__", "___", "_x_", "a_b",
          "é", "ä", "Ü", "ß", "æ", "ǘ", "e\u0301", "\u0301", "ʼ", "ʻ", "´", "′", "`", "¹", "²", "[b]", "[/b]", "[*]",
          "[[", "]]", "|", "{{", "}}", "''", "<ref>", "</ref>", "ё", "ое", "ा", "हि", "日本", "«", "&amp;", "\u200d",
          "<p>x</p><p>y</p><div>z</div>", "<sup>1</sup>", "1. ", "0612 ", "06:12:00 "]
texts = st.lists(st.sampled_from(PIECES), max_size=16).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_folds_definition(raw):
    """The compiled path (most texts not folded in Python: their Latin letters, `ʼ`, emphasis and digraphs read in
    bytes) equals the chain of folds, on text made of the pieces these folds read."""
    assert_compiled_path_is_the_definition(raw)
