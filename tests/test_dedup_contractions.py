"""Near dedup of copies whose punctuation was stripped or whose text was kept as an escaped string literal
(`DedupSpec.join_contractions`, `fold_escapes`), and (a second probe) Greek typed without its accents and numbers
written in another script's digits (`fold_pointing`'s spelling variants). A blind probe of near-duplicate corpora found only 26 of 50 copies
with `string.punctuation` removed (`don't` → `dont`) and 36 of 50 kept as JSON strings (`one\\ntwo`: the `n` glued
to the next word); each copy below was J < 0.8 with its original before its fold. A copy with punctuation replaced
by spaces (`don t`) stays found; distinct texts stay apart; the compiled word path equals `wordhash.join_words`'
definition on text made of these pieces."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings, strategies as st

from specs.clean import DedupSpec
from tasks.data.dedup.wordhash import join_words, read_escapes
from tests.helpers.shingle_definition import assert_compiled_path_is_the_definition
from tests.test_dedup_folds import assert_copies_removed, assert_near_copy, jaccard

# invented prose, contraction-heavy as dialogue and forum text are
TALK = ("I don't think we'll make it before the storm, she said. It's already dark and the road isn't lit. "
        "We've done this drive a hundred times, he answered, and we'd never had a problem we couldn't fix. "
        "You're right, but I'm tired and the kids aren't sleeping. Let's stop at the inn; they'll have a room "
        "and we can't be the only ones who'd rather wait until morning. He didn't argue. The inn's sign was "
        "lit, the owner's dog barked once, and by ten o'clock they'd eaten and were asleep.")
LETTER = ("Dear Sam, thanks for the photos. We're back home now and the garden's a mess: the rain hasn't stopped "
          "since Tuesday. Mum's knee is better, though she won't admit it's because she finally rested. I've "
          "started the job at the library. It isn't what I'd planned, but the people there're kind and I'll learn "
          "a lot.\nWrite soon, won't you? We'd love to hear how you're doing.\nLove, Jo")
NOTE = ("We’re sorry you’ve had trouble with your order. It’s been shipped twice and it still hasn’t "
        "arrived, which isn’t what we’d promised. We’ll refund the postage today and you’ll get a new "
        "tracking number; if it doesn’t come by Friday, you’re welcome to call and we’ll sort it out. "
        "Don’t worry about returning the damaged box, we’ve noted it.")
CHAT = "\n".join([       # a chat log: a line every ten words, each an `\n` in its JSON string
    "[host] welcome everyone, let us start with the budget",
    "[ana] the venue quote came back higher than last year", "[host] how much higher are we talking about",
    "[ana] about twelve percent once catering is included", "[ben] we could move the dinner to the second night",
    "[host] would that save anything on the room hire", "[ana] yes the hall is cheaper on weekdays",
    "[ben] then the speakers arrive a day later too", "[host] fine, ana can you ask for a revised quote",
    "[ana] i will send it round by thursday morning", "[ben] and i will update the schedule draft tonight",
    "[host] good, next item is the travel grants", "[ana] we received forty applications this round",
    "[host] let us shortlist twenty by the end of the month"])
GREEK = ("Η πόλη βρίσκεται στους πρόποδες του βουνού και είναι γνωστή για τα παλιά αρχοντικά της, τα στενά "
         "καλντερίμια και την αγορά που γεμίζει κάθε Σάββατο με παραγωγούς από τα γύρω χωριά. Το καλοκαίρι οι "
         "επισκέπτες ανεβαίνουν στο κάστρο για να δουν τη θέα προς τη λίμνη και το φαράγγι.")
ARABIC_DIGITS = ("The station opened in 1932 and was rebuilt in 1987 after the flood; 214 trains stop there each "
                 "day, and 36,500 passengers use it, 12 % more than in 2019. Platform 4 closes at 23:40 and the "
                 "first train leaves at 05:15 for the 118 km run to the coast.")
INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
STRIP = str.maketrans("", "", string.punctuation + "\u2019")
SPACE = str.maketrans({c: " " for c in string.punctuation + "\u2019"})

COPIES = {
    "punctuation stripped": (TALK, TALK.translate(STRIP)),
    "punctuation stripped, typographic apostrophes": (NOTE, NOTE.translate(STRIP)),
    "JSON string": (CHAT, json.dumps(CHAT)[1:-1]),
    "escaped \\n and \\t": (LETTER, LETTER.replace("\n", "\\n").replace(". ", ".\\t")),
    "Greek without tonos": (GREEK, "".join(c for c in __import__("unicodedata").normalize("NFD", GREEK)
                                           if c not in "\u0301\u0308")),
    "Greek in capitals": (GREEK, GREEK.upper().replace("Ά", "Α").replace("Έ", "Ε").replace("Ή", "Η")
                          .replace("Ί", "Ι").replace("Ό", "Ο").replace("Ύ", "Υ").replace("Ώ", "Ω")),
    "Arabic-Indic digits": (ARABIC_DIGITS, ARABIC_DIGITS.translate(INDIC)),
}


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_is_a_near_duplicate(name):
    assert_near_copy(*COPIES[name])


def test_every_copy_is_removed_by_the_real_path(tmp_path):
    assert_copies_removed(COPIES, tmp_path)


def test_without_their_folds_the_copies_were_missed():
    off = DedupSpec(fold_escapes=False, join_contractions=False)
    for name, (original, copy) in list(COPIES.items())[:4]:
        assert jaccard(original, copy, off) < 0.8, name
    for name, (original, copy) in list(COPIES.items())[4:]:     # Greek and digits: `fold_pointing`'s spellings
        assert jaccard(original, copy, DedupSpec(fold_pointing=False)) < 0.8, name


def test_a_copy_with_punctuation_as_spaces_stays_found():
    copy = TALK.translate(SPACE)
    # (J 0.88 here, 1.0 without the joins: `o'clock` is `oclock` in the original, `o clock` in the copy)
    assert "don t" in copy and jaccard(TALK, copy) >= 0.8 and jaccard(NOTE, NOTE.translate(SPACE)) >= 0.8


def test_distinct_texts_stay_apart():
    # the same contractions in another story: the joins make no two texts alike
    other = ("I don't know if we'll reach the coast tonight, he said. It's late, the ferry isn't running and "
             "we've no tickets anyway. You're joking, she laughed; we'd booked them in May and they're in my bag.")
    assert jaccard(TALK, other) < 0.3 and jaccard(TALK.translate(STRIP), other.translate(STRIP)) < 0.3


@pytest.mark.parametrize("text,words", [
    ("don't dont don t DON'T", ["dont", "dont", "dont", "DONT"]),
    ("rock\u2019n\u2019roll isn\u2019t", ["rocknroll", "isnt"]),
    ("we ll, you re, I ve, she d, I m", ["well", "youre", "Ive", "shed", "Im"]),
    ("a ' b, 'quoted' x'", ["a", "b", "quoted", "x"]),          # an apostrophe beside a space joins nothing
    ("1990 s and t o", ["1990s", "andt", "o"]),                 # any word before a tail (alike in every copy)
    ("x,s x. t x\u2013s", ["x", "s", "x", "t", "xs"]),          # a blanked dash is a space; ASCII marks are not
    ("still tall", ["still", "tall"]),                          # only a whole word is a tail
])
def test_join_words_definition(text, words):
    assert join_words(text) == words


def test_escapes_are_read_as_spaces():
    assert read_escapes("one\\ntwo\\tthree\\r\\nfour \\\\n \\N") == "one  two  three    four \\     "
    assert read_escapes("C:\\\\path") == "C:\\\\path"           # a backslash before no escape letter stays


PIECES = ["the", "Don", "t", "s", "LL", "re", "ve", "m", "d", "x", " ", "  ", "'", "\u2019", "\u02bc", "\u00b4",
          "\\", "n", "N", "\\n", "\\t", "\n", "\u2013", "\u00a0", "_", "é", "ёж", "日本", "😀", "&amp;", "\u200d",
          "-\n", "<p>a</p><p>b</p><div>c</div>", ".", "ae", "ά", "Ώ", "ϊ", "٣", "۴", "९", "๑", "２"]
texts = st.lists(st.sampled_from(PIECES), max_size=16).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8))
def test_word_shingles_equal_the_joins_definition(raw):
    """The compiled path (escapes and joins read in bytes by `wordfolds.mark_joins`, after the blanking) equals the
    folds' chain with `wordhash.spell_words` last, on text made of the pieces these rules read."""
    assert_compiled_path_is_the_definition(raw)
