"""The embedded multimodal source, built at run time from what installs by name, with planted misalignments.

Images: shapes drawn by Pillow (colour × shape × background, sizes and positions from a seeded generator) whose
captions say what is drawn, written as PNG/JPEG files beside an image–text `pairs.jsonl`; plus matplotlib's
sample images (a dependency already: `mpl-data/sample_data`) packed as a WebDataset shard. Audio: public-domain
Harvard sentences (IEEE 1969) spoken by espeak-ng (Debian's `espeak-ng`, installed by scripts/setup.sh; without
it the source has no audio and the stage says so), one to four sentences a clip, with exact timed segments,
listed in `audio.jsonl` or beside the clip as .srt/.vtt/.txt files.

Planted (each record's kind lands in its meta `planted`, so the stage reports recall per kind): truncated files,
swapped captions and transcripts, shifted and overlapping timestamps, boilerplate/missing/foreign captions,
near-duplicate images, an exact duplicate clip, too-small and banner-shaped images. Everything is deterministic.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import tarfile
from importlib.util import find_spec
from pathlib import Path

from specs.multimodal import EmbeddedMMSource, FilesMMSource
from tasks.data.multimodal.records import Segment
from tasks.data.multimodal.subtitles import format_srt, format_vtt

COLOURS = {"red": (220, 30, 30), "green": (30, 160, 60), "blue": (40, 70, 220), "yellow": (240, 210, 30),
           "orange": (245, 140, 20), "purple": (130, 50, 170)}
BACKGROUNDS = {"white": (250, 250, 250), "black": (10, 10, 10), "grey": (128, 128, 128)}
SHAPES = ("circle", "square", "triangle")
SAMPLE_CAPTIONS = {
    "grace_hopper.jpg": "Portrait photograph of Rear Admiral Grace Hopper in her naval dress uniform.",
    "Minduka_Present_Blue_Pack.png": "A blue gift box with a ribbon and a bow, drawn as a small icon.",
    "logo2.png": "The matplotlib logo: the word matplotlib beside a round polar bar chart.",
}
SENTENCES = (
    "The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.", "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.", "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.", "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.", "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.", "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.", "A pot of tea helps to pass the evening.",
)
FOREIGN = ("Un grand cercle rouge est dessiné au milieu de l'image, sur un fond blanc et uni.",
           "Ein blaues Quadrat ist in der Mitte des Bildes auf einem grauen Hintergrund gezeichnet.")
BOILERPLATE = ("image", "IMG_0042.JPG", "Untitled", "")
GAP_S = 0.25            # silence between spoken sentences


def espeak() -> str | None:
    """The espeak-ng program, or None when it is not installed."""
    return shutil.which("espeak-ng")


def draw_shape(rng: random.Random, colour: str, shape: str, background: str, size: tuple[int, int]):
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, BACKGROUNDS[background])
    w, h = size
    r = int(min(w, h) * rng.uniform(0.12, 0.3))
    cx, cy = int(w * rng.uniform(0.25, 0.75)), int(h * rng.uniform(0.25, 0.75))
    box = (cx - r, cy - r, cx + r, cy + r)
    d = ImageDraw.Draw(img)
    if shape == "circle":
        d.ellipse(box, fill=COLOURS[colour])
    elif shape == "square":
        d.rectangle(box, fill=COLOURS[colour])
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=COLOURS[colour])
    return img


def _save(img, path: Path) -> bytes:
    buf = io.BytesIO()
    if path.suffix == ".jpg":
        img.save(buf, "JPEG", quality=90)
    else:
        img.save(buf, "PNG", optimize=False)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def _images(folder: Path, n: int, plant: bool, rng: random.Random, planted: dict[str, str]) -> list[dict]:
    """Drawn shapes + pairs.jsonl rows; the planted variants are extra rows (or edits of a few)."""
    rows, combos = [], [(c, s, b) for c in COLOURS for s in SHAPES for b in BACKGROUNDS if c != b]
    (folder / "images").mkdir(parents=True)
    for i in range(n):
        colour, shape, bg = combos[(i * 23) % len(combos)]
        size = (rng.randrange(96, 320), rng.randrange(96, 320))
        name = f"images/shape-{i:04d}.{'jpg' if i % 2 else 'png'}"
        _save(draw_shape(rng, colour, shape, bg, size), folder / name)
        rows.append({"id": f"img-{i:04d}", "media": name, "caption": f"A {colour} {shape} on a {bg} background.",
                     "colour": colour, "shape": shape})
    if not plant or n < 24:
        return rows
    for k in range(0, 8, 2):                         # swapped captions: neighbours (other colour and shape)
        a, b = rows[k], rows[k + 1]
        a["caption"], b["caption"] = b["caption"], a["caption"]
        planted[a["id"]] = planted[b["id"]] = "swapped_caption"
    for k, row in enumerate(rows[8:11]):             # truncated files: the bytes cut at 60 %
        path = folder / row["media"]
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])
        planted[row["id"]] = "truncated_file"
    for k, text in enumerate(BOILERPLATE):
        rows[11 + k]["caption"] = text
        planted[rows[11 + k]["id"]] = "boilerplate_caption"
    for k, text in enumerate(FOREIGN):
        rows[15 + k]["caption"] = text
        planted[rows[15 + k]["id"]] = "foreign_caption"
    from PIL import Image

    for k in range(3):                               # near duplicates: resized and re-encoded, caption reworded
        src = rows[20 + k]
        img = Image.open(folder / src["media"]).convert("RGB")
        img = img.resize((int(img.width * 0.8), int(img.height * 0.8)), Image.Resampling.BICUBIC)
        name = f"images/copy-{k}.jpg"
        _save(img, folder / name)
        rows.append({"id": f"dup-{k}", "media": name, "caption": f"{src['caption'][:-1]}, slightly smaller."})
        planted[f"dup-{k}"] = "duplicate_media"
    _save(draw_shape(rng, "red", "circle", "white", (16, 16)), folder / "images/tiny.png")
    rows.append({"id": "tiny", "media": "images/tiny.png", "caption": "A red circle on a white background."})
    planted["tiny"] = "too_small"
    return rows


def _sample_shard(folder: Path, plant: bool, planted: dict[str, str]) -> None:
    """matplotlib's sample images with captions, as a WebDataset shard (key.ext members, fixed metadata)."""
    spec = find_spec("matplotlib")
    base = Path(next(iter(spec.submodule_search_locations))) / "mpl-data" / "sample_data" if spec else None
    files = [base / n for n in sorted(SAMPLE_CAPTIONS)] if base else []
    files = [f for f in files if f.is_file()]
    if not files:
        return
    with tarfile.open(folder / "samples-000000.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for f in files:
            key = f.stem.lower()
            for ext, data in ((f.suffix[1:], f.read_bytes()), ("txt", SAMPLE_CAPTIONS[f.name].encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
            if plant and f.name == "logo2.png":
                planted[f"samples-000000/{key}"] = "banner_shape"


def _speak(program: str, text: str, rate_wpm: int, pitch: int):
    import numpy as np
    import soundfile as sf

    wav = subprocess.run([program, "-v", "en-us", "-s", str(rate_wpm), "-p", str(pitch), "--stdout", text], check=True,
                         capture_output=True, timeout=60).stdout
    samples, sr = sf.read(io.BytesIO(wav), dtype="float32")
    return np.asarray(samples, dtype=np.float32), sr


def _clip(program: str, sentences: list[str], voice: int):
    """Spoken sentences joined by GAP_S of silence, and their exact segments; `voice` varies speed (140–180
    words a minute) and pitch, so that clips saying the same words are different recordings."""
    import numpy as np

    parts, segments, t, sr = [], [], 0.0, 22050
    for s in sentences:
        audio, sr = _speak(program, s, 140 + (voice * 7) % 41, 35 + (voice * 13) % 31)
        parts += [audio, np.zeros(int(GAP_S * sr), dtype=np.float32)]
        segments.append(Segment(round(t, 3), round(t + len(audio) / sr, 3), s))
        t += (len(audio) + int(GAP_S * sr)) / sr
    return np.concatenate(parts), sr, segments


def _audio(folder: Path, n: int, plant: bool, planted: dict[str, str], program: str) -> list[dict]:
    import soundfile as sf

    (folder / "audio").mkdir(parents=True)
    rows, clips = [], []
    for i in range(n):
        count = 1 + (i % 4)
        said = [SENTENCES[(i * 3 + j) % len(SENTENCES)] for j in range(count)]
        samples, sr, segments = _clip(program, said, i)
        clips.append((samples, sr, segments))
        name = f"audio/clip-{i:03d}.{'flac' if i % 3 == 2 else 'wav'}"
        sf.write(folder / name, samples, sr, subtype="PCM_16", format=name.rsplit(".", 1)[1].upper())
        rows.append({"id": f"clip-{i:03d}", "kind": "audio", "media": name, "caption": " ".join(said),
                     "segments": [vars(s) for s in segments]})
    if not plant or n < 9:
        return rows
    rows[0]["segments"] = [dict(s, start=s["start"] + 1.5, end=s["end"] + 1.5) for s in rows[0]["segments"]]
    planted[rows[0]["id"]] = "shifted_timestamps"
    seg = rows[5]["segments"]
    rows[5]["segments"] = [dict(s, end=s["end"] + 0.6) if k < len(seg) - 1 else s for k, s in enumerate(seg)]
    planted[rows[5]["id"]] = "overlapping_segments"
    path = folder / rows[1]["media"]
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.5)])
    planted[rows[1]["id"]] = "truncated_file"
    for short, long in ((4, 7), (8, 3)):             # 1-sentence and 4-sentence clips trade transcripts
        rows[short]["caption"], rows[long]["caption"] = rows[long]["caption"], rows[short]["caption"]
        del rows[short]["segments"], rows[long]["segments"]
        planted[rows[short]["id"]] = planted[rows[long]["id"]] = "swapped_transcript"
    sf.write(folder / "audio/clip-dup.flac", clips[2][0], clips[2][1], subtype="PCM_16", format="FLAC")
    rows.append({**rows[2], "id": "clip-dup", "media": "audio/clip-dup.flac"})
    planted["clip-dup"] = "duplicate_media"
    # Two clips keep their transcript beside them as subtitles (the shifted one as SRT), not in audio.jsonl.
    for row, fmt in ((rows[0], format_srt), (rows[6], format_vtt)):
        side = (folder / row["media"]).with_suffix(".srt" if fmt is format_srt else ".vtt")
        side.write_text(fmt([Segment(**s) for s in row["segments"]]), encoding="utf-8")
        planted[row["media"]] = planted.pop(row["id"], None) or ""
    return rows


