"""Other countries' national identity numbers from a generator this project did not write: Faker's locale
providers (`benchmarks/pii_recall.py`'s `ssn/faker_national` group, `tests/test_pii_national.py`).

Each value is Faker's, kept when `python-stdnum`'s validator for its scheme accepts it (China's without
stdnum's region table, see `pii_national.valid_ric`): Faker's en_IN Aadhaar numbers are random digits (9% pass
Verhoeff) and most of its ko_KR numbers fail the RRN check digit, so such values are no country's number. Half
are planted after a cue in the country's language (`PESEL: …`, `身份证号：…`), half in a line without one
(`Kunde … angelegt`): a bare digit run is found only after a cue.
"""

from __future__ import annotations

import random

from tasks.data.privacy.pii_national import valid_as

# (locale, Faker method, stdnum scheme, cues in the country's language)
SOURCES = (
    ("fr_FR", "ssn", "fr.nir", ("Numéro de sécurité sociale :", "NIR", "n° de sécu")),
    ("it_IT", "ssn", "it.codicefiscale", ("Codice fiscale:", "C.F.")),
    ("es_ES", "nif", "es.dni", ("DNI:", "NIF")),
    ("es_ES", "nie", "es.nie", ("NIE:", "número de NIE")),
    ("pt_BR", "cpf", "br.cpf", ("CPF:", "CPF nº")),
    ("pt_BR", "ssn", "br.cpf", ("CPF:", "CPF")),
    ("zh_CN", "ssn", "cn.ric", ("身份证号：", "居民身份证号码 ")),
    ("en_IN", "aadhaar_id", "in_.aadhaar", ("Aadhaar:", "Aadhaar number")),
    ("nl_NL", "ssn", "nl.bsn", ("BSN:", "burgerservicenummer")),
    ("nl_BE", "ssn", "be.nn", ("Rijksregisternummer:", "numéro national")),
    ("sv_SE", "ssn", "se.personnummer", ("Personnummer:", "personnummer")),
    ("de_AT", "ssn", "at.vnr", ("Sozialversicherungsnummer:", "SVNR")),
    ("de_CH", "ssn", "ch.ssn", ("AHV-Nummer:", "AHV-Nr.")),
    ("pl_PL", "pesel", "pl.pesel", ("PESEL:", "nr PESEL")),
    ("fi_FI", "ssn", "fi.hetu", ("Henkilötunnus:", "hetu")),
    ("no_NO", "ssn", "no.fodselsnummer", ("Fødselsnummer:", "fødselsnr.")),
    ("ko_KR", "ssn", "kr.rrn", ("주민등록번호:", "주민번호")),
    ("ro_RO", "ssn", "ro.cnp", ("CNP:", "Cod numeric personal")),
    ("hr_HR", "ssn", "hr.oib", ("OIB:", "OIB")),
    ("et_EE", "ssn", "ee.ik", ("Isikukood:", "isikukood")),
    ("el_GR", "ssn", "gr.amka", ("ΑΜΚΑ:", "AMKA")),
    ("tr_TR", "ssn", "tr.tckimlik", ("TC Kimlik No:", "T.C. kimlik numarası")),
    ("he_IL", "ssn", "il.idnr", ("ת.ז.", "תעודת זהות:")),
    ("es_MX", "curp", "mx.curp", ("CURP:", "CURP")),
    ("es_CL", "rut", "cl.rut", ("RUT:", "RUN")),
    ("th_TH", "ssn", "th.pin", ("เลขประจำตัวประชาชน", "ID")),
    ("lv_LV", "ssn", "lv.pvn", ("Personas kods:", "personas kods")),
    ("uk_UA", "ssn", "ua.rntrc", ("РНОКПП:", "ІПН")),
)
CUED = ("{cue} {value}", "{cue} {value} (verified)", '"{cue}" "{value}"', "| {cue} | {value} |")
BARE = ("Record {value} updated.", "| Anna Nowak | {value} |", "Kunde {value} angelegt", "{value}",
        "id={value}; status=ok")


def values(locale: str, method: str, scheme: str, seed: int, n: int) -> list[str]:
    """Up to `n` of Faker's values for the locale that the scheme's validator accepts."""
    import faker
    fake = faker.Faker(locale)
    fake.seed_instance(seed)
    out = []
    for _ in range(n * 20):
        value = getattr(fake, method)()
        if valid_as(scheme, value):
            out.append(value)
            if len(out) == n:
                break
    return out


def national_ids(rng: random.Random, n: int) -> list[tuple[str, tuple[str, ...], str]]:
    """`n` plants spread over the sources, cued and bare in turn; variant `locale/method cue|bare`."""
    try:
        import faker  # noqa: F401
    except ImportError:
        return []
    seed = rng.randrange(1 << 30)
    per = -(-n // len(SOURCES))
    pools = {src: values(src[0], src[1], src[2], seed, per) for src in SOURCES}
    out = []
    for i in range(n):
        src = SOURCES[i % len(SOURCES)]
        pool = pools[src]
        value = pool[(i // len(SOURCES)) % len(pool)]
        cued = (i // len(SOURCES)) % 2 == 0
        carrier = rng.choice(CUED if cued else BARE)
        text = carrier.format(cue=rng.choice(src[3]), value=value)
        out.append((text, (value,), f"{src[0]}/{src[1]} {'cue' if cued else 'bare'}"))
    return out
