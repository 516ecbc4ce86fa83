"""The small real corpus with planted problems that the clean stage is tested on (tests/test_clean.py,
tests/test_executors.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from tasks.data.embedded import read_embedded
from tasks.data.records import RECORD_SCHEMA, Doc, write_table

SOURCES = [{"name": "wiki", "kind": "embedded", "corpus": "encyclopedia"},
           {"name": "code", "kind": "embedded", "corpus": "code", "lang": "python"}]
PARAMS = {"run": {"seed": 3}, "ingest": {"sources": SOURCES},
          "clean": {"quality": {"profiles": {"code": "code"}}, "shard_records": 7}}


def record(source: str, key: str, text: str) -> dict:
    return {"id": f"{source}/{key}", "text": text, "source": source, "lang": "en", "origin": key, "meta": "{}",
            "media": []}


def toxic_words() -> list[str]:
    path = Path(__file__).resolve().parents[2] / "tasks/data/filtering/wordlists/toxic_en.txt"
    words = [w.strip() for w in path.read_text().splitlines() if w.strip() and not w.startswith("#")]
    return [w for w in words if " " not in w][:6]


def build_corpus(root: Path, shard_size: int = 6) -> dict[str, str]:
    """Real articles and stdlib modules plus planted cases; returns planted id -> what it is."""
    wiki = [d for d in itertools.islice(read_embedded("encyclopedia"), 24) if isinstance(d, Doc)]
    code = [d for d in itertools.islice(read_embedded("code"), 40) if isinstance(d, Doc) and len(d.text) > 500][:6]
    rows = [record("wiki", d.key, d.text) for d in wiki] + [record("code", d.key, d.text) for d in code]
    base = wiki[0].text
    other = max(wiki[1:], key=lambda d: len(d.text))  # a long article: surely kept on quality
    def edit(line: str, offset: int) -> str:  # change every 100th word: ~5 % of 5-gram shingles, J ≈ 0.9
        return " ".join(w.upper() + "x" if (offset + i) % 100 == 0 else w for i, w in enumerate(line.split(" ")))
    near = "\n".join(edit(line, n * 7) for n, line in enumerate(other.text.split("\n")))
    pii = base[:600] + "\nContact Jane at jane.doe+news@example.org or +1 (415) 555-0132; card 4111 1111 1111 1111."
    planted = {  # id -> (text, expected outcome, the original it duplicates)
        "wiki/zz-exact": ("  " + base.upper().replace("\n", "\n\n") + "  ", "exact_duplicate", f"wiki/{wiki[0].key}"),
        "wiki/zz-near": (near, "near_duplicate", f"wiki/{other.key}"),
        "wiki/zz-spam": ("BUY NOW!!! $$$ ### " * 200, "low_quality", None),
        # ends on a whole sentence, so C4's terminal-punctuation rule passes and only the toxicity filter drops it
        "wiki/zz-toxic": ("\n".join(f"You are a {w}." for w in toxic_words()) + "\n" + base[:300].rsplit(".", 1)[0]
                          + ".", "toxic", None),
        "wiki/zz-pii": (pii, "kept", None),
    }
    rows += [record("wiki", k.split("/", 1)[1], text) for k, (text, _, _) in planted.items()]
    shard_dir = root / "data/ingest/shards"
    shard_dir.mkdir(parents=True)
    for n, start in enumerate(range(0, len(rows), shard_size)):
        write_table(rows[start:start + shard_size], RECORD_SCHEMA, shard_dir / f"mixed-{n:05d}.parquet")
    (root / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    return {k: (why, original) for k, (_, why, original) in planted.items()}
