"""Gopher + C4 quality rules, the threshold curve, language id and the filter protocol: each rule with a planted
positive and a look-alike negative, signals against brute-force counts, and the clean record's ledger shape."""

from __future__ import annotations

import itertools
import json
import random
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

from specs.clean import CleanSpec, LanguageSpec, QualitySpec
from tasks.data.cleanup import cleaning
from tasks.data.embedded import read_embedded
from tasks.data.filtering.filters import FunctionFilter, LanguageFilter, Verdict, first_drop, run_filters
from tasks.data.filtering.quality import curve_csv, measure, quality_score, threshold_curve
from tasks.data.records import Doc
from tests.helpers.quality import brute_ngrams

PROSE, CODE = QualitySpec().prose, QualitySpec().code

PARAGRAPHS = [
    "The harbour town grew slowly around a narrow bay, where fishing boats have returned every evening for "
    "several hundred years. Its first houses were built of timber and later of the grey stone that the quarry "
    "above the cliffs still supplies to builders across the region.",
    "Trade with the inland markets brought wool, grain and salt to the quay, and merchants from distant ports "
    "settled near the church. A school opened in the eighteenth century, followed by a small library that "
    "lent books to sailors between voyages.",
    "During the winter storms the breakwater protects the moorings, although older residents remember floods "
    "that reached the market square. Engineers raised the wall twice, and a modern pumping station now keeps "
    "the lower streets dry when the tide is high.",
    "Visitors today come for the walking paths, the seafood and a museum that tells the story of the lifeboat "
    "crews. Local volunteers maintain the exhibits, record interviews with retired fishermen and guide school "
    "groups through the restored net loft.",
]
ARTICLE = "\n\n".join(PARAGRAPHS)


def words_of(text: str) -> list[str]:
    return text.split()


def test_article_passes_every_rule():
    v = quality_score(ARTICLE, PROSE)
    assert v.keep and v.score == 1.0 and v.failed_rules == ()
    assert v.signals["words"] == len(ARTICLE.split()) and v.signals["stop_words"] >= 2


def test_length_boundary_is_exact():
    text = " ".join(ARTICLE.split()[:60])
    fifty, forty_nine = " ".join(text.split()[:50]) + ".", " ".join(text.split()[:49]) + "."
    assert quality_score(fifty, PROSE).signals["rule:length"] == 1.0
    assert quality_score(forty_nine, PROSE).signals["rule:length"] == 0.0 and not quality_score(forty_nine, PROSE).keep