def build(src: EmbeddedMMSource, work: Path, seed: int) -> tuple[FilesMMSource, dict[str, str], str]:
    """Write the source's files under `work` (rebuilt every run); return a files source reading them, the
    planted kind per record id, and a note on what could not be built (espeak-ng missing)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng, planted, note = random.Random(f"{seed}/{src.name}"), {}, ""
    rows = _images(work, src.images, src.plant, rng, planted)
    _write_jsonl(work / "pairs.jsonl", rows)
    _sample_shard(work, src.plant, planted)
    program = espeak()
    if src.audio and program is None:
        note = "espeak-ng not found: the embedded source has no audio (apt-get install espeak-ng)"
    elif src.audio:
        rows = _audio(work, src.audio, src.plant, planted, program)
        sidecar = {r["media"] for r in rows if (work / r["media"]).with_suffix(".srt").exists()
                   or (work / r["media"]).with_suffix(".vtt").exists()}
        _write_jsonl(work / "audio.jsonl", [r for r in rows if r["media"] not in sidecar])
    ids = {k: v for k, v in planted.items() if v}
    files = FilesMMSource(name=src.name, lang=src.lang, max_records=src.max_records, paths=[str(work)],
                          media_field="media", text_field="caption", id_field="id")
    return files, ids, note


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k not in ("colour", "shape")},
                                       sort_keys=True) + "\n" for r in rows), encoding="utf-8")
