"""Stage multimodal's checks: records per second of each check on a few thousand items, and the recall of each
planted misalignment, on the embedded source scaled up (drawn images with captions, espeak-ng clips with timed
transcripts, the planted variants).

    python benchmarks/multimodal_checks.py                   # 3,000 drawn images, 150 clips, no model
    python benchmarks/multimodal_checks.py --images 500 --audio 40 --clip random   # + a random tiny CLIP
    python benchmarks/multimodal_checks.py --clip trained    # a tiny CLIP trained on drawn shapes (~1-2 min)

A check's rate is the records it judged (those the earlier checks kept) over its wall seconds in this process,
one core: decode includes reading the file; dedup includes hashing the survivors and pairing them; semantic
includes loading the model. Building the source (drawing, speech synthesis) is timed apart.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.multimodal import EmbeddedMMSource, MultimodalSpec, SemanticSpec  # noqa: E402
from tasks.data.multimodal import embedded  # noqa: E402
from tasks.data.multimodal.curate import FUNNEL, curate, funnel, planted_recall  # noqa: E402
from tasks.data.multimodal.readers import read_source  # noqa: E402
from tasks.data.multimodal.records import MMRecord  # noqa: E402


def clip_folder(kind: str, work: Path) -> str | None:
    if kind == "none":
        return None
    from tests.helpers import tiny_clip

    folder = work / f"clip-{kind}"
    if kind == "random":
        tiny_clip.build(folder)
    else:
        tiny_clip.train(folder)
    return str(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--audio", type=int, default=150)
    ap.add_argument("--clip", choices=["none", "random", "trained"], default="none")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mm-bench-") as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        files, planted, note = embedded.build(EmbeddedMMSource(name="bench", images=args.images, audio=args.audio),
                                              work / "src", args.seed)
        items = list(read_source(files, work))
        for item in items:
            key = item.id.split("/", 1)[1] if isinstance(item, MMRecord) else None
            if key in planted:
                item.meta["planted"] = planted[key]
            elif isinstance(item, MMRecord):
                item.meta["planted"] = next((v for k, v in planted.items() if "/" in k
                                             and item.origin.endswith("/" + k)), None)
        built = time.perf_counter() - t
        model = clip_folder(args.clip, work)
        spec = MultimodalSpec(from_ingest=False, semantic=SemanticSpec(image_model=model, threshold=args.threshold))
        t = time.perf_counter()
        result = curate(items, spec, work)
        total = time.perf_counter() - t
    rows = {r["check"]: r for r in funnel(result.outcomes)}
    print(f"{len(items)} records ({args.images} drawn images + planted variants + matplotlib's samples, "
          f"{args.audio} clips); source built in {built:.1f} s{'; ' + note if note else ''}")
    print(f"semantic: {result.semantic_status['image']}\n")
    print("| check | records judged | quarantined | seconds | records/s |")
    print("|---|---:|---:|---:|---:|")
    for check in FUNNEL[1:]:
        sec = result.seconds.get(check, 0.0)
        n = rows[check]["in"]
        rate = f"{n / sec:,.0f}" if sec > 0 else "-"
        rate = "skipped (no model)" if check == "semantic" and model is None else rate
        print(f"| {check} | {n:,} | {rows[check]['quarantined']:,} | {sec:.2f} | {rate} |")
    print(f"| all checks | {len(items):,} | {len(items) - rows['dedup']['kept']:,} | {total:.2f} | "
          f"{len(items) / total:,.0f} |\n")
    print("| planted | records | quarantined | recall | by |")
    print("|---|---:|---:|---:|---|")
    for kind, row in planted_recall(result.outcomes).items():
        by = ", ".join(f"{k} {v}" for k, v in row["by"].items())
        name = "clean (false alarms)" if kind == "clean" else kind
        print(f"| {name} | {row['planted']} | {row['caught']} | {row['recall']:.2f} | {by} |")


if __name__ == "__main__":
    main()
