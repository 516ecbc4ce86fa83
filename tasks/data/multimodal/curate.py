"""The checks over a stream of records: per chunk, the per-record filters (decode → bounds → segments →
speech_rate → caption, each seeing what the earlier ones kept) and the semantic model's batch; then dedup over
every record that is still kept. A chunk's decoded pixels and samples are released once its fingerprints and
similarities are taken, so memory holds one chunk of decoded media whatever the corpus size. Inline media bytes
(WebDataset members, Parquet binaries, base64) are parked on disk as each record arrives (`MediaSpool`, under
work/multimodal/) and read back by decode, the shard writer and the spot-check: memory holds one record's
bytes, not the corpus's (nor a chunk's: 256 samples of 100 MB would be 25 GB)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specs.multimodal import MultimodalSpec
from tasks.data.filtering.filters import run_filters_batch
from tasks.data.multimodal import phash
from tasks.data.multimodal.checks import MediaVerdict, mm_filters
from tasks.data.multimodal.records import MediaSpool, MMBad, MMRecord
from tasks.data.multimodal.semantic import SemanticCheck

CHUNK = 256
SPOOL = Path("work") / "multimodal"   # under the project root: where inline media bytes are parked
FUNNEL = ("read", "decode", "bounds", "segments", "speech_rate", "caption", "semantic", "dedup")


@dataclass
class Outcome:
    """One input's fate: kept, or quarantined by `check` with `reason` and `detail`; `signals` per check."""

    rec: MMRecord | None
    bad: MMBad | None = None
    check: str | None = None
    reason: str | None = None
    detail: str = ""
    kept_id: str | None = None
    signals: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def kept(self) -> bool:
        return self.check is None

    @property
    def id(self) -> str:
        return self.rec.id if self.rec is not None else f"{self.bad.source}/{self.bad.origin}"

    @property
    def source(self) -> str:
        return self.rec.source if self.rec is not None else self.bad.source


@dataclass
class Curation:
    outcomes: list[Outcome]
    seconds: dict[str, float]          # wall time per check (the benchmark's records/s)
    semantic_status: dict[str, str]    # per media kind: scored by which model, or skipped and why


def curate(items: Iterable[MMRecord | MMBad], spec: MultimodalSpec, root: Path) -> Curation:
    filters = mm_filters(spec, root)
    t0 = time.perf_counter()
    semantic = SemanticCheck(spec.semantic, root)
    seconds: dict[str, float] = defaultdict(float)
    seconds["semantic"] += time.perf_counter() - t0      # model loading counts as the check's time
    outcomes: list[Outcome] = []
    prints: dict[int, Any] = {}
    chunk: list[MMRecord] = []
    spool = MediaSpool(root / SPOOL)

    def flush() -> None:
        base = len(outcomes)
        outcomes.extend(Outcome(rec) for rec in chunk)
        _chunk(chunk, outcomes[base:], filters, semantic, spec, seconds, prints, base)
        chunk.clear()

    for item in items:
        if isinstance(item, MMBad):
            outcomes.append(Outcome(None, item, "read", item.reason, item.detail))
            continue
        item.media = spool.park(item.media)   # its bytes on disk now: `media.data` is None
        chunk.append(item)
        if len(chunk) >= CHUNK:
            flush()
    flush()
    if spec.dedup.enabled:
        t = time.perf_counter()
        alive = sorted(prints)
        removed = phash.dedup([outcomes[i].rec for i in alive], [prints[i] for i in alive], spec.dedup)
        for j, (k, dist) in sorted(removed.items()):
            o, keeper = outcomes[alive[j]], outcomes[alive[k]]
            o.check, o.reason, o.kept_id = "dedup", "duplicate_media", keeper.rec.id
            o.detail = f"within {dist} bits of {keeper.rec.id}" if o.rec.media.kind == "image" else \
                f"same decoded samples as {keeper.rec.id}"
            o.signals["dedup"] = {"distance": float(dist)}
        seconds["dedup"] += time.perf_counter() - t
    status = {k: semantic.status(k) for k in ("image", "audio")}
    return Curation(outcomes, dict(seconds), status)


def _chunk(recs: list[MMRecord], outs: list[Outcome], filters: list, semantic: SemanticCheck, spec: MultimodalSpec,
           seconds: dict[str, float], prints: dict[int, Any], base: int) -> None:
    """Run a chunk through the per-record filters and the semantic batch; take the dedup fingerprints."""
    alive = list(range(len(recs)))
    for f in [*filters, semantic]:
        if f is semantic and not spec.semantic.enabled:
            break
        t = time.perf_counter()
        todo = [recs[i] for i in alive]
        verdicts: list[MediaVerdict] = [v[0][1] for v in run_filters_batch([f], todo)]
        seconds[f.name] += time.perf_counter() - t
        for i, v in zip(alive, verdicts):
            outs[i].signals[f.name] = dict(v.signals)
            if not v.keep:
                outs[i].check, outs[i].reason, outs[i].detail = f.name, v.reason, getattr(v, "detail", "")
        alive = [i for i in alive if outs[i].kept]
    if spec.dedup.enabled:
        t = time.perf_counter()
        for i in alive:
            p = phash.fingerprint(recs[i], spec.dedup)
            if p is not None:
                prints[base + i] = p
        seconds["dedup"] += time.perf_counter() - t
    for rec in recs:  # release the decoded pixels and samples: the chunk is done with them
        if rec.decoded is not None:
            rec.decoded.thumb = rec.decoded.samples = None


def funnel(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One row per check in funnel order: records in, kept, quarantined, and the reasons."""
    rows, remaining = [], len(outcomes)
    by_check: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if not o.kept:
            by_check[o.check].append(o)
    for check in FUNNEL:
        dropped = by_check.get(check, [])
        reasons: dict[str, int] = defaultdict(int)
        for o in dropped:
            reasons[o.reason] += 1
        rows.append({"check": check, "in": remaining, "quarantined": len(dropped), "kept": remaining - len(dropped),
                     "reasons": ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0])))})
        remaining -= len(dropped)
    return rows


def planted_recall(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per planted kind: how many were planted, how many were quarantined, by which checks; plus `clean`: the
    unplanted records quarantined (false alarms, by check)."""
    out: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        kind = (o.rec.planted if o.rec is not None else None) or "clean"
        row = out.setdefault(kind, {"planted": 0, "caught": 0, "by": defaultdict(int)})
        row["planted"] += 1
        if not o.kept:
            row["caught"] += 1
            row["by"][f"{o.check}:{o.reason}"] += 1
    for row in out.values():
        row["by"] = dict(sorted(row["by"].items()))
        row["recall"] = round(row["caught"] / row["planted"], 4) if row["planted"] else None
    return dict(sorted(out.items()))


def similarity_of(o: Outcome) -> float | None:
    return (o.signals.get("semantic") or {}).get("similarity")