def test_bulleted_list_page_dropped_article_with_some_bullets_kept():
    items = [f"• {w} and more" for w in "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()]
    listing = "\n".join(items * 2) + "\n" + "\n".join(f"- item number {w} here" for w in "abcdefgh")
    v = quality_score(listing, PROSE)
    assert v.signals["bullet_lines"] == 1.0 and v.signals["rule:bullet_lines"] == 0.0 and not v.keep
    some = ARTICLE + "\n\nThe museum offers:\n• guided tours on weekends.\n• a reading room.\n• talks in summer."
    k = quality_score(some, PROSE)
    assert 0 < k.signals["bullet_lines"] < 0.9 and k.signals["rule:bullet_lines"] == 1.0 and k.keep


def test_ellipsis_lines_and_ratio():
    trailing = "\n".join(p.rsplit(".", 1)[0] + "..." for p in PARAGRAPHS)  # every line trails off
    v = quality_score(trailing, PROSE)
    assert v.signals["ellipsis_lines"] == 1.0 and v.signals["rule:ellipsis_lines"] == 0.0 and not v.keep
    one = ARTICLE + "\n\nAnd then the bell rang..."
    k = quality_score(one, PROSE)
    assert k.signals["ellipsis_lines"] == pytest.approx(1 / 5) and k.signals["rule:ellipsis_lines"] == 1.0


def test_hash_ratio():
    tagged = " ".join(f"#{w}" for w in ARTICLE.split())
    v = quality_score(tagged, PROSE)
    assert v.signals["hash_ratio"] == 1.0 and v.signals["rule:hash_ratio"] == 0.0 and not v.keep
    ref = ARTICLE + "\n\nThe harbour was listed as site #42 in the survey, entry #7 in the register."
    assert quality_score(ref, PROSE).signals["rule:hash_ratio"] == 1.0 and quality_score(ref, PROSE).keep


def test_stop_words_minimum_is_gophers_count():
    no_stops = ("Harbour town grew slowly around narrow bay where fishing boats returned every evening. " * 2
                + "Timber houses later grey stone quarry cliffs supplies builders across region. " * 2
                + "Merchants distant ports settled near church school opened eighteenth century library lent "
                  "books sailors between voyages volunteers maintain exhibits record interviews.")
    v = quality_score(no_stops, PROSE)
    assert v.signals["stop_words"] == 0 and v.signals["rule:stop_words"] == 0.0 and not v.keep
    two = no_stops.replace("Harbour town", "The harbour town", 1).replace("Merchants", "Merchants with", 1)
    assert quality_score(two, PROSE).signals["stop_words"] == 2
    assert quality_score(two, PROSE).signals["rule:stop_words"] == 1.0


def test_alpha_words():
    table = " ".join(str(n * 37 % 1000) for n in range(150)) + " " + ARTICLE
    v = quality_score(table, PROSE)
    n_words = len(table.split())
    assert v.signals["alpha_words"] == pytest.approx((n_words - 150) / n_words) and not v.keep
    years = ARTICLE + "\n\nThe wall was raised in 1881 and 1953, the station built in 2004."
    assert quality_score(years, PROSE).signals["rule:alpha_words"] == 1.0


def test_mean_word_length():
    blobs = " ".join("".join(random.Random(i).choices("abcdefghij", k=25)) for i in range(60)) + "."
    v = quality_score(blobs, PROSE)
    assert v.signals["mean_word_length"] == pytest.approx(25 + 1 / 60) and v.signals["rule:mean_word_length"] == 0
    technical = ("Hydrodynamic modelling demonstrated considerable sedimentation alongside infrastructure. " * 1
                 + ARTICLE)
    assert 3 < quality_score(technical, PROSE).signals["mean_word_length"] < 10


def test_shakespeare_speaker_names_kept_repeated_lines_dropped():
    scenes = [d for d in itertools.islice(read_embedded("literature"), 120) if isinstance(d, Doc)]
    assert len(scenes) == 120
    all_lines_dup = []
    for d in scenes:
        v = quality_score(d.text, PROSE)
        assert v.keep, (d.key, v.failed_rules)
        lines = [line.strip() for line in d.text.splitlines() if line.strip()]
        all_lines_dup.append(sum(c - 1 for c in Counter(lines).values()) / len(lines))
    # counted over every line, speaker names alone would exceed Gopher's 30 % in some scenes
    assert max(all_lines_dup) > 0.3
    repeated = "\n".join(PARAGRAPHS + ["Buy fresh fish at the quay today."] * 8)
    v = quality_score(repeated, PROSE)
    assert v.signals["dup_lines"] == pytest.approx(7 / 12) and v.signals["rule:dup_lines"] < 0.1 and not v.keep


def test_duplicate_paragraphs():
    doubled = "\n\n".join(PARAGRAPHS + PARAGRAPHS[:2])
    v = quality_score(doubled, PROSE)
    assert v.signals["dup_paragraphs"] == pytest.approx(2 / 6)
    chars = sum(map(len, PARAGRAPHS[:2])) / (sum(map(len, PARAGRAPHS)) + sum(map(len, PARAGRAPHS[:2])))
    assert v.signals["dup_paragraph_chars"] == pytest.approx(chars) and not v.keep


@pytest.mark.parametrize("seed", range(12))
def test_ngram_signals_match_brute_force(seed):
    rng = random.Random(seed)
    vocab = [rng.choice(["a", "bb", "ccc", "dddd", "Ee", "fff", "gg"]) + str(k) for k in range(rng.randint(3, 12))]
    ws = [rng.choice(vocab) for _ in range(rng.randint(20, 300))]
    if seed % 3 == 0:      # plant a long repeated run
        ws = ws[:40] + ws[5:30] + ws[40:]
    text = " ".join(ws)
    got, want = measure(text), brute_ngrams(text)
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key
    assert quality_score(ARTICLE, PROSE).signals["dup_5gram"] == brute_ngrams(ARTICLE)["dup_5gram"] == 0.0


def test_lorem_ipsum_page_dropped_latin_lookalike_kept():
    lorem = ARTICLE + "\n\nLorem ipsum dolor sit amet, consectetur adipiscing elit."
    v = quality_score(lorem, PROSE)
    assert v.signals["lorem_ipsum"] == 1.0 and v.score == 0.0 and not v.keep
    latin = ARTICLE + "\n\nThe motto above the door reads dolor et labor, carved in 1820."
    assert quality_score(latin, PROSE).keep


def test_cookie_policy_and_javascript_lines_flagged():
    boiler = ["This site uses cookies to improve your experience.", "Please enable JavaScript to view the map.",
              "Read our cookie policy and terms of use."]
    page = "\n".join(PARAGRAPHS[:2] + boiler * 2)
    v = quality_score(page, PROSE)
    assert v.signals["boilerplate_lines"] == pytest.approx(6 / 8) and v.signals["rule:boilerplate_lines"] == 0
    assert not v.keep
    one = ARTICLE + "\n\nThe museum's privacy policy is printed on every ticket."
    k = quality_score(one, PROSE)
    assert k.signals["boilerplate_lines"] == pytest.approx(1 / 5) and k.keep    # flagged, within the limit


def test_curly_braces_and_terminal_punctuation():
    templated = "\n".join(f"{{{{infobox|field{k}={w}}}}}" for k, w in enumerate(ARTICLE.split()[:30])) + "\n" + ARTICLE
    v = quality_score(templated, PROSE)
    assert v.signals["curly_lines"] == pytest.approx(30 / 34) and v.signals["rule:curly_lines"] == 0.0
    names = "\n".join(f"{a} {b}" for a, b in zip("Ann Bob Cid Dan Eve Fay Gus Hal".split() * 8,
                                                  "Smith Jones Brown Green White Black Stone Wood".split() * 8))
    assert quality_score(names, PROSE).signals["c4_lines"] == 0.0 and not quality_score(names, PROSE).keep


def test_code_kept_under_code_profile():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for module in ("json/encoder.py", "textwrap.py", "bisect.py"):
        text = (stdlib / module).read_text(encoding="utf-8")
        assert quality_score(text, CODE).keep, module
        assert quality_score(text, CODE).signals["rule:curly_lines"] == 1.0   # the code profile turns it off
    braces = "\n".join(f"config = {{'key{k}': {k}, 'value': [{k}, {k + 1}]}}" for k in range(30))
    assert quality_score(braces, CODE).keep and not quality_score(braces, PROSE).keep


def test_threshold_curve_counts_match_a_direct_count():
    rng = random.Random(7)
    docs = [(rng.choice(["a", "b", "c"]), rng.choice([None, 0.0, round(rng.random(), 3), 1.0]), rng.randint(1, 99))
            for _ in range(400)]
    thresholds = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    rows = threshold_curve(docs, thresholds)
    assert len(rows) == len(thresholds) * 4
    for r in rows:
        mine = [(s, w) for src, s, w in docs if s is not None and r["source"] in ("all", src)]
        kept = [w for s, w in mine if s >= r["threshold"]]
        assert (r["docs"], r["words"]) == (len(kept), sum(kept))
        assert r["docs_share"] == round(len(kept) / len(mine), 6)
    assert threshold_curve([("a", None, 5)], thresholds) == []          # nothing measured: no curve
    csv = curve_csv(rows).splitlines()
    assert csv[0].split(",")[:3] == ["threshold", "docs", "words"] and len(csv) == 8
    total_05 = next(r for r in rows if r["threshold"] == 0.5 and r["source"] == "all")
    assert csv[3].split(",")[1:3] == [str(total_05["docs"]), str(total_05["words"])]


FRENCH = ("Le port s'est développé lentement autour d'une baie étroite, où les bateaux de pêche rentrent chaque "
          "soir depuis plusieurs siècles. Les premières maisons étaient construites en bois, puis en pierre grise "
          "que la carrière au-dessus des falaises fournit encore aux constructeurs de toute la région. Le commerce "
          "avec les marchés de l'intérieur apportait la laine, le grain et le sel sur le quai.")


def record(text: str, source: str = "wiki", lang: str = "en") -> dict:
    return {"id": f"{source}/x", "text": text, "source": source, "lang": lang, "origin": "test", "meta": "{}",
            "media": []}


def test_language_filter():
    f = LanguageFilter(LanguageSpec(), code_sources=frozenset({"code"}))
    fr = f(record(FRENCH))
    assert not fr.keep and fr.reason == "language" and fr.signals["lang:fr"] > 0.9
    assert f(record(ARTICLE)).keep and f(record(ARTICLE)).signals["lang:en"] > 0.9
    assert LanguageFilter(LanguageSpec(allowed={"wiki": ["en", "fr"]}))(record(FRENCH)).keep
    assert f(record(FRENCH, source="code", lang="python")).keep                  # code is exempt
    assert f(record(FRENCH, source="notes", lang="python")).signals == {}        # a tag it cannot check
    strict = LanguageFilter(LanguageSpec(min_confidence=0.999999))
    assert not strict(record("The sea.")).keep                                   # too little text to be sure
    with pytest.raises(ValueError, match="english"):
        LanguageFilter(LanguageSpec(allowed={"wiki": ["english"]}))
    with pytest.raises(ValueError, match="quality more than once"):
        CleanSpec(filters=["quality", "language", "quality"])


def test_filters_run_in_declared_order_and_stop_at_first_drop():
    calls: list[str] = []

    def make(name: str, keep: bool) -> FunctionFilter:
        def fn(doc):
            calls.append(name)
            return Verdict(keep, None if keep else f"{name} says no", {"n": float(len(calls))})
        return FunctionFilter(name, fn)

    results = run_filters([make("a", True), make("b", False), make("c", False)], "doc")
    assert calls == ["a", "b"] and [n for n, _ in results] == ["a", "b"]
    assert first_drop(results) == ("b", Verdict(False, "b says no", {"n": 2.0}))
    assert first_drop(run_filters([make("d", True)], "doc")) is None


def test_clean_record_ledgers_the_first_drop_by_declared_order(tmp_path):
    # Gopher's stop words are English, so a French page fails quality when quality runs first ...
    quality_first = CleanSpec()
    row = cleaning.clean_record(record(FRENCH * 2), quality_first, tmp_path)
    detail = json.loads(row["detail"])
    assert row["reason"] == "low_quality" and detail["filter"] == "quality"
    assert detail["signals"]["rule:stop_words"] < 1 and detail["signals"]["score"] == row["quality"]
    # ... and is ledgered as `language` when language runs first (then quality never measured it)
    language_first = CleanSpec(filters=["language", "quality", "toxicity"])
    row = cleaning.clean_record(record(FRENCH * 2), language_first, tmp_path)
    detail = json.loads(row["detail"])
    assert row["reason"] == "language" and detail["filter"] == "language" and row["quality"] is None
    assert detail["signals"]["lang:fr"] == detail["signals"]["confidence"] > 0.9
    kept = cleaning.clean_record(record(ARTICLE), quality_first, tmp_path)
    meta = json.loads(kept["meta"])
    assert kept["reason"] is None and kept["quality"] == 1.0 and meta["lang_detected"] == "en"
    assert 0.9 < meta["lang_confidence"] <= 1.0
