"""A tiny Hugging Face checkpoint folder made the way users get one (transformers' save_pretrained + a
tokenizers `tokenizer.json` + `tokenizer_config.json`), over the vocabulary of the synthetic clean corpus of
tests/helpers/pretrain.py, so the pipeline's mix → pretrain → sft → export can start from it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import torch

from tasks.data.tokenizer import save_tokenizer, train_tokenizer

SPECIALS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", *(f"<|reserved_{i}|>" for i in range(4))]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def corpus_texts(root: Path) -> list[str]:
    return [t for f in sorted((root / "data" / "clean" / "shards").glob("*.parquet"))
            for t in pq.read_table(f).column("text").to_pylist()]


def make_checkpoint(folder: Path, texts: list[str], tied: bool = False, pad_vocab: int = 8, seed: int = 0,
                    chat_template: str | None = None):
    """A random tiny Llama (2 layers, GQA, d 32, SwiGLU 40) whose embedding has `pad_vocab` rows past the
    tokenizer (as real checkpoints pad to a multiple), with `chat_template` in its tokenizer_config.json;
    returns the transformers model."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = train_tokenizer(texts, 300, 2, SPECIALS)
    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tok, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": {"content": "<|endoftext|>", "special": True}, "pad_token": "<|pad|>",
        "tokenizer_class": "PreTrainedTokenizerFast", **({"chat_template": chat_template} if chat_template else {})}))
    config = LlamaConfig(vocab_size=tok.get_vocab_size() + pad_vocab, hidden_size=32, intermediate_size=40,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=tied, eos_token_id=0)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # norms start at 1: randomise them so a wrong mapping shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    return model
