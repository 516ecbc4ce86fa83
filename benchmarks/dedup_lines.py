"""Repeated-line removal (`clean.lines`) on a synthetic web crawl, through the clean stage, off and on.

Sites, each with its own chrome (a menu, a cookie notice, a footer, a per-page date line that never repeats;
site 0 also its full menu of 40 short lines),
publish short articles (the first paragraphs of embedded encyclopedia articles, 60-200 words). Some articles
are copied to another site under that site's chrome, some of those with one paragraph edited. Printed per
setting: how many copies are removed (near dedup or the lines step), how many are left as fragments, how much
chrome stays in the kept texts, whether every original is kept whole, and the stage's time.

    python benchmarks/dedup_lines.py [--sites 8] [--pages 40] [--copies 60]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specs import Params  # noqa: E402
from tasks.core.runner import run_stage  # noqa: E402
from tasks.data.embedded import read_embedded  # noqa: E402
from tasks.data.records import RECORD_SCHEMA, Doc, read_all_records, write_table  # noqa: E402

SECTIONS = ["Home", "News", "World", "Science", "Culture", "Opinion", "Sport", "Travel", "Video", "Podcasts"]


def mega_menu(site: int) -> list[str]:
    """Site 0's full section menu on every page: 40 short lines in a block (~120 words)."""
    return [f"{SECTIONS[k % len(SECTIONS)]} section {k}" for k in range(40)] if site == 0 else []


def chrome(site: int, rng: random.Random) -> list[str]:
    name = f"{rng.choice(['Daily', 'Weekly', 'Morning', 'Evening'])} {rng.choice(['Ledger', 'Gazette', 'Post', 'Herald'])} {site}"
    menu = " | ".join([name] + rng.sample(SECTIONS, 6) + ["Log in", "Subscribe"])
    cookie = rng.choice(["We use cookies to improve your experience. By continuing you accept our cookie policy.",
                         f"{name} uses cookies and similar technologies. Manage your preferences in Settings."])
    footer = f"© 2024 {name}. All rights reserved. About us · Contact · Careers · Advertise · Terms · Privacy"
    return [menu, cookie, footer, *mega_menu(site)]


def bodies(count: int) -> list[list[str]]:
    """Paragraph lists of 60-200 words from the embedded encyclopedia."""
    out = []
    for d in itertools.islice(read_embedded("encyclopedia"), count * 3):
        if not isinstance(d, Doc):
            continue
        paras, words = [], 0
        for p in d.text.split("\n"):
            if len(p.split()) > 12 and words < 200:
                paras.append(p)
                words += len(p.split())
        if words >= 60 and len(paras) >= 2:
            out.append(paras)
    return out[:count]


