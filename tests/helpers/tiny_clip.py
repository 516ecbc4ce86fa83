"""A tiny CLIP checkpoint folder built from a config at test time (random weights, or trained for a few steps on
drawn shapes so that it tells a red circle from a blue square): config.json + model.safetensors + tokenizer +
image processor, the files a real CLIP checkpoint folder has."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("a an the on of background red green blue yellow orange purple black white grey circle square "
         "triangle slightly smaller").split()
SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]


def build(folder: Path, seed: int = 0, image_size: int = 32, max_tokens: int = 24):
    """Write a random tiny CLIP to `folder`; return (model, tokenizer, processor)."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate([*SPECIALS, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A [EOS]", special_tokens=[
        ("[BOS]", vocab["[BOS]"]), ("[EOS]", vocab["[EOS]"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                        bos_token="[BOS]", eos_token="[EOS]", model_max_length=max_tokens)
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=max_tokens, pad_token_id=0, bos_token_id=2,
                eos_token_id=3)
    vision = dict(image_size=image_size, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2)
    torch.manual_seed(seed)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    processor = CLIPImageProcessor(size={"shortest_edge": image_size},
                                   crop_size={"height": image_size, "width": image_size})
    save(folder, model, tokenizer, processor)
    return model, tokenizer, processor


def save(folder: Path, model, tokenizer, processor) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    processor.save_pretrained(folder)


def train(folder: Path, steps: int = 150, seed: int = 0) -> Path:
    """A tiny CLIP trained contrastively on freshly drawn shapes (not the embedded source's own images) until
    matching captions score above swapped ones; written to `folder`."""
    import torch

    from tasks.data.multimodal.embedded import BACKGROUNDS, COLOURS, SHAPES, draw_shape

    model, tokenizer, processor = build(folder, seed)
    rng = random.Random(seed)
    combos = [(c, s, b) for c in COLOURS for s in SHAPES for b in BACKGROUNDS]
    pool = []
    for _ in range(256):
        c, s, b = rng.choice(combos)
        img = draw_shape(rng, c, s, b, (rng.randrange(96, 320), rng.randrange(96, 320)))
        pool.append((img, f"A {c} {s} on a {b} background."))
    pixels = processor(images=[p[0] for p in pool], return_tensors="pt")["pixel_values"]
    texts = tokenizer([p[1] for p in pool], padding=True, return_tensors="pt")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(seed)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is ~10x faster than two on a shared 2-core machine
    try:
        for _ in range(steps):
            idx = torch.randperm(len(pool))[:64]
            out = model(input_ids=texts["input_ids"][idx], attention_mask=texts["attention_mask"][idx],
                        pixel_values=pixels[idx], return_loss=True)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    save(folder, model, tokenizer, processor)
    return folder
