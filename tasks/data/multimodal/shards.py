"""What the multimodal stage writes: the kept records as WebDataset tar shards (per sample `<key>.<ext>` media
bytes as read, `<key>.txt` caption/transcript, `<key>.json` id, source, lineage, segments and every check's
signals), the quarantine, a per-record table, and the seeded spot-check sample with thumbnails and clips.

Tar members carry fixed metadata (mtime 0, uid/gid 0, mode 0644) and samples are in id order, so a rerun writes
the same bytes. Shards are written atomically (temp file + rename)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.files import atomic_path
from tasks.data.multimodal.curate import Outcome, similarity_of
from tasks.data.multimodal.decode import DEFAULT_MAX_PIXELS, decode_image, read_media
from tasks.data.multimodal.records import kind_cap

SHARD = "shards/mm-{:06d}.tar"
QUARANTINE_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("kind", pa.string()), ("check", pa.string()),
    ("reason", pa.string()), ("detail", pa.string()), ("kept_id", pa.string()), ("media", pa.string()),
    ("text", pa.string()), ("origin", pa.string()), ("planted", pa.string()), ("signals", pa.string())])
RECORDS_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("kind", pa.string()), ("kept", pa.bool_()),
    ("check", pa.string()), ("reason", pa.string()), ("similarity", pa.float64()), ("semantic", pa.string()),
    ("shard", pa.string()), ("key", pa.string())])


def sample_key(record_id: str) -> str:
    """A WebDataset key for an id: no dots or slashes (the format splits names at the first dot), unique by a
    short digest of the id."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", record_id)[-80:].strip("_")
    return f"{safe}-{hashlib.blake2b(record_id.encode(), digest_size=4).hexdigest()}"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o644, 0, 0, "", ""
    tar.addfile(info, io.BytesIO(data))


def sample_json(o: Outcome) -> dict[str, Any]:
    rec, d = o.rec, o.rec.decoded
    media = {"kind": rec.media.kind, "format": d.format, "sha256": d.sha256, "bytes": d.size_bytes,
             "path": rec.media.path}
    media.update({"width": d.width, "height": d.height} if rec.media.kind == "image" else
                 {"duration_s": round(d.duration_s, 6), "sample_rate": d.sample_rate, "channels": d.channels})
    return {"id": rec.id, "source": rec.source, "lang": rec.lang, "origin": rec.origin, "media": media,
            "segments": [vars(s) for s in rec.media.segments], "checks": o.signals,
            "meta": {k: v for k, v in rec.meta.items() if k != "planted"}}


def write_shards(kept: list[Outcome], out: Path, root: Path, per_shard: int) -> dict[str, tuple[str, str]]:
    """The kept samples in id order, `per_shard` a shard; returns id -> (shard path in out, key)."""
    placed: dict[str, tuple[str, str]] = {}
    kept = sorted(kept, key=lambda o: o.rec.id)
    for n, start in enumerate(range(0, len(kept), per_shard)):
        name = SHARD.format(n)
        with atomic_path(out / name) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for o in kept[start:start + per_shard]:
                key = sample_key(o.rec.id)
                _add(tar, f"{key}.{o.rec.decoded.format}", o.rec.media.read(root))
                _add(tar, f"{key}.txt", o.rec.text.encode("utf-8"))
                _add(tar, f"{key}.json", json.dumps(sample_json(o), sort_keys=True, ensure_ascii=False).encode())
                placed[o.rec.id] = (name, key)
    return placed


def media_label(o: Outcome) -> str:
    if o.rec is None:
        return ""
    return o.rec.media.path if o.rec.media.path is not None else f"inline:{o.rec.meta.get('name', '')}"


