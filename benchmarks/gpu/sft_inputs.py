"""What the sft stage reads, made on the fly for `benchmarks/pretrain_throughput.py --runs sft`: a pretrained model
folder (seeded random weights of the shape, `config.json` + `model.safetensors`), a mix folder holding only the
tokenizer, and instruct's `train.jsonl`/`heldout.jsonl` conversations.

The tokenizer is a word-level one over `vocab_size` tokens ("w6", "w7", ... plus `<|endoftext|>`, `<|pad|>` and
four `<|reserved_N|>` placeholders, which the chat markers claim as they would a real pretrain tokenizer's), so
conversations of random words encode one token per word in milliseconds. Conversation lengths vary (user turns
16–160 words, assistant turns 32–480) so rows pack several samples with block-diagonal attention and the loss
falls on assistant tokens only — the SFT objective's real work per row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

SPECIALS = ["<|endoftext|>", "<|pad|>", *(f"<|reserved_{i}|>" for i in range(4))]
MEAN_SAMPLE_TOKENS = 330  # ≈ (16+160)/2 + (32+480)/2 words + markers: sizes the number of conversations


def word_tokenizer(vocab_size: int) -> Any:
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    tok = Tokenizer(WordLevel(vocab, unk_token=f"w{len(SPECIALS)}"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    return tok


def conversations(n: int, vocab_size: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    first = len(SPECIALS)

    def words(lo: int, hi: int) -> str:
        return " ".join(f"w{i}" for i in rng.integers(first, vocab_size, size=int(rng.integers(lo, hi))))

    return [{"id": f"{prefix}{k:05d}", "source": "synthetic", "score": 1.0,
             "messages": [{"role": "user", "content": words(16, 160)},
                          {"role": "assistant", "content": words(32, 480)}]} for k in range(n)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def sft_inputs(work: Path, cfg: Any, rows: int, seed: int = 0) -> dict[str, Path]:
    """Folders `pretrain`, `mix`, `instruct` under `work` for `rows` packed training rows of `cfg.seq_len`."""
    import torch

    from tasks.train.modeling.model import Transformer
    from tasks.train.checkpointing.weights import save_weights

    pre, mix, instruct = work / "pretrain", work / "mix", work / "instruct"
    mix.mkdir(parents=True, exist_ok=True)
    word_tokenizer(cfg.vocab_size).save(str(mix / "tokenizer.json"))
    pre.mkdir(parents=True, exist_ok=True)
    (pre / "config.json").write_text(json.dumps({"model": cfg.to_dict(), "vocab_size": cfg.vocab_size,
                                                 "seq_len": cfg.seq_len}))
    with torch.no_grad():
        save_weights(pre, Transformer(cfg, seed).state_dict())
    n = int(rows * cfg.seq_len / MEAN_SAMPLE_TOKENS * 1.3) + 8  # a margin: packing leaves some room in each row
    write_jsonl(instruct / "train.jsonl", conversations(n, cfg.vocab_size, seed, "t"))
    write_jsonl(instruct / "heldout.jsonl", conversations(2, cfg.vocab_size, seed + 1, "h"))
    return {"pretrain": pre, "mix": mix, "instruct": instruct}


def sft_run(work: Path, cfg: Any, batch: int, device: str, steps: int, sets: dict[str, str], seed: int = 0) -> Any:
    """An `SFTRun` of the sft spec's defaults (micro-batch `batch`, rows of the pretrained model's seq_len), with
    the benchmark's timing settings and the `--set` overrides (`train.*` / `parallel.*`)."""
    from benchmarks.gpu.stage_steps import TIMING_SETTINGS, apply_overrides
    from specs.pretrain import ParallelSpec
    from specs.ranks import SFTRun
    from specs.sft import SFTJob, SFTSpec
    from tasks.train.objectives import reference
    from tasks.train.objectives.sft import SFTObjective

    folders = sft_inputs(work, cfg, steps * batch, seed)
    data: dict[str, Any] = {"train": {"steps": steps, "micro_batch_size": batch},
                            "parallel": {"accelerator": device}}
    apply_overrides(data, {**TIMING_SETTINGS, **sets})
    job = SFTJob.from_sections(SFTSpec.model_validate(data["train"]), ParallelSpec.model_validate(data["parallel"]))
    (work / "out").mkdir(parents=True, exist_ok=True)
    return SFTRun(spec=job, mix_dir=str(folders["mix"]), out_dir=str(work / "out"), ckpt_dir=str(work / "ckpt"),
                  reports_dir=str(work / "reports"), marker_dir=str(work / "markers"), seed=seed,
                  objective_ref=reference(SFTObjective),
                  pretrain_dir=str(folders["pretrain"]), instruct_dir=str(folders["instruct"]),
                  pretrain_fingerprint="benchmark")
