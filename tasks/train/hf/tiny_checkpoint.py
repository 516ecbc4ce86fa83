"""A tiny random Hugging Face checkpoint folder, made the way users get one, to try `model.init.kind: hf`.

`python -m tasks tiny-checkpoint <folder> [--family llama|mistral|qwen2|qwen3|phi3] [--no-chat-template]`: a
2-layer model of that family (GQA, d 64; Mistral with a sliding window, Qwen2 with q/k/v biases, Qwen3 with q/k
norms and an explicit head_dim, Phi-3 with fused qkv/gate-up projections and a sliding window) saved by transformers' `save_pretrained`, with a byte-level BPE trained on text of the
embedded corpus (`tokenizer.json`) and a `tokenizer_config.json` carrying special tokens and, unless
--no-chat-template, a ChatML chat template — everything a downloaded Llama/Qwen folder has, in a few MB and a few
seconds, with no download. Its weights are random: it is for trying the pipeline, not for quality.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch

from tasks.data.records import Doc
from tasks.data.mixing.tokenizer import save_tokenizer, train_tokenizer

SPECIALS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", *(f"<|reserved_{i}|>" for i in range(4))]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def embedded_texts(limit: int = 100) -> list[str]:
    """Texts of the embedded corpora (the default run's sources), `limit` of each, in their fixed order."""
    from tasks.data.embedded import CORPORA, read_embedded

    texts = []
    for corpus in CORPORA:
        docs = (d for d in read_embedded(corpus) if isinstance(d, Doc) and isinstance(d.text, str))
        texts += [d.text for d in itertools.islice(docs, limit)]
    return texts


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3")


def family_config(family: str, **shape):
    """The transformers config of `family` with `shape` (LlamaConfig's field names) and the family's feature on."""
    import transformers

    if family == "llama":
        return transformers.LlamaConfig(**shape)
    if family == "mistral":
        return transformers.MistralConfig(**shape, sliding_window=48)
    if family == "qwen2":
        return transformers.Qwen2Config(**shape)
    if family == "qwen3":  # head_dim unlike hidden_size / heads, as Qwen3's published shapes have
        return transformers.Qwen3Config(**shape, head_dim=2 * shape["hidden_size"] // shape["num_attention_heads"])
    if family == "phi3":  # a window on every layer, as Phi-3-mini-4k's 2047
        return transformers.Phi3Config(**shape, sliding_window=48)
    raise ValueError(f"family {family!r}: one of {', '.join(FAMILIES)}")


# Families whose model_type transformers 5 maps to Qwen2Tokenizer: AutoTokenizer then applies Qwen2's own
# normalizer and pre-tokenizer whatever tokenizer.json says, so a checkpoint of these families must carry them
# (real Qwen2/Qwen3 folders do) or transformers splits its text differently from the tokenizers library.
QWEN_TOKENIZER = ("qwen2", "qwen3")


def qwen_pretokenizer(tok) -> None:
    """Give `tok` Qwen2's NFC normalizer and regex split + byte-level pre-tokenizer, as transformers builds them."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def make_checkpoint(folder: Path, texts: list[str], *, vocab: int = 2048, d_model: int = 64, layers: int = 2,
                    ffn: int = 160, tied: bool = False, pad_vocab: int = 8, seed: int = 0,
                    chat_template: str | None = CHATML, family: str = "llama"):
    """Write the checkpoint; returns the transformers model. The embedding has `pad_vocab` rows past the
    tokenizer, as real checkpoints pad theirs; norms and biases are randomised so a wrong weight mapping would
    show."""
    from transformers import AutoModelForCausalLM

    tok = train_tokenizer(texts, vocab, 2, SPECIALS)
    if family in QWEN_TOKENIZER:
        qwen_pretokenizer(tok)
    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tok, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        # the dict form transformers 4.x saved (real checkpoints carry it; 5.x loads it only with its "__type")
        "eos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False, "normalized": False,
                      "rstrip": False, "single_word": False, "special": True}, "pad_token": "<|pad|>",
        "tokenizer_class": "PreTrainedTokenizerFast", **({"chat_template": chat_template} if chat_template else {})},
        indent=2) + "\n")
    config = family_config(family, vocab_size=tok.get_vocab_size() + pad_vocab, hidden_size=d_model,
                           intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=tied,
                           eos_token_id=0, pad_token_id=1)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "bias")):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    return model