def crawl(sites: int, pages: int, copies: int, seed: int) -> tuple[list[dict], dict]:
    rng = random.Random(seed)
    chromes = [chrome(s, rng) for s in range(sites)]
    arts = bodies(sites * pages)
    rows, truth = [], {"originals": {}, "copies": {}, "chrome": [ln for c in chromes for ln in c]}

    def page(site: int, paras: list[str], key: str) -> str:
        menu, cookie, footer, *more = chromes[site]
        date = f"Published {rng.randint(1, 28)} {rng.choice(['March', 'May', 'June'])} 202{rng.randint(0, 4)} · " \
               f"{rng.randint(2, 9)} min read · {key}"
        return "\n".join([menu, cookie, date, *paras, footer, *more])

    for k, paras in enumerate(arts):
        key = f"s{k % sites}-{k:05d}"
        rows.append(_record(key, page(k % sites, paras, key)))
        truth["originals"][key] = paras
    for c, k in enumerate(rng.sample(range(len(arts)), copies)):
        paras = list(arts[k])
        if c % 3 == 0:                                   # a third of the copies with one paragraph edited
            words = paras[-1].split()
            words[len(words) // 2] = "notably " + words[len(words) // 2]
            paras[-1] = " ".join(words)
        key = f"zcopy-{c:04d}"
        rows.append(_record(key, page((k + 1 + c % (sites - 1)) % sites, paras, key)))
        truth["copies"][key] = f"s{k % sites}-{k:05d}"
    rng.shuffle(rows)
    return rows, truth


def _flat(text: str) -> str:
    return " ".join(text.split())


def _record(key: str, text: str) -> dict:
    return {"id": key, "text": text, "source": "web", "lang": "en", "origin": key, "meta": "{}", "media": []}


def run(rows: list[dict], truth: dict, lines: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shards = root / "data/ingest/shards"
        shards.mkdir(parents=True)
        for n, start in enumerate(range(0, len(rows), 100)):
            write_table(rows[start:start + 100], RECORD_SCHEMA, shards / f"web-{n:05d}.parquet")
        params = {"run": {"seed": 1, "executor": {"workers": 1}},
                  "ingest": {"sources": [{"name": "web", "kind": "embedded", "corpus": "encyclopedia"}]},
                  "clean": {"filters": [], "pii": {"enabled": False}, "lines": lines}}
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        t0 = time.perf_counter()
        run_stage("clean", Params.model_validate(params), root)
        seconds = time.perf_counter() - t0
        kept = {r["id"]: r["text"] for r in read_all_records(root / "data/clean").to_pylist()}
        ledger = {r["id"]: r["reason"] for r in pq.read_table(root / "data/clean/dropped.parquet").to_pylist()}
        report = json.loads((root / "data/clean/report.json").read_text())
    copies, originals, chrome = truth["copies"], truth["originals"], set(truth["chrome"])
    held = {c: sum(_flat(p) in _flat(kept[c]) for p in originals[o]) for c, o in copies.items() if c in kept}
    whole = sum(1 for k, paras in originals.items() if k in kept and all(_flat(p) in _flat(kept[k]) for p in paras))
    return {"copies removed": sum(c in ledger for c in copies), "copies kept": len(held),
            "copies kept with the whole article": sum(n == len(originals[copies[c]]) for c, n in held.items()),
            "copies kept with part of it": sum(0 < n < len(originals[copies[c]]) for c, n in held.items()),
            "chrome lines kept": sum(ln.strip() in chrome for t in kept.values() for ln in t.split("\n")),
            "originals kept whole": whole,
            "site 0's kept whole": sum(1 for k, paras in originals.items() if k.startswith("s0-") and k in kept
                                       and all(_flat(p) in _flat(kept[k]) for p in paras)), "by reason": dict(report["dropped_by_reason"]), "clean s": seconds}


def throughput(texts: list[str]) -> str:
    """MB/s of one core: the lines step's hashing (`distinct_line_hashes`) beside near dedup's signatures and
    shingles of the same texts (best of 3 each)."""
    from specs.clean import DedupSpec
    from tasks.data.dedup import linededup
    from tasks.data.dedup.minhash import signatures_and_shingles

    mb = sum(len(t.encode()) for t in texts) / 1e6
    timings = {}
    for name, fn in (("line hashes", lambda: [linededup.distinct_line_hashes(t) for t in texts]),
                     ("MinHash signatures", lambda: signatures_and_shingles(texts, DedupSpec(), 1))):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        timings[name] = mb / best
    return ", ".join(f"{name} {rate:.1f} MB/s" for name, rate in timings.items()) + f" (one core, {mb:.1f} MB)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", type=int, default=8)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--copies", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rows, truth = crawl(a.sites, a.pages, a.copies, a.seed)
    print(f"{len(truth['originals'])} originals on {a.sites} sites, {len(truth['copies'])} copies "
          f"(a third with one paragraph edited), {len(rows)} pages, {len(truth['chrome'])} chrome lines")
    settings = [("off (near dedup only)", {}), ("lines: defaults (min_docs 2, keep_first)", {"enabled": True}),
                ("lines: max_removed 0.6", {"enabled": True, "max_removed": 0.6}),
                ("lines: boilerplate (min_docs 5, keep_first false)",
                 {"enabled": True, "min_docs": 5, "keep_first": False})]
    run(rows, truth, {})                  # warm-up: the compiled loops' first load is not the stage's time
    results = [(name, run(rows, truth, lines)) for name, lines in settings]
    keys = list(results[0][1])
    print("| setting | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, r in results:
        cells = [f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("speed:", throughput([r["text"] for r in rows] * 20))


if __name__ == "__main__":
    main()
