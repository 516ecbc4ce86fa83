"""Phone cues for `tasks.data.privacy.pii`: whether a phone cue (`Phone:`, `tel.`, `call me at`, `手机：`, ...) ends
right before a number.

Both the phone passes (`pii_phones`: any run of digit groups after a cue is a phone) and the SSN pass (`pii_ids`:
a number right after a phone cue is a phone, never an SSN: Tajikistan's `372 12 3456` has an SSN's spaced
layout) ask this; the SSN pass runs first, so the test lives here, imported by both.
"""

from __future__ import annotations

import re

# A phone cue right before the number: `Phone: `, `tel. `, `cell #`, `call me at `, `text me at `, `"mobile": "`,
# `My phone number is `, `Hotline`, `Rufen Sie uns an`, `Zadzwoń`, `我的电话是`, `手机号`, in a few languages;
# CJK cues need no word boundary (no spaces around them). Polish `lub` (or) right after a number gives another
# (`Tel. 600 123 456 lub 22 123 45 67`: a landline without a trunk 0 has no layout of its own); `my number` is a
# phone's cue once Japan's My Number pass (which runs first) has not taken its own 4-4-4 layout.
_PHONE_CUE = re.compile(
    r"(?i)(?:\b(?:phone|telephone|tel|telefon|telefono|tel[eé]fono|telefone|t[eé]l[eé]phone|t[eé]l|tlf|tfn|fon"
    r"|cell(?:phone|ular)?|celular|cel|mobile|mobil|mob|m[oó]vil|portable|handy|natel|gsm|fax|ph|whatsapp|sms|msisdn"
    r"|text(?:\s+me)?(?:\s+at)?|dial|call(?:\s+me)?(?:\s+at)?|contact(?:\s+(?:me|us))?(?:\s+(?:at|on))?"
    r"|reach\s+(?:me|us)\s+(?:at|on)|festnetz|fijo|ll[aá]m(?:ame|ar|a|enos)(?:\s+al)?|bizum(?:\s+al)?"
    r"|chiam(?:ami|aci|are)(?:\s+al)?|appel(?:ez|le)(?:-(?:moi|nous))?(?:\s+au)?|erreichbar(?:\s+unter)?"
    r"|hotline|landline|cellulare|tel[eé]fono\s+de\s+contacto|rufen\s+sie\s+(?:uns|mich)\s+an|zadzwo[nń]"
    r"|telem[oó]vel|my\s+(?:phone\s+|mobile\s+|cell\s+)?number|(?<=\d[ ])lub"
    # `my number is` in Polish and Spanish, German `Durchwahl` (direct line), Czech `volejte` (call), Danish
    # and Norwegian `ring (til Mette) på` and English `ring me on`: a name may stand between `ring til` and `på`
    r"|m[oó]j\s+numer|mi\s+n[uú]mero(?:\s+es)?|durchwahl|(?:za)?volejte"
    r"|ring(?:\s+til(?:\s+[^\W\d_]{2,20})?)?\s+på|ring\s+til|ring\s+(?:me|us)\s+on"
    r"|телефон|тел|моб"
    r"|τηλ(?:έφωνο)?|κινητό)(?:\.?[\s_-]*(?:no|number|num|#|nr|nummer|numero|número|номер|kom(?:[oó]rkowy)?|stacj))?"
    r"(?:\s+(?:is|was))?"
    r"|电话|電話|手机|手機|座机|座機|携帯|連絡先|联系方式|전화|휴대폰|[☎📞])"
    r"(?:号码|號碼|番号|번호)?[是为為号號]?\.?[\s\"':=#)\]>\-：,]{0,4}$")
# The last word of any cue (`Phone`, `tel`, `me`, `at`, `on`, `number`, `nr`...): a cheap test before the cue's
# regex, which, searched in a window, tries its alternation at every position (7 µs a number, most of the cued
# pass's time on log lines full of numbers).
_CUE_LAST_WORDS = frozenset(
    "phone telephone tel telefon telefono teléfono telefone téléphone tél tlf tfn fon cell cellphone cellular celular "
    "cel mobile mobil mob móvil movil portable handy natel gsm fax ph whatsapp sms msisdn text dial call me at on us "
    "contact no number num nr nummer numero número номер телефон тел моб is was festnetz fijo al au unter llámame "
    "llamame llamar llama llámanos bizum chiamami chiamaci chiamare appelez appelle moi nous erreichbar kom stacj "
    "hotline landline cellulare contacto an zadzwoń zadzwon telemóvel telemovel komórkowy komorkowy "
    "lub numer es durchwahl volejte zavolejte på til τηλ τηλέφωνο κινητό"
    .split())
_NUMBER_WORDS = ("nummer", "number", "numero", "no", "nr", "num")     # glued to a cue: `Telefonnummer`, `phoneno`
_CUE_SEPARATORS = frozenset(" \t\n\r\"':=#)]>-：,.")


def phone_cue_before(m: re.Match[str], window: int) -> str | None:
    """A phone cue ends right before the match: its last word is a cue's (or it is not ASCII: CJK, ☎), and then
    `_PHONE_CUE` says so."""
    text, end = m.string, m.start()
    floor = max(0, end - 6)
    while end > floor and text[end - 1] in _CUE_SEPARATORS:
        end -= 1
    start = end
    while start > 0 and end - start < 16 and text[start - 1].isalpha():
        start -= 1
    word = text[start:end].lower()
    if word not in _CUE_LAST_WORDS and (word.isascii() and end > 0 and text[end - 1].isascii()) and \
            not any(word.endswith(n) and word[:-len(n)] in _CUE_LAST_WORDS for n in _NUMBER_WORDS):
        return None
    cue = _PHONE_CUE.search(text, max(0, m.start() - window), m.start())
    return None if cue is None else cue.group()




def placeholder_led(m: re.Match[str], placeholder: str) -> bool:
    """The match's cue is the word inside a placeholder that an earlier replacement left (`DOB` of `<DOB>`), and
    something stands between it and the value: the label named the value that is now the placeholder, and what
    follows is the next field (`DOB <DOB> 2024-01-05 admitted`, `'<SSN>', '1985-03-12'`), not a value of its own.
    (Glued, `<DOB>1985-03-12</DOB>`, it is an XML element's tag, whose value it does name.)"""
    start = m.start()
    return start > 0 and m.string.startswith(placeholder, start - 1) and \
        m.string[start - 1 + len(placeholder):start + len(placeholder)] in (" ", "\t", ",", ";", "|", "'", '"', "\n")
