"""The spot-check sample: generations plus kept and dropped documents from clean, each with automatic flags.

Strata: `generation:<prompt category>`, `kept_doc:<source>`, `dropped_doc:<source | reason | source/reason>`.
Within a stratum, items are ranked by an 8-byte blake2b hash of (run.seed, item id) and the first
`per_stratum` are taken — no RNG state, so the draw is the same on every machine, and adding documents to a
source only ever swaps in a newcomer that hashes lower. Items are written in stratum order, then by id.

Flags come from the project's own detectors (`tasks/data/privacy/pii.py`, `toxicity.py`, `quality.py`) run on the
full text, with the stricter settings of `evaluate.spotcheck.flags`: they point a reviewer at items, they decide
nothing by themselves (the review gate's auto mode counts them on generations).

`spotcheck.jsonl` is canonical JSON (one item per line, sorted keys), so its sha256 identifies the sample: a
human decision records it, and the review stage refuses a decision made on another sample.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from specs.evaluate import FLAGS, FlagSpec, SpotcheckSpec, SpotItem
from tasks.data.privacy.pii import scrub_pii
from tasks.data.shard_rows import select_rows
from tasks.data.filtering.quality import quality_score
from tasks.data.filtering.toxicity import load_lexicon, toxicity

KIND_ORDER = {"generation": 0, "kept_doc": 1, "dropped_doc": 2, "media": 3}
ID_PREFIX = {"generation": "gen:", "kept_doc": "kept:", "dropped_doc": "dropped:", "media": "media:"}
MEDIA_FIELDS = ("media_kind", "media_file")  # written only on media items: the other items' bytes stay as they were


class Flagger:
    """Automatic flags for a text: `pii` (any PII kind found), `toxic` (word list), `low_quality` (rules of the
    profile that `quality.profiles` gives the text's source or prompt category; prose by default)."""

    def __init__(self, spec: FlagSpec, root: Path):
        self.spec = spec
        self.rules = {"any": spec.toxicity, "kept": spec.kept_toxicity}
        self.lexicons = {name: load_lexicon(root / t.wordlist if t.wordlist else None)
                         for name, t in self.rules.items() if t.enabled}

    def __call__(self, text: str, group: str, kept: bool = False) -> tuple[list[str], str]:
        """(flags in FLAGS order, a one-line explanation); a `kept` document's toxicity is judged by the kept rule
        (clean's own defaults), everything else by the any-word rule."""
        raised: dict[str, str] = {}
        if self.spec.pii_kinds:
            _, found = scrub_pii(text, self.spec.pii_kinds)
            if found:
                raised["pii"] = "pii: " + ", ".join(f"{k} ×{n}" for k, n in found.items())
        name = "kept" if kept else "any"
        if name in self.lexicons:
            tox = toxicity(text, self.lexicons[name], self.rules[name])
            if not tox.keep:
                raised["toxic"] = f"toxic: {tox.hits} hit(s): {', '.join(tox.matched)}"
        if self.spec.quality.enabled:
            profile = self.spec.quality.profiles.get(group, "prose")
            verdict = quality_score(text, getattr(self.spec.quality, profile))
            if not verdict.keep:
                failed = ", ".join(verdict.failed_rules) or "mean below threshold"
                raised["low_quality"] = f"low_quality: {profile} score {verdict.score:.3f}; failed: {failed}"
        flags = [f for f in FLAGS if f in raised]
        return flags, "; ".join(raised[f] for f in flags)


def rank(seed: int, item_id: str) -> float:
    """A stable pseudo-random number in [0, 1) for an item (the same on every machine and Python run)."""
    digest = hashlib.blake2b(f"{seed}\x1f{item_id}".encode(), digest_size=8, person=b"forgeline-spot").digest()
    return int.from_bytes(digest, "big") / 2**64


def draw(candidates: dict[str, list[str]], k: int, seed: int) -> dict[str, list[str]]:
    """Per stratum, the `k` ids of lowest rank, returned sorted by id."""
    return {s: sorted(sorted(ids, key=lambda i: (rank(seed, i), i))[:k]) for s, ids in candidates.items()}


def _truncate(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars]


def generation_items(gens: list[dict[str, Any]], spec: SpotcheckSpec, seed: int) -> list[SpotItem]:
    """Generations (with their flags already computed) drawn per prompt category."""
    by_id = {ID_PREFIX["generation"] + g["id"]: g for g in gens}
    strata: dict[str, list[str]] = defaultdict(list)
    for item_id, g in by_id.items():
        strata[f"generation:{g['category']}"].append(item_id)
    items = []
    for stratum, ids in draw(strata, spec.per_stratum, seed).items():
        for item_id in ids:
            g = by_id[item_id]
            items.append(SpotItem(id=item_id, kind="generation", stratum=stratum, source=g["category"],
                                  prompt=g["prompt"], text=_truncate(g["completion"], spec.max_chars),
                                  chars=len(g["completion"]), flags=g["flags"], flag_detail=g["flag_detail"]))
    return items


def pii_scrubbed(meta: str | None) -> str:
    """`pii_scrubbed: email 2, phone 1` from a kept record's meta (clean's counts of what it replaced), or "".
    Not a flag: scrubbed PII is gone from the text; the note tells the reviewer that scrubbing happened."""
    counts = json.loads(meta or "{}").get("pii") or {}
    return "pii_scrubbed: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) if counts else ""


def kept_items(clean_dir: Path, spec: SpotcheckSpec, seed: int, flagger: Flagger) -> list[SpotItem]:
    """Documents clean kept, drawn per source. Only the chosen documents' texts are read."""
    files = sorted((clean_dir / "shards").glob("*.parquet"))
    strata: dict[str, list[str]] = defaultdict(list)
    for r in select_rows(files, ["id", "source"]):
        strata[f"kept_doc:{r['source']}"].append(r["id"])
    chosen = draw(strata, spec.per_stratum, seed)
    wanted = {i for ids in chosen.values() for i in ids}
    texts = {r["id"]: r for r in select_rows(files, ["id", "source", "text", "meta"], wanted)} if wanted else {}
    items = []
    for stratum, ids in chosen.items():
        for doc_id in ids:
            r = texts[doc_id]
            flags, why = flagger(r["text"] or "", r["source"], kept=True)
            scrubbed = pii_scrubbed(r["meta"])
            why = "; ".join(part for part in (why, scrubbed) if part)
            items.append(SpotItem(id=ID_PREFIX["kept_doc"] + doc_id, kind="kept_doc", stratum=stratum,
                                  source=r["source"], text=_truncate(r["text"] or "", spec.max_chars),
                                  chars=len(r["text"] or ""), flags=flags, flag_detail=why))
    return items


def dropped_items(clean_dir: Path, spec: SpotcheckSpec, seed: int, flagger: Flagger) -> list[SpotItem]:
    """Documents in clean's drop ledger, drawn per source, reason or both (`spotcheck.dropped_strata`)."""
    ledger = clean_dir / "dropped.parquet"
    if not ledger.exists():
        raise FileNotFoundError(f"evaluate: {ledger} not found (clean writes its drop ledger there)")
    rows: dict[str, dict[str, Any]] = {}
    for r in select_rows([ledger], ["id", "source", "reason"]):   # the ledger's texts are read for the drawn only
        rows.setdefault(r["id"], r)  # ids are unique in clean's output; keep the first should that ever break
    strata: dict[str, list[str]] = defaultdict(list)
    for doc_id, r in rows.items():
        key = {"source": r["source"], "reason": r["reason"],
               "source_reason": f"{r['source']}/{r['reason']}"}[spec.dropped_strata]
        strata[f"dropped_doc:{key}"].append(doc_id)
    chosen = draw(strata, spec.per_stratum, seed)
    wanted = {i for ids in chosen.values() for i in ids}
    full: dict[str, dict[str, Any]] = {}
    for r in select_rows([ledger], ["id", "source", "reason", "detail", "text"], wanted) if wanted else ():
        full.setdefault(r["id"], r)
    items = []
    for stratum, ids in chosen.items():
        for doc_id in ids:
            r = full[doc_id]
            text = r["text"] or ""
            flags, why = flagger(text, r["source"])
            items.append(SpotItem(id=ID_PREFIX["dropped_doc"] + doc_id, kind="dropped_doc", stratum=stratum,
                                  source=r["source"], text=_truncate(text, spec.max_chars), chars=len(text),
                                  reason=r["reason"], detail=r["detail"], flags=flags, flag_detail=why))
    return items


def media_items(media_dir: Path, spec: SpotcheckSpec, seed: int) -> list[SpotItem]:
    """The multimodal stage's spot-check (its `spotcheck.jsonl`: kept records per media kind, quarantined ones
    per check, each naming a thumbnail or clip), drawn again `per_stratum` per stratum; none when the stage has
    no output folder (an evaluate run outside the pipeline)."""
    sample = media_dir / "spotcheck.jsonl"
    if not media_dir.exists():
        return []
    if not sample.exists():
        raise FileNotFoundError(f"evaluate: {sample} not found (the multimodal stage writes it)")
    rows = {ID_PREFIX["media"] + r["id"]: r for r in map(json.loads, sample.read_text(encoding="utf-8").splitlines())}
    strata: dict[str, list[str]] = defaultdict(list)
    for item_id, r in rows.items():
        strata[f"media:{r['stratum']}"].append(item_id)
    items = []
    for stratum, ids in draw(strata, spec.per_stratum, seed).items():
        for item_id in ids:
            r = rows[item_id]
            items.append(SpotItem(id=item_id, kind="media", stratum=stratum, source=r["source"],
                                  text=_truncate(r["text"], spec.max_chars), chars=len(r["text"]), reason=r["reason"],
                                  detail=r["detail"] or None, media_kind=r["kind"], media_file=r["media_file"]))
    return items


def build_sample(gens: list[dict[str, Any]], clean_dir: Path, spec: SpotcheckSpec, seed: int,
                 flagger: Flagger, media_dir: Path | None = None) -> list[SpotItem]:
    """The whole sample, ordered by kind, stratum and id (media items only when `media_dir` is given)."""
    items: list[SpotItem] = []
    if spec.generations:
        items += generation_items(gens, spec, seed)
    if spec.kept_docs:
        items += kept_items(clean_dir, spec, seed, flagger)
    if spec.dropped_docs:
        items += dropped_items(clean_dir, spec, seed, flagger)
    if spec.media and media_dir is not None:
        items += media_items(media_dir, spec, seed)
    return sorted(items, key=lambda it: (KIND_ORDER[it.kind], it.stratum, it.id))


def sample_text(items: list[SpotItem]) -> str:
    """The canonical bytes of spotcheck.jsonl: one sorted-key JSON object per line."""
    return "".join(json.dumps(it.model_dump(mode="json", exclude={f for f in MEDIA_FIELDS if getattr(it, f) is None}),
                              sort_keys=True, ensure_ascii=False) + "\n" for it in items)


def sample_sha256(items: list[SpotItem]) -> str:
    return hashlib.sha256(sample_text(items).encode("utf-8")).hexdigest()


def read_sample(path: Path) -> list[SpotItem]:
    """The items of a spotcheck.jsonl."""
    return [SpotItem.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
