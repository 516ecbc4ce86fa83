"""Semantic alignment: caption ↔ image by a CLIP checkpoint, a local folder in Hugging Face format that the
user points at (`multimodal.semantic.image_model`). The cosine similarity of the pair's embeddings is reported
per record and a record under the threshold is quarantined (`semantic_misaligned`). Without a model the check
keeps the record, records `skipped: no model` for it and the funnel says so: nothing is guessed. Audio is not
scored by a model (none supported yet): its transcripts are aligned in time by the segment and rate checks.

Weights load from safetensors only (`use_safetensors=True`: a pickled `pytorch_model.bin` is refused, never
unpickled) and never from the network (`local_files_only=True`). transformers and torch are imported only
when a model is configured, so the default run does not pay their ~10 s import.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specs.multimodal import SemanticSpec
from tasks.data.multimodal.checks import MediaVerdict, drop, keep
from tasks.data.multimodal.records import MMRecord

SKIPPED = "skipped: no model"


class ClipScorer:
    """A CLIP model from a folder: `scores(records)` = cosine similarity of each record's image and caption
    embeddings, `batch_size` pairs per forward pass."""

    def __init__(self, folder: Path, batch_size: int, threads: int):
        config = folder / "config.json"
        if not config.is_file():
            raise FileNotFoundError(f"multimodal.semantic.image_model: {folder} has no config.json (expected a "
                                    f"Hugging Face CLIP folder, as save_pretrained writes it)")
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
        if model_type != "clip":
            raise ValueError(f"multimodal.semantic.image_model: {folder} holds a {model_type!r} model, not clip")
        import torch
        from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

        self.torch, self.batch_size, self.threads = torch, batch_size, threads
        self.model = CLIPModel.from_pretrained(folder, local_files_only=True, use_safetensors=True).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        self.processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        self.max_tokens = int(self.model.config.text_config.max_position_embeddings)

    def scores(self, recs: Sequence[MMRecord]) -> list[float]:
        torch = self.torch
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)  # fixed thread count: the same reductions, the same scores
        try:
            out: list[float] = []
            with torch.inference_mode():
                for start in range(0, len(recs), self.batch_size):
                    part = recs[start:start + self.batch_size]
                    text = self.tokenizer([r.text for r in part], padding=True, truncation=True,
                                          max_length=self.max_tokens, return_tensors="pt")
                    pixels = self.processor(images=[r.decoded.thumb for r in part], return_tensors="pt")
                    res = self.model(input_ids=text["input_ids"], attention_mask=text["attention_mask"],
                                     pixel_values=pixels["pixel_values"])
                    image = torch.nn.functional.normalize(res.image_embeds.float(), dim=-1)
                    caption = torch.nn.functional.normalize(res.text_embeds.float(), dim=-1)
                    out += (image * caption).sum(-1).tolist()
            return out
        finally:
            torch.set_num_threads(before)


@dataclass
class SemanticCheck:
    """The `semantic` filter: `batch(records)` scores the images when a model is configured."""

    spec: SemanticSpec
    root: Path
    name: str = "semantic"
    scorer: ClipScorer | None = field(default=None)

    def __post_init__(self) -> None:
        if self.spec.enabled and self.spec.image_model:
            folder = Path(self.spec.image_model)
            self.scorer = ClipScorer(folder if folder.is_absolute() else self.root / folder, self.spec.batch_size,
                                     self.spec.threads)

    def status(self, kind: str) -> str:
        """What the check does for a media kind: the model it scores with, or why it is skipped."""
        if not self.spec.enabled:
            return "disabled (multimodal.semantic.enabled: false)"
        if kind != "image":
            return f"{SKIPPED} for {kind} (no {kind}–text model supported; timing checks apply)"
        if self.scorer is None:
            return f"{SKIPPED} (set multimodal.semantic.image_model to a local CLIP folder)"
        return f"scored by {self.spec.image_model} (threshold {self.spec.threshold})"

    def __call__(self, rec: MMRecord) -> MediaVerdict:
        return self.batch([rec])[0]

    def batch(self, recs: Sequence[MMRecord]) -> list[MediaVerdict]:
        verdicts: list[MediaVerdict] = [keep(skipped=1.0)] * len(recs)
        if self.scorer is None:
            return verdicts
        todo = [i for i, r in enumerate(recs) if r.media.kind == "image"]
        for i, score in zip(todo, self.scorer.scores([recs[i] for i in todo])):
            score = round(score, 6)
            verdicts[i] = keep(similarity=score) if score >= self.spec.threshold else drop(
                "semantic_misaligned", f"image–text cosine {score:.3f} < {self.spec.threshold}", similarity=score)
        return verdicts
