"""Stage `multimodal`: image–text and audio–transcript records aligned in time and meaning before anything
downstream trains on them (training in this project stays text-only; this stage curates the multimodal set a
multimodal trainer downstream can trust).

Sources: `multimodal.sources` (the embedded default built at run time with planted misalignments, or user files:
jsonl/parquet pairs, WebDataset tar shards, audio with SRT/VTT/JSON transcripts) and, with `from_ingest`,
ingest's records that reference media. Checks in funnel order (tasks/data/multimodal/curate.py): read → decode
→ bounds → segments → speech_rate → caption → semantic → dedup. Every record is kept or quarantined with the
check, reason and detail; counts add up.

Outputs (data/multimodal/): `shards/mm-NNNNNN.tar` (WebDataset), `quarantine.parquet`, `records.parquet`
(every record's fate and semantic similarity), `report.json` (funnel, reasons, planted recall, semantic status
per media kind, per-check seconds), `spotcheck.jsonl` + `spotcheck/` (thumbnails and clips beside their text);
the runner adds `manifest.json` with lineage (inputs, outputs, code and their hashes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from specs.multimodal import EmbeddedMMSource, MultimodalSpec
from specs.results import StageResult
from tasks.core.files import write_json_atomic
from tasks.core.runner import StagePaths
from tasks.data.multimodal import embedded, shards
from tasks.data.multimodal.curate import Curation, curate, funnel, planted_recall
from tasks.data.multimodal.readers import read_ingest_media, read_source
from tasks.data.multimodal.records import MMBad, MMRecord
from tasks.data.validation.verdict import require_validated

log = logging.getLogger("forgeline.multimodal")
WORK = Path("work") / "multimodal"


def _planted_key(rec: MMRecord, planted: dict[str, str]) -> str | None:
    """The planted kind of an embedded record: keyed by its id within the source, or by its media path."""
    key = rec.id.split("/", 1)[1]
    if key in planted:
        return planted[key]
    return next((v for k, v in planted.items() if "/" in k and rec.origin.endswith("/" + k)), None)


def _items(spec: MultimodalSpec, paths: StagePaths, notes: list[str]) -> Iterator[MMRecord | MMBad]:
    root = paths.root
    for src in spec.sources:
        planted: dict[str, str] = {}
        if isinstance(src, EmbeddedMMSource):
            files, planted, note = embedded.build(src, root / WORK / "embedded" / src.name, paths.seed)
            notes += [f"{src.name}: {note}"] if note else []
        else:
            files = src
        items = read_source(files, root, _caps(spec))
        for item in islice(items, src.max_records) if src.max_records else items:
            if isinstance(item, MMRecord) and planted and (kind := _planted_key(item, planted)):
                item.meta["planted"] = kind
            yield item
    if spec.from_ingest:
        yield from read_ingest_media(paths.input("ingest"))


def _caps(spec: MultimodalSpec) -> dict[str, int]:
    """Each media kind's byte cap (`kind_cap`): the larger of the two, passed for every kind, let an image
    member of a tar shard be read up to the audio cap."""
    return {"image": spec.image.max_bytes, "audio": spec.audio.max_bytes}


def _unique(items: Iterator[MMRecord | MMBad]) -> Iterator[MMRecord | MMBad]:
    """A record whose id was already read (an `id_field` value repeated, a WebDataset key met twice) is
    `duplicate_id`: ids name the output's samples and rows, so two records under one id would overwrite."""
    seen: dict[str, str] = {}
    for item in items:
        if isinstance(item, MMRecord):
            if item.id in seen:
                item = MMBad(item.source, item.origin, "duplicate_id", f"id {item.id!r} already read at "
                             f"{seen[item.id]}")
            else:
                seen[item.id] = item.origin
        yield item


def run(spec: MultimodalSpec, paths: StagePaths) -> StageResult:
    require_validated(paths.input("validate"), "multimodal")
    notes: list[str] = []
    result = curate(_unique(_items(spec, paths, notes)), spec, paths.root)
    out = paths.out
    shards.clear(out)
    kept = [o for o in result.outcomes if o.kept]
    placed = shards.write_shards(kept, out, paths.root, spec.shard_records)
    shards.write_tables(result.outcomes, placed, result.semantic_status, out)
    spot = shards.spotcheck(result.outcomes, out, paths.root, spec.spotcheck_per_stratum, paths.seed,
                            spec.thumbnail_px, _caps(spec), spec.image.max_pixels)
    report = _report(result, notes, len(spot))
    write_json_atomic(out / "report.json", report)
    counts = {"read": len(result.outcomes), "kept": len(kept), "quarantined": len(result.outcomes) - len(kept),
              "shards": len({s for s, _ in placed.values()}), "spotcheck": len(spot),
              **{f"by_check.{r['check']}": r["quarantined"] for r in report["funnel"] if r["quarantined"]}}
    return StageResult(stage="multimodal", ok=True, counts=counts, table=report["funnel"],
                       summary=_summary(report))


def _report(result: Curation, notes: list[str], spot: int) -> dict[str, Any]:
    rows = funnel(result.outcomes)
    by_source: dict[str, dict[str, int]] = {}
    for o in result.outcomes:
        row = by_source.setdefault(o.source, {"read": 0, "kept": 0})
        row["read"] += 1
        row["kept"] += o.kept
    return {"funnel": rows, "by_source": by_source, "semantic": result.semantic_status,
            "planted": planted_recall(result.outcomes), "notes": notes, "spotcheck_items": spot,
            # wall seconds per check: differ between runs, so they are reported in the summary, not here
            "checked": {r["check"]: r["in"] for r in rows}}


def _summary(report: dict[str, Any]) -> str:
    rows = report["funnel"]
    lines = [f"**multimodal**: {rows[0]['in']} records, {rows[-1]['kept']} kept, "
             f"{rows[0]['in'] - rows[-1]['kept']} quarantined", "",
             "| check | in | kept | quarantined | reasons |", "|---|---|---|---|---|"]
    lines += [f"| {r['check']} | {r['in']} | {r['kept']} | {r['quarantined']} | {r['reasons']} |" for r in rows]
    lines += ["", "semantic: " + "; ".join(f"{k}: {v}" for k, v in report["semantic"].items())]
    planted = {k: v for k, v in report["planted"].items() if k != "clean"}
    if planted:
        lines += ["", "planted misalignments caught: " + ", ".join(
            f"{k} {v['caught']}/{v['planted']}" for k, v in planted.items())]
        clean = report["planted"].get("clean")
        if clean:
            lines.append(f"unplanted records quarantined: {clean['caught']}/{clean['planted']}"
                         + (f" ({', '.join(f'{k} {n}' for k, n in clean['by'].items())})" if clean["by"] else ""))
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)
