"""Near dedup of the copies a fourth blind probe left over (`DedupSpec.fold_formats`, `fold_markup`): a mail body in
quoted-printable with lower-case hex (`=c3=a9`), Sphinx roles and AsciiDoc cross references, rolling auto-captions
(each cue repeats the last cue's line), and mojibake (UTF-8 read as cp1252: `FranÃ§ais`). Each copy below was
J < 0.8 with its original before its rule and is found now, by clean's in-memory and real paths; distinct texts in
the same form stay apart, text that only looks like a form reads as before, and the compiled path (a byte scan
picks the texts `textforms.read_formats` reads) equals the definition on text made of these pieces."""

from __future__ import annotations

import quopri
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import DedupSpec
from tasks.data.dedup.linkforms import read_links
from tasks.data.dedup.mojibake import read_mojibake
from tasks.data.dedup.textforms import format_flags, read_formats, read_quoted_printable, read_subtitles
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard
from tests.test_dedup_markup import LINKED, MAIL, PAGE, PIECES, TALK

# invented prose: a library's API docs (as Sphinx renders them), the same news item in French and German
API = ("Call open session before sending any request; it reads the settings from the configuration guide and "
       "returns a Session object. Each request is retried by retry policy when the server answers with a timeout, "
       "and the retries stop after the limit given in connection settings. To close every open connection at "
       "once, call close all from the pool module, or use the session as a context manager. Errors are raised as "
       "ClientError subclasses; see error handling for the list, and logging setup for how to record each retry.")
ROLES = {"open session": ":py:func:`open session <client.sessions.open_session>`",
         "configuration guide": ":doc:`configuration guide <guides/configuration>`",
         "Session": ":py:class:`~client.sessions.Session`", "retry policy": ":ref:`retry policy <retry-policy>`",
         "connection settings": ":ref:`connection settings <settings-connection>`",
         "close all": ":py:func:`close all <client.pool.close_all>`", "ClientError": ":py:exc:`!ClientError`",
         "error handling": ":doc:`error handling <guides/errors>`", "logging setup": ":ref:`logging setup <log>`"}
FR = ("Le conseil municipal a décidé mardi soir de rénover la bibliothèque du quartier, fermée depuis l'été dernier "
      "à cause d'une fuite dans la toiture. Les travaux commenceront au printemps et dureront environ huit mois. "
      "Pendant ce temps, les lecteurs pourront emprunter des livres à la mairie, où une salle sera aménagée avec "
      "quelques étagères et un coin pour les enfants. Le maire a précisé que le budget prévu ne dépassera pas deux "
      "cent mille euros, dont une partie sera financée par la région. Plusieurs habitants ont regretté que le "
      "projet n'inclue pas de café, mais la municipalité promet d'étudier cette idée l'année prochaine.")
DE = ("Der Gemeinderat hat am Dienstagabend beschlossen, die Bücherei im Viertel zu renovieren, die seit dem "
      "letzten Sommer wegen eines undichten Dachs geschlossen ist. Die Arbeiten beginnen im Frühling und dauern "
      "ungefähr acht Monate. Während dieser Zeit können die Leser Bücher im Rathaus ausleihen, wo ein Raum mit "
      "einigen Regalen und einer Ecke für Kinder eingerichtet wird. Der Bürgermeister erklärte, dass das Budget "
      "zweihunderttausend Euro nicht übersteigen wird, wovon ein Teil von der Region getragen wird. Mehrere "
      "Einwohner bedauerten, dass kein Café geplant ist, aber die Gemeinde verspricht, über diese Idee im nächsten "
      "Jahr zu sprechen. Größere Änderungen sind vorerst nicht vorgesehen.")


def lower_qp(text: str, charset: str = "utf-8") -> str:
    """`text` in quoted-printable with its hex in lower case, as some mailers write it (soft breaks included)."""
    return re.sub(r"=[0-9A-F]{2}", lambda m: m.group().lower(), quopri.encodestring(text.encode(charset)).decode())


def with_roles(text: str) -> str:
    for words, role in ROLES.items():
        text = text.replace(words, role, 1)
    return text


def _slug(words: str) -> str:
    return "_" + words.replace(" ", "_")


def stamp(seconds: float) -> str:
    h, rest = divmod(round(seconds * 1000), 3_600_000)
    m, rest = divmod(rest, 60_000)
    return f"{h:02d}:{m:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


def phrases(text: str, words: int = 7) -> list[str]:
    split = text.split()
    return [" ".join(split[k:k + words]) for k in range(0, len(split), words)]


