"""Byte-level BPE tokenizer (HF `tokenizers`): train on text, save as `tokenizer.json`, encode documents.

Byte-level means every string round-trips: `decode(encode(x)) == x` for any Unicode text, with no unknown
token. Special tokens get ids 0..k-1 (in the order given), then the 256 byte symbols, then merges.

Determinism: BPE training here was checked to give byte-identical `tokenizer.json` across runs, processes,
thread counts (RAYON_NUM_THREADS=1, 2, 8, 16) and input order (tokenizers 0.23): word counts are summed
before merging, and ties between equally frequent pairs are broken by token ids, which come from the sorted
initial byte alphabet. So training keeps all threads; callers still feed text in a fixed order, and the
mix test trains twice and compares the bytes.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tasks.core.files import write_text_atomic

log = logging.getLogger("forgeline.mix")
ENCODE_BATCH = 256  # documents per encode_batch call: big enough for threads, small enough for steady progress
PROGRESS_EVERY_S = 5.0
# BPE training costs (merges) x (length of every pre-token holding the merged pair): one 200,000-character
# "word" (a DNA sequence, a line of '=', unpunctuated Chinese) took 20-90 s at a 1,024 vocabulary, and 4x that
# length 16x the time. Training sees such a pre-token in pieces of this many characters; encoding is unchanged
# (byte-level BPE encodes any length). The embedded corpus's longest pre-token is 93 characters.
MAX_TRAIN_PIECE = 256
_MAYBE_LONG = re.compile(r"\S{%d,}|\s{%d,}" % (MAX_TRAIN_PIECE, MAX_TRAIN_PIECE))  # where one may be (a superset)
PARALLELISM = "TOKENIZERS_PARALLELISM"  # read by tokenizers on every batch call, not once at import
_serial = {"depth": 0, "saved": None}
_serial_lock = threading.Lock()


@contextmanager
def one_thread() -> Iterator[None]:
    """Inside, tokenizers encodes batches on the calling thread only (its Rust pool is switched off).

    Shard tasks run inside it: the executor's `workers` is then the stage's core count. Left on, every one of N
    pool workers fans each batch out over all cores, N x cores threads on a many-core node. Nested and
    concurrent uses (Dask threads of one worker process) are counted, so the switch is restored only when the
    last one leaves. The ids are the same either way (encoding does not depend on threads)."""
    with _serial_lock:
        if _serial["depth"] == 0:
            _serial["saved"] = os.environ.get(PARALLELISM)
            os.environ[PARALLELISM] = "false"
        _serial["depth"] += 1
    try:
        yield
    finally:
        with _serial_lock:
            _serial["depth"] -= 1
            if _serial["depth"] == 0:
                saved = _serial["saved"]
                if saved is None:
                    os.environ.pop(PARALLELISM, None)
                else:
                    os.environ[PARALLELISM] = saved


def new_byte_level_bpe() -> Tokenizer:
    """An untrained byte-level BPE: no normalizer (text is already cleaned), GPT-2 style pre-tokenizer."""
    tok = Tokenizer(models.BPE())
    # add_prefix_space=False: a leading space would be invented by encode and break the round trip.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts: Sequence[str], vocab_size: int, min_frequency: int,
                    special_tokens: list[str]) -> Tokenizer:
    """Train a byte-level BPE on `texts` (in the given order)."""
    tok = new_byte_level_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        # All 256 byte symbols up front, so text the sample never saw still encodes (no <unk>).
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    log.info("tokenizer: training a %d-token byte-level BPE on %d texts (one call, no progress until done)",
             vocab_size, len(texts))
    t0 = time.perf_counter()
    pieces, cut = training_pieces(tok, texts)
    if cut:
        log.info("tokenizer: %d pre-token(s) over %d characters were seen in pieces of that length", cut,
                 MAX_TRAIN_PIECE)
    tok.train_from_iterator(pieces, trainer=trainer, length=len(pieces))
    log.info("tokenizer: trained on %d texts (%s chars) in %.1fs, vocab %d", len(texts),
             f"{sum(map(len, texts)):,}", time.perf_counter() - t0, tok.get_vocab_size())
    return tok


def training_pieces(tok: Tokenizer, texts: Sequence[str], limit: int = MAX_TRAIN_PIECE) -> tuple[list[str], int]:
    """`texts` as BPE training sees them, and how many pre-tokens were cut: a pre-token (`tok`'s pre-tokenizer)
    longer than `limit` characters becomes pieces of `limit`, each its own text; the text around it is split off
    there, so every other pre-token and its count stay what they were (word counts are all BPE trains on). A
    text with no such pre-token is passed as it is: texts without one train the same tokenizer, byte for byte."""
    out: list[str] = []
    cut = 0
    for text in texts:
        if _MAYBE_LONG.search(text) is None:
            out.append(text)
            continue
        start = 0
        for _, (a, b) in tok.pre_tokenizer.pre_tokenize_str(text):   # character offsets
            if b - a > limit:
                out += [text[start:a]] if a > start else []
                out += [text[i:min(b, i + limit)] for i in range(a, b, limit)]
                start, cut = b, cut + 1
        out += [text[start:]] if start < len(text) else []
    return out, cut


def save_tokenizer(tok: Tokenizer, path: Path) -> None:
    """Write HF `tokenizer.json` (loadable by `Tokenizer.from_file` and transformers' PreTrainedTokenizerFast)."""
    write_text_atomic(path, tok.to_str(pretty=True) + "\n")


def load_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def document_encoder(tok: Tokenizer) -> Tokenizer:
    """A private copy of `tok` that encodes special-token strings *inside* a document (a doc about tokenizers
    may contain "<|endoftext|>") as plain text, so no document can forge a document boundary or a chat turn.
    A copy: the flag must not leak into saved files. Build it once per process and reuse it: every copy costs
    ~1 MB that tokenizers 0.23 never gives back."""
    enc = Tokenizer.from_str(tok.to_str())
    enc.encode_special_tokens = True
    return enc


def encode_documents(tok: Tokenizer, texts: Sequence[str], dtype: str, what: str = "documents",
                     encoder: Tokenizer | None = None) -> list[np.ndarray]:
    """Token ids of each text, as arrays of `dtype` (no end-of-document token: the packer adds it), encoded by
    `encoder` (from `document_encoder(tok)`) or a fresh one."""
    tok = encoder if encoder is not None else document_encoder(tok)
    out: list[np.ndarray] = []
    t0 = last = time.perf_counter()
    for start in range(0, len(texts), ENCODE_BATCH):
        batch = list(texts[start:start + ENCODE_BATCH])
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # _fast skips offsets (tokenizers ≥ 0.21)
        out.extend(np.asarray(e.ids, dtype=dtype) for e in encode(batch, add_special_tokens=False))
        if time.perf_counter() - last > PROGRESS_EVERY_S:
            log.info("tokenize %s: %d/%d", what, len(out), len(texts))
            last = time.perf_counter()
    log.info("tokenize %s: %d texts, %s tokens in %.1fs", what, len(out),
             f"{sum(len(a) for a in out):,}", time.perf_counter() - t0)
    return out


def roundtrip_ok(tok: Tokenizer, texts: Iterable[str]) -> bool:
    """decode(encode(x)) == x for every text (a cheap self-check of a byte-level tokenizer)."""
    return all(tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=False) == t for t in texts)


class CheckpointTokenizerError(ValueError):
    """A checkpoint folder's tokenizer cannot be used; the message names the file and field."""


PROBE_REPEATS = 48
PROBE_SECONDS = 0.25  # a sane tokenizer encodes a probe in microseconds; a backtracking one in ~1 s or panics


def refuse_backtracking(tok: Tokenizer, tok_file: Path) -> None:
    """Refuse a tokenizer whose normalizer or pre-tokenizer regex backtracks catastrophically (`(a+)+b`).

    tokenizers runs those patterns with Oniguruma, a backtracking engine: such a pattern costs ~1 s per text
    and then panics (`retry-limit-in-match over`, a BaseException that `except Exception` lets through), which
    mix met mid-stage on every text with a long run of one character. The probes are runs of each character
    the patterns name (and of a letter, a digit, a space, `!`), each alone and followed by each of them, so the
    classic `(x+)+y` and `(x+)+$` shapes show at load time (a heuristic: it cannot prove a regex linear)."""
    import json

    # each component's own JSON: serializing the whole tokenizer would also write out its vocabulary
    described = " ".join(part.__getstate__().decode() for part in (tok.normalizer, tok.pre_tokenizer) if part)
    patterns = re.findall(r'"Regex":\s*"((?:[^"\\]|\\.)*)"', described)
    chars = sorted({c for p in patterns for c in json.loads(f'"{p}"')} | set("a0 !"))[:64]
    for text in (c * PROBE_REPEATS + end for c in chars for end in ("", *chars)):  # a run, then a spoiler
        c = text[0]
        start = time.perf_counter()
        try:
            tok.encode(text)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 — pyo3's PanicException derives from BaseException
            raise CheckpointTokenizerError(f"{tok_file}: encoding {PROBE_REPEATS} × {c!r} failed ({exc}): a "
                                           "normalizer or pre-tokenizer regex backtracks without bound") from None
        took = time.perf_counter() - start
        if took > PROBE_SECONDS:
            raise CheckpointTokenizerError(f"{tok_file}: encoding {PROBE_REPEATS} × {c!r} took {took:.2f} s: a "
                                           "normalizer or pre-tokenizer regex backtracks catastrophically")


def _token_text(value: object) -> str | None:
    """tokenizer_config.json writes a special token as a string or as an AddedToken dict ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def checkpoint_tokenizer(folder: Path) -> tuple[Tokenizer, dict[str, int], str]:
    """A Hugging Face checkpoint's own tokenizer: (`tokenizer.json`, its special tokens by name → id, the end
    token). The end-of-document token is tokenizer_config.json's `eos_token`, else special_tokens_map.json's
    (older checkpoints keep it there, and transformers reads it), else config.json's `eos_token_id` (the first of a
    list); a tokenizer without one cannot separate packed documents and is refused."""
    import json

    tok_file, cfg_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not tok_file.is_file():
        slow = [p.name for p in (folder / "tokenizer.model", folder / "vocab.json") if p.is_file()]
        fix = (f"it has only {slow[0]}, a slow tokenizer: write tokenizer.json with transformers (needs "
               "sentencepiece for tokenizer.model) — AutoTokenizer.from_pretrained(folder).save_pretrained(folder) "
               "— and check it encodes as the slow one" if slow else "nor any tokenizer file")
        raise CheckpointTokenizerError(f"{tok_file}: missing (model.init.kind: hf uses the checkpoint's fast "
                                       f"tokenizer file); {fix}")
    try:
        tok = Tokenizer.from_file(str(tok_file))
    except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
        raise CheckpointTokenizerError(f"{tok_file}: not a readable tokenizers file: {exc}") from None
    refuse_backtracking(tok, tok_file)
    config = json.loads(cfg_file.read_text(encoding="utf-8")) if cfg_file.is_file() else {}
    specials: dict[str, int] = {}
    for field in ("bos_token", "eos_token", "pad_token", "unk_token"):
        text = _token_text(config.get(field))
        if text is None:
            continue
        tid = tok.token_to_id(text)
        if tid is None:
            raise CheckpointTokenizerError(f"{cfg_file}: {field} {text!r} is not a token of {tok_file.name}")
        specials[text] = tid
    eos = _token_text(config.get("eos_token"))
    legacy = folder / "special_tokens_map.json"  # transformers' fallback for tokenizer_config's special tokens
    if eos is None and legacy.is_file():
        eos = _token_text(json.loads(legacy.read_text(encoding="utf-8")).get("eos_token"))
        if eos is not None and tok.token_to_id(eos) is None:
            raise CheckpointTokenizerError(f"{legacy}: eos_token {eos!r} is not a token of {tok_file.name}")
        if eos is not None:
            specials[eos] = tok.token_to_id(eos)
    if eos is None:  # config.json's id; of a list (Llama 3.1 Instruct: end_of_text, eom, eot) the first
        model_cfg = folder / "config.json"
        eos_id = json.loads(model_cfg.read_text()).get("eos_token_id") if model_cfg.is_file() else None
        eos_id = eos_id[0] if isinstance(eos_id, list) and eos_id else eos_id
        if isinstance(eos_id, bool) or not isinstance(eos_id, int):
            raise CheckpointTokenizerError(f"{cfg_file}: no eos_token (nor eos_token_id in config.json): packed "
                                           "documents need an end token")
        # tokenizers takes ids as u32: -1 or 2**40 raised a bare OverflowError (and no vocabulary holds them)
        eos = tok.id_to_token(eos_id) if 0 <= eos_id < 1 << 32 else None
        if eos is None:
            raise CheckpointTokenizerError(f"{model_cfg}: eos_token_id {str(eos_id)[:40]} is not a token of "
                                           f"{tok_file.name}")
        specials[eos] = eos_id
    return tok, specials, eos


# What a checkpoint states besides its tokenizer that mix, pretrain and sft must respect: its context length.
def checkpoint_positions(folder: Path) -> tuple[int | None, str]:
    """(the checkpoint's context length, the words that say where it comes from): config.json's
    `max_position_embeddings`, else its family's default as transformers reads it (`stated_positions`). The file
    is read and the number checked as pretrain reads them (`hf_files`): `-5` (mix then packed sequences of -5
    tokens, forever), 2.5 (read as 2), `true` (as 1), `"abc"` or `[4]` is an HFImportError naming the key."""
    from tasks.train.hf.hf_families import stated_positions
    from tasks.train.hf.hf_files import check_config_int, read_json_object

    where = Path(folder) / "config.json"
    cfg = read_json_object(where, Path(folder))
    check_config_int(cfg, "max_position_embeddings", where)
    return stated_positions(cfg)


def max_positions(folder: Path) -> int | None:
    """The checkpoint's context length (`checkpoint_positions`; None only for a model_type with no known default).
    Before, a config.json without `max_position_embeddings` put no limit on seq_len at all."""
    return checkpoint_positions(folder)[0]


def fit_seq_len(seq_len: int, folder: Path, key: str, chosen: bool) -> int:
    """The sequence length to train at beside the checkpoint in `folder` (specs/init.py's rule): `seq_len` when
    it fits the checkpoint's positions; the checkpoint's length when `seq_len` is only the default; an error naming
    both when the user chose (`chosen`) a length the checkpoint was not trained for."""
    limit, how = checkpoint_positions(folder)
    if limit is None or seq_len <= limit:
        return seq_len
    if chosen:
        raise ValueError(f"{key}: {seq_len} is longer than the checkpoint's {how} {limit} "
                         f"({Path(folder) / 'config.json'}): its RoPE positions past {limit} were never trained; "
                         f"set {key} to at most {limit}")
    log.warning("%s: the default %d is longer than the checkpoint's max_position_embeddings %d; using %d",
                key, seq_len, limit, limit)
    return limit
