"""The semantic check's code path with a tiny CLIP built from a config at test time: loading from a folder
(safetensors only), batching (scores do not depend on the batch size), thresholds (per record, reported); and,
slow, a tiny CLIP trained on drawn shapes catching the embedded source's swapped captions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specs.multimodal import MultimodalSpec, SemanticSpec
from tasks.core.runner import StagePaths
from tasks.data.multimodal.checks import DecodeCheck
from tasks.data.multimodal.records import MMRecord, MediaRef
from tasks.data.multimodal.semantic import SemanticCheck

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory) -> Path:
    from tests.helpers import tiny_clip

    folder = tmp_path_factory.mktemp("clip") / "tiny-clip"
    tiny_clip.build(folder, seed=3)
    return folder


def shape_records(tmp_path: Path, n: int = 7) -> list[MMRecord]:
    from PIL import Image

    from tasks.data.multimodal.embedded import COLOURS

    recs = []
    for i, colour in enumerate(list(COLOURS)[:n] + ["red"] * max(0, n - len(COLOURS))):
        path = tmp_path / f"im{i}.png"
        Image.new("RGB", (40 + 8 * i, 48), COLOURS[colour]).save(path)
        rec = MMRecord(id=f"s/{i}", source="s", text=f"A {colour} square on a white background.", lang="en",
                       media=MediaRef("image", path=str(path)), origin=str(path))
        assert DecodeCheck(tmp_path)(rec).keep
        recs.append(rec)
    return recs


def test_scores_do_not_depend_on_the_batch_size(clip_folder, tmp_path):
    recs = shape_records(tmp_path)
    one = SemanticCheck(SemanticSpec(image_model=str(clip_folder), threshold=-1.0, batch_size=7), tmp_path)
    three = SemanticCheck(SemanticSpec(image_model=str(clip_folder), threshold=-1.0, batch_size=3), tmp_path)
    a = [v.signals["similarity"] for v in one.batch(recs)]
    b = [v.signals["similarity"] for v in three.batch(recs)]
    assert a == pytest.approx(b, abs=1e-5)
    assert len(set(a)) > 1 and all(-1.0 <= s <= 1.0 for s in a)   # per record, not one number for all


def test_threshold_quarantines_exactly_the_records_below_it(clip_folder, tmp_path):
    recs = shape_records(tmp_path)
    scored = SemanticCheck(SemanticSpec(image_model=str(clip_folder), threshold=-1.0), tmp_path).batch(recs)
    sims = sorted(v.signals["similarity"] for v in scored)
    cut = (sims[2] + sims[3]) / 2
    verdicts = SemanticCheck(SemanticSpec(image_model=str(clip_folder), threshold=round(cut, 6)), tmp_path).batch(recs)
    dropped = [v for v in verdicts if not v.keep]
    assert len(dropped) == 3 and {v.reason for v in dropped} == {"semantic_misaligned"}
    assert all(v.signals["similarity"] < cut for v in dropped)
    assert all(v.signals["similarity"] >= cut for v in verdicts if v.keep)


def test_audio_records_are_not_scored_and_the_status_says_why(clip_folder, tmp_path):
    check = SemanticCheck(SemanticSpec(image_model=str(clip_folder)), tmp_path)
    assert check.status("image").startswith("scored by") and check.status("audio").startswith("skipped: no model")
    assert SemanticCheck(SemanticSpec(), tmp_path).status("image").startswith("skipped: no model")


def test_a_folder_that_is_not_a_clip_safetensors_checkpoint_is_refused(clip_folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        SemanticCheck(SemanticSpec(image_model=str(tmp_path)), tmp_path)
    other = tmp_path / "other"
    shutil.copytree(clip_folder, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "siglip"}))
    with pytest.raises(ValueError, match="not clip"):
        SemanticCheck(SemanticSpec(image_model=str(other)), tmp_path)
    pickled = tmp_path / "pickled"   # weights only as a pickle: refused, never unpickled
    shutil.copytree(clip_folder, pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises((OSError, ValueError)):
        SemanticCheck(SemanticSpec(image_model=str(pickled)), tmp_path)


@pytest.mark.slow
def test_a_trained_tiny_clip_catches_the_swapped_captions(tmp_path):
    """150 contrastive steps on freshly drawn shapes (not the source's images) are enough for the model to
    score a caption naming another colour and shape far below the right one: every swapped pair is caught."""
    import tasks.multimodal as stage
    from tests.helpers import tiny_clip

    folder = tiny_clip.train(tmp_path / "trained", steps=150)
    paths = StagePaths(root=tmp_path, stage="multimodal", seed=1234)
    paths.out.mkdir(parents=True)
    spec = MultimodalSpec(from_ingest=False, semantic=SemanticSpec(image_model=str(folder), threshold=0.3))
    stage.run(spec, paths)
    report = json.loads((paths.out / "report.json").read_text())
    swapped = report["planted"]["swapped_caption"]
    assert swapped["caught"] == swapped["planted"] == 8 and swapped["by"] == {"semantic:semantic_misaligned": 8}
    clean = report["planted"]["clean"]
    assert clean["caught"] <= 2, clean   # matplotlib's photo and icon are outside what the tiny model saw
    records = pq.read_table(paths.out / "records.parquet").to_pylist()
    assert all(r["similarity"] is not None for r in records if r["semantic"].startswith("scored"))