def youtube_vtt(text: str) -> str:
    """Rolling auto-captions as YouTube writes them: each cue shows the last cue's line above its new words (each
    word timed, `<00:00:01.300><c> word</c>`), and a 10 ms cue between shows the new line once more."""
    cues, last, t = [], " ", 0.0
    for line in phrases(text):
        first, *rest = line.split()
        timed = first + "".join(f"<{stamp(t + 0.3 * (k + 1))}><c> {w}</c>" for k, w in enumerate(rest))
        cues.append(f"{stamp(t)} --> {stamp(t + 2)} align:start position:0%\n{last}\n{timed}")
        cues.append(f"{stamp(t + 2)} --> {stamp(t + 2.01)} align:start position:0%\n{line}\n ")
        last, t = line, t + 2.01
    return "WEBVTT\nKind: captions\nLanguage: en\n\n" + "\n\n".join(cues) + "\n"


def roll_up_srt(text: str) -> str:
    """Roll-up captions in SRT: each cue repeats the last one's words and adds two more, a new line every 7."""
    cues = [" ".join(p.split()[:k]) for p in phrases(text) for k in range(2, len(p.split()) + 2, 2)]
    return "\n\n".join(f"{n}\n{stamp(n).replace('.', ',')} --> {stamp(n + 0.9).replace('.', ',')}\n{cue}"
                       for n, cue in enumerate(cues, 1)) + "\n"


def mojibake(text: str) -> str:
    """UTF-8 read as windows-1252 as browsers read it (its five unassigned bytes as the C1 controls)."""
    return "".join(bytes([b]).decode("cp1252", "ignore") or chr(b) for b in text.encode())


COPIES = {
    "QP lower-case hex": (MAIL, lower_qp(MAIL)),
    "QP lower-case hex, CRLF soft breaks": (MAIL, lower_qp(MAIL).replace("\n", "\r\n")),
    "QP lower-case hex, Latin-1": (MAIL, lower_qp(MAIL, "cp1252")),
    "Sphinx roles": (API, with_roles(API)),
    "AsciiDoc xref:": (PAGE, re.sub("|".join(LINKED), lambda m: f"xref:{_slug(m.group())}.adoc[{m.group()}]", PAGE)),
    "AsciiDoc <<id,text>>": (PAGE, re.sub("|".join(LINKED), lambda m: f"<<{_slug(m.group())},{m.group()}>>", PAGE)),
    "YouTube rolling WebVTT": (TALK, youtube_vtt(TALK)),
    "roll-up SRT": (TALK, roll_up_srt(TALK)),
    "French mojibake": (FR, mojibake(FR)),
    "German mojibake": (DE, mojibake(DE)),
    "English mojibake (`donâ€™t`)": (MAIL, mojibake(MAIL)),
    "French mojibake read as cp1252 twice": (FR, mojibake(mojibake(FR))),
}
FORMATS = ("QP", "YouTube", "roll-up", "mojibake")


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


@pytest.mark.parametrize("name", list(COPIES))
def test_without_their_rules_the_copies_were_missed(name):
    off = DedupSpec(fold_formats=False) if any(f in name for f in FORMATS) else DedupSpec(fold_markup=False)
    assert jaccard(*COPIES[name], off) < 0.8


def test_quoted_printable_in_lower_case():
    assert read_quoted_printable("a=3db caf=c3=a9 it=e2=80=99s informa=\ntion=") == "a=b café it’s information"
    assert read_quoted_printable("caf=C3=a9 na=c3=afve") == "café naïve"                  # mixed case
    long = "the long line of a body, broken after its 76th character by the encoder, ends in li=\r\nne"
    assert read_quoted_printable("na=efve=20caf=e9 " + long) == "naïve café " + long.replace("=\r\n", "")
    for code in ("=3d lower case", "x=3d", "color=ff and y=ab", "hash=c3a9", "x=e2=8", "a=c3=a9 and b = c"):
        assert read_quoted_printable(code) is code                          # no sign, or an `=` no encoder writes


def test_roles_and_cross_references_read_as_their_text():
    assert read_links(":ref:`the guide <guide-top>`, :py:func:`os.path.join`, :func:`~os.path.join`, "
                      ":py:exc:`!KeyError` and :doc:`setup/intro`") == "the guide, os.path.join, join, KeyError " \
                                                                        "and setup/intro"
    assert read_links("see xref:install.adoc#linux[Installing on Linux] and <<config, the settings>>") == \
        "see Installing on Linux and the settings"
    for text in ("a << b, c >> d", "x<<y,z>>w", "1 >> 2", "see <<config>> and xref:a.adoc[]", "time: `now`",
                 "dict[key]: `value`", "note:`x`", "a:b:`c`_ d"):
        assert read_links(text) is text