def write_tables(outcomes: list[Outcome], placed: dict[str, tuple[str, str]], semantic: dict[str, str],
                 out: Path) -> None:
    """quarantine.parquet (every record not kept, with why) and records.parquet (every record's fate and its
    semantic similarity, or why it has none)."""
    bad = [o for o in outcomes if not o.kept]
    rows = [{"id": o.id, "source": o.source, "kind": o.rec.media.kind if o.rec else None, "check": o.check,
             "reason": o.reason, "detail": o.detail, "kept_id": o.kept_id, "media": media_label(o),
             "text": o.rec.text if o.rec else None, "origin": o.rec.origin if o.rec else o.bad.origin,
             "planted": o.rec.planted if o.rec else None,
             "signals": json.dumps(o.signals, sort_keys=True)} for o in bad]
    with atomic_path(out / "quarantine.parquet") as tmp:
        pq.write_table(pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA), tmp, compression="zstd")
    rows = []
    for o in outcomes:
        kind = o.rec.media.kind if o.rec else None
        sim = similarity_of(o)
        state = "scored" if sim is not None else ("not reached" if "semantic" not in o.signals
                                                  else semantic.get(kind or "", "skipped"))
        shard, key = placed.get(o.id, (None, None))
        rows.append({"id": o.id, "source": o.source, "kind": kind, "kept": o.kept, "check": o.check,
                     "reason": o.reason, "similarity": sim, "semantic": state, "shard": shard, "key": key})
    with atomic_path(out / "records.parquet") as tmp:
        pq.write_table(pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA), tmp, compression="zstd")


def _rank(seed: int, item_id: str) -> str:
    return hashlib.blake2b(f"{seed}\x1f{item_id}".encode(), digest_size=8, person=b"forgeline-mm").hexdigest()


def spotcheck(outcomes: list[Outcome], out: Path, root: Path, per_stratum: int, seed: int,
              thumb_px: int, max_bytes: int | Mapping[str, int] = 256 * 1024 * 1024,
              max_pixels: int = DEFAULT_MAX_PIXELS) -> list[dict[str, Any]]:
    """Seeded strata: kept records per media kind, quarantined ones per check. Each item names its thumbnail
    (images, PNG) or clip (audio, the file as read) under `spotcheck/` beside its text; media is re-read as
    decode reads it (a regular file, at most its kind's `max_bytes`: `kind_cap`; an image of at most
    `max_pixels`, the bound the check used: a kept image is always shown), so a quarantined FIFO or device
    cannot hang it."""
    strata: dict[str, list[Outcome]] = {}
    for o in outcomes:
        if o.rec is None:
            continue
        strata.setdefault(f"kept:{o.rec.media.kind}" if o.kept else f"quarantined:{o.check}", []).append(o)
    items = []
    for stratum in sorted(strata):
        chosen = sorted(strata[stratum], key=lambda o: (_rank(seed, o.id), o.id))[:per_stratum]
        for o in sorted(chosen, key=lambda o: o.id):
            items.append({"id": o.id, "stratum": stratum, "kind": o.rec.media.kind, "source": o.source,
                          "text": o.rec.text, "reason": o.reason, "detail": o.detail, "planted": o.rec.planted,
                          "media_file": _preview(o, out, root, thumb_px, kind_cap(max_bytes, o.rec.media.kind),
                                                 max_pixels),
                          "similarity": similarity_of(o)})
    with atomic_path(out / "spotcheck.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(i, sort_keys=True, ensure_ascii=False) + "\n" for i in items),
                       encoding="utf-8")
    return items


def _preview(o: Outcome, out: Path, root: Path, thumb_px: int, max_bytes: int, max_pixels: int) -> str | None:
    """A thumbnail or a copy of the clip under out/spotcheck/ (root-relative path), or None when the media
    cannot be shown (unreadable, undecodable: the reason says why)."""
    folder = out / "spotcheck"
    folder.mkdir(exist_ok=True)
    key = sample_key(o.id)
    try:
        data = read_media(o.rec, root, max_bytes)
        if o.rec.media.kind == "image":
            thumb = decode_image(data, max_pixels).thumb
            thumb.thumbnail((thumb_px, thumb_px))
            target = folder / f"{key}.png"
            with atomic_path(target) as tmp:
                thumb.save(tmp, "PNG", optimize=False)
        else:
            suffix = Path(o.rec.media.path or "clip.wav").suffix or ".wav"
            target = folder / f"{key}{suffix}"
            with atomic_path(target) as tmp:
                tmp.write_bytes(data)
    except Exception:  # noqa: BLE001 — a broken file is what the item shows; its reason is already recorded
        return None
    return target.relative_to(root).as_posix() if target.is_relative_to(root) else str(target)


def clear(out: Path) -> None:
    shutil.rmtree(out / "shards", ignore_errors=True)
    shutil.rmtree(out / "spotcheck", ignore_errors=True)
