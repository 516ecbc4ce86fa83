"""Phone layouts from Faker locales this project had not met (`python /tmp/probe_faker_kinds/probe.py`: every
locale's `phone_number` after `Phone:` and after `call me at`, 3,174 → 3,206 of 3,240 found): the Baltic
`+(370) 42323221` (a country code in brackets after the plus) and Hungary's area code before a slash
(`(42)/323-2218`, `65/651 5947`). What is left there: 3-digit emergency numbers (ar_AE `999`) and Armenia's
`242.32322`, which reads as a decimal."""

from __future__ import annotations

import pytest

from tasks.data.privacy.pii import scrub_pii

faker = pytest.importorskip("faker")


@pytest.mark.parametrize("locale", ["lt_LT", "lv_LV", "hu_HU"])
@pytest.mark.parametrize("carrier", ["Phone: {v}", "Call me at {v} tomorrow."])
def test_faker_phones_of_these_locales_are_scrubbed(locale, carrier):
    fake = faker.Faker(locale)
    fake.seed_instance(13)
    values = [fake.phone_number() for _ in range(30)]
    missed = [v for v in values if v in scrub_pii(carrier.format(v=v))[0]]
    assert missed == []


@pytest.mark.parametrize("text", ["+(370) 42323221", "see +(44) 20 7946 0958"])
def test_a_bracketed_country_code_after_a_plus_is_a_phone_without_a_cue(text):
    assert scrub_pii(text)[1] == {"phone": 1}


@pytest.mark.parametrize("text", ["ratio 1920/1080", "Phone: 1920/1080", "Tel: 850/900/1800", "score +(12) points",
                                  "Phone models 2019/2020/2021", "Tel: 12/345"])
def test_control_slashed_quantities_and_short_brackets_stay(text):
    assert scrub_pii(text) == (text, {})