def test_rolling_captions_read_each_line_once():
    assert read_subtitles(youtube_vtt("one two three four five six seven eight nine ten")).split() == \
        "one two three four five six seven eight nine ten".split()
    assert read_subtitles(roll_up_srt("one two three four five six seven eight nine ten")).split() == \
        "one two three four five six seven eight nine ten".split()
    chorus = ("1\n00:00:01,000 --> 00:00:02,000\nNo!\n\n2\n00:00:02,000 --> 00:00:03,000\nNo!\n\n"
              "3\n00:00:03,000 --> 00:00:04,000\nWe will not go\n\n4\n00:00:04,000 --> 00:00:05,000\nback there\n\n"
              "5\n00:00:05,000 --> 00:00:06,000\nnot ever again\n\n6\n00:00:06,000 --> 00:00:07,000\nthey said\n")
    assert read_subtitles(chorus).split() == "No! No! We will not go back there not ever again they said".split()


def test_mojibake_reads_back_as_utf8():
    assert read_mojibake("FranÃ§ais Ã¼ber Ð¿Ñ€Ð¸Ð²ÐµÑ‚ donâ€™t È™i æ—¥æœ¬ ðŸ˜€ Â£5") == \
        "Français über привет don’t și 日本 😀 £5"
    assert read_mojibake("FranÃƒÂ§ais") == "Français"                                       # read as cp1252 twice
    for text in ("SÃO Paulo", "Gruß“ und Fuß«", "CAFÉ’S", "«PERCHÈ»", "ÖL–", "Ã\ufffd", "plain", "2\xa0×\xa010−7",
                 "È\xa0vero", "Ðx", "Ã"):
        assert read_mojibake(text) is text


def test_distinct_texts_in_these_forms_stay_apart():
    talk = re.sub(r"libraries", "swimming pools", TALK).replace("books", "lanes").replace("reading room", "sauna")
    talk = talk.replace("four hundred readers", "two hundred swimmers").replace("café corner", "kiosk")
    assert jaccard(youtube_vtt(TALK), youtube_vtt(talk)) < 0.8 and jaccard(roll_up_srt(TALK), roll_up_srt(talk)) < 0.8
    news = FR.replace("bibliothèque", "piscine").replace("livres", "maillots").replace("huit mois", "un an")
    news = news.replace("deux cent mille", "trois cent mille").replace("café", "sauna").replace("enfants", "bébés")
    assert jaccard(FR, news) < 0.8 and jaccard(mojibake(FR), mojibake(news)) < 0.8
    assert jaccard(mojibake(FR), mojibake(DE)) < 0.1
    api = API.replace("retried", "logged").replace("timeout", "error").replace("pool module", "client module")
    api = api.replace("context manager", "decorator").replace("Errors are raised", "Warnings are shown")
    assert jaccard(API, api) < 0.8 and jaccard(with_roles(API), with_roles(api)) < 0.8
    assert jaccard(lower_qp(MAIL), lower_qp(MAIL.replace("budget", "garden").replace("invoice", "bill")
                                           .replace("contractor", "gardener").replace("members", "owners"))) < 0.8


def flags(texts: list[str]) -> np.ndarray:
    raw = [t.encode() for t in texts]
    data = np.frombuffer(b"\n".join(raw) + b"\n", np.uint8)
    return format_flags(data, np.cumsum([len(r) + 1 for r in raw]) - 1)


def test_the_scan_picks_the_copies_and_passes_plain_text():
    assert (flags([copy for _, copy in COPIES.values()]) != 0).all()
    assert (flags([MAIL, TALK, PAGE, API, "x=3d and y=ff", "SÃO Paulo", "a, b = 1, 2 if x else 3"]) == 0).all()


NEW_PIECES = ["=c3=a9", "=e2=80=99", "=3d", "=C3=a9", "=e9", "=ff", ":ref:`the guide <top>`", ":py:func:`~a.b.c`",
              ":doc:`x`", ":`", ":py:", "`", "<", ">", "<<", ">>", "<<a,b c>>", "xref:a.adoc[A]", "xref:", "Ã©", "Ã¼",
              "Ã§", "â€™", "Ã\xa0", "×\xa0", "\xa0", "Ð¿", "Ñ€", "Ã", "Â", "É’", "ÃƒÂ§", "Ã\u0081", "ß“",
              "\n00:00:01.000 --> 00:00:02.000\n", "one two\n", "one two three\n", "one two\n"]
texts = st.lists(st.sampled_from(PIECES + NEW_PIECES), max_size=18).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_formats_definition(raw):
    assert_compiled_path_is_the_definition(raw)


@settings(max_examples=500, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_the_scan_finds_every_text_the_rules_change(raw):
    for text, flag in zip(raw, flags(raw).tolist()):
        assert flag or read_formats(text) == text, text
