"""Clean's kept records say what PII was scrubbed from them (`meta.pii`, by kind, only when nonzero), the work
table's PII columns give the same counts, and the spot-check shows it for sampled kept documents
(`pii_scrubbed: email 2`) without raising a flag."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from specs.clean import CleanSpec
from specs.evaluate import FlagSpec, SpotcheckSpec
from tasks.data.cleanup.cleaning import WORK_SCHEMA, clean_record, process_shard
from tasks.data.records import RECORD_SCHEMA, write_table
from tasks.eval.spotcheck import Flagger, kept_items, pii_scrubbed
from tests.helpers.clean import record

MAILS = ("Write to ana.lima@example.org about the rota, or to the desk at bookings@harbour-inn.co.uk; "
         "the night porter answers +1 (415) 555-0199 after ten.")


def test_kept_record_meta_counts_scrubbed_pii_by_kind(tmp_path):
    spec = CleanSpec(filters=[])  # no filter: the record is kept whatever its text
    r = {**record("wiki", "a", MAILS), "meta": json.dumps({"url": "u"})}
    row = clean_record(r, spec, tmp_path)
    assert row["reason"] is None and "<EMAIL>" in row["text"] and "@" not in row["text"]
    # hand count: two addresses, one phone number; other meta keys survive
    assert json.loads(row["meta"]) == {"url": "u", "pii": {"email": 2, "phone": 1}}
    assert dict(zip(row["pii_kinds"], row["pii_counts"])) == {"email": 2, "phone": 1}
    clean = clean_record(record("wiki", "b", "No addresses here, only a harbour and its tides."), spec, tmp_path)
    assert "pii" not in json.loads(clean["meta"])
    # a look-alike: prose with `at` and `dot` is no address, nothing is counted; a spelled address is one
    spoken = clean_record(record("wiki", "c", "Look at the dot com bubble, dot by dot."), spec, tmp_path)
    assert "pii" not in json.loads(spoken["meta"])
    spelled = clean_record(record("wiki", "d", "Mail ana dot lima at example dot org."), spec, tmp_path)
    assert json.loads(spelled["meta"])["pii"] == {"email": 1} and spelled["text"] == "Mail <EMAIL>."
    # scrubbing off: nothing scrubbed, nothing recorded
    off = clean_record(dict(r), CleanSpec(filters=[], pii={"enabled": False}), tmp_path)
    assert json.loads(off["meta"]) == {"url": "u"} and "ana.lima@example.org" in off["text"]



def test_work_table_pii_columns_are_the_counts_clean_record_gives(tmp_path):
    spec = CleanSpec(filters=[])
    texts = ["No addresses here, only a harbour and its tides.", MAILS, "Look at the dot com bubble, dot by dot.",
             "Reach me at ana@example.org\r\n\n\n\n\nor not  ", " \u200b \n "]   # changed by normalize; blank
    records = [record("wiki", str(k), t) for k, t in enumerate(texts)]
    write_table(records, RECORD_SCHEMA, tmp_path / "in.parquet")
    process_shard(tmp_path / "in.parquet", tmp_path / "work/in.parquet", spec, 1, tmp_path, 2)
    work = pq.read_table(tmp_path / "work/in.parquet")
    assert work.schema.equals(WORK_SCHEMA)
    rows = work.to_pylist()
    assert [dict(zip(r["pii_kinds"], r["pii_counts"])) for r in rows] == [{}, {"email": 2, "phone": 1}, {},
                                                                         {"email": 1}, {}]
    assert rows == [clean_record(r, spec, tmp_path) for r in records]

def test_spotcheck_shows_pii_scrubbed_for_sampled_kept_documents(tmp_path):
    spec = CleanSpec(filters=[])
    rows = [clean_record(record("wiki", k, t), spec, tmp_path)
            for k, t in (("a", MAILS), ("b", "A plain sentence about the harbour and its tides, nothing more."))]
    clean_dir = tmp_path / "data/clean"
    (clean_dir / "shards").mkdir(parents=True)
    write_table([{k: r[k] for k in RECORD_SCHEMA.names} for r in rows], RECORD_SCHEMA,
                clean_dir / "shards/wiki-00000.parquet")
    items = {i.id: i for i in kept_items(clean_dir, SpotcheckSpec(per_stratum=5), 1, Flagger(FlagSpec(), tmp_path))}
    assert set(items) == {"kept:wiki/a", "kept:wiki/b"}
    assert "pii_scrubbed: email 2, phone 1" in items["kept:wiki/a"].flag_detail
    assert "pii" not in items["kept:wiki/a"].flags  # the placeholders left in the text are no PII
    assert "pii_scrubbed" not in items["kept:wiki/b"].flag_detail
    assert pii_scrubbed(None) == pii_scrubbed("{}") == pii_scrubbed('{"pii": {}}') == ""
