"""Hugging Face checkpoints in: `config.json` -> `ModelConfig`, safetensors weights -> the plain model's state dict.

Supported `model_type`s: `llama` (GQA, tied or untied head), `mistral` (sliding window), `qwen2` (q/k/v biases),
`qwen3` (q/k RMSNorm, explicit `head_dim`), each with RoPE scaling `linear`, `dynamic`, `llama3` or `yarn`; and
`phi3` (Phi-3-mini/medium-4k, Phi-4: fused `qkv_proj` / `gate_up_proj`, optional sliding window, plain RoPE
only); each key read as transformers reads that family's file (`hf_families`: class defaults, ignored keys,
window and RoPE rules).
Everything else — another model_type, another RoPE scaling (Phi-3's longrope included), an activation other than
SiLU, llama's MLP or attention biases, per-layer sliding windows, Phi-3 dropouts above 0, kv heads not dividing
the heads, a quantized checkpoint (`quantization_config`, float8 weights), a class other than `...ForCausalLM`,
a pickle checkpoint (`pytorch_model.bin`, refused and never unpickled), a missing or misshapen weight (on every
load path: `check_shapes`) — fails before any training with a message naming the file and the field or tensor.
Where transformers' loader decides, forgeline decides alike: a folder holding model.safetensors and an index
loads model.safetensors; `tie_word_embeddings: true` beside a stored `lm_head.weight` that differs from the
embedding is read untied, with that head.

Weights are read tensor by tensor with `safetensors.safe_open` (one file of a sharded checkpoint open at a
time, only the tensors asked for), in the checkpoint's own dtype; `read_slice` reads a row or column range of
one tensor without loading the rest — the primitive a tensor-parallel rank uses to read only its share. A fused
Phi-3 tensor is read once and split into forgeline's q/k/v (gate/up) tensors by its rows (`hf_export.hf_refs`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import torch

from specs.architecture import ModelConfig
from tasks.train.hf.hf_export import HFRef, hf_refs, key_map
from tasks.train.hf.hf_files import (check_checkpoint_files, check_config_numbers, checked_file, float_weight,
                                     open_weights, read_json_object)
from tasks.train.hf.hf_families import (EPS, SUPPORTED, HFImportError, family_value, refuse_unsupported,
                                           rope_fields, sliding_window)

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
HEAD_BLOCK = 1 << 24  # elements of the head and the table compared at a time (64 MiB each in fp32)
PICKLES = ("*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt")  # never opened: unpickling can run code


def _field(cfg: dict[str, Any], key: str, where: Path) -> Any:
    if cfg.get(key) is None:
        raise HFImportError(f"{where}: required field `{key}` is missing")
    return cfg[key]


def hf_model_config(folder: Path, seq_len: int | None = None) -> ModelConfig:
    """The ModelConfig of the checkpoint in `folder` (seq_len: the training length; default its
    `max_position_embeddings`), each field as transformers' class of its model_type reads it (`hf_families`)."""
    where = Path(folder) / "config.json"
    if not where.exists() and not where.is_symlink():
        raise HFImportError(f"{where} not found: not a Hugging Face model folder")
    check_checkpoint_files(Path(folder))
    cfg = read_json_object(where, Path(folder))
    kind = cfg.get("model_type")
    if kind not in SUPPORTED:
        raise HFImportError(f"{where}: model_type `{str(kind)[:60]}` is not supported (supported: "
                            f"{', '.join(SUPPORTED)})")
    check_config_numbers(cfg, where)  # first: `mlp_bias: "false"` is a string, not the unsupported true
    refuse_unsupported(cfg, kind, where)
    if cfg.get("tie_word_embeddings") and head_stored_apart(Path(folder)):
        # transformers 5 ties the head to the embedding only when the files store no other head (`tie_weights`
        # keeps a stored lm_head.weight that differs, warning "we will NOT tie them"): read it as transformers runs it
        cfg = {**cfg, "tie_word_embeddings": False}
    try:
        return _model_config(cfg, kind, where, seq_len)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:  # a RoPE field of the wrong type
        if isinstance(exc, HFImportError):
            raise
        raise HFImportError(f"{where}: a field cannot be read ({exc})") from None


def _model_config(cfg: dict[str, Any], kind: str, where: Path, seq_len: int | None) -> ModelConfig:
    d, heads = int(_field(cfg, "hidden_size", where)), int(_field(cfg, "num_attention_heads", where))
    kv_heads = int(family_value(cfg, kind, "num_key_value_heads") or heads)
    if heads % kv_heads:  # else no whole number of query heads shares a kv head: a shape error at the first step
        raise HFImportError(f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
                            f"{kv_heads} (as read for {kind}): grouped-query attention needs it")
    head_dim = int(family_value(cfg, kind, "head_dim") or d // heads)
    positions = int(family_value(cfg, kind, "max_position_embeddings"))
    rope = rope_fields(cfg, where, positions)
    if rope.get("rope_type") == "dynamic" and (seq_len or positions) > positions:
        raise HFImportError(f"{where}: dynamic RoPE scaling changes the frequencies past max_position_embeddings "
                            f"{positions}; training at {seq_len} positions is not supported")
    return ModelConfig(
        vocab_size=int(_field(cfg, "vocab_size", where)), seq_len=int(seq_len or positions),
        n_layers=int(_field(cfg, "num_hidden_layers", where)), n_heads=heads,
        n_kv_heads=kv_heads, d_model=d,
        ffn_hidden=int(_field(cfg, "intermediate_size", where)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        norm_eps=float(family_value(cfg, kind, "rms_norm_eps") or EPS),
        init_std=float(cfg.get("initializer_range", 0.02)),
        explicit_head_dim=head_dim if head_dim != d // heads else None, attn_bias=kind == "qwen2",
        qk_norm=kind == "qwen3", sliding_window=sliding_window(cfg, kind, where), hf_model_type=kind, **rope)


def weight_files(folder: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file holding it (`indexed_files` for a sharded checkpoint); a folder of
    pickles only (`pytorch_model.bin`, its shards and index, `*.pt`, `*.pth`) is refused by name, never opened.
    A folder holding both model.safetensors and an index loads model.safetensors, as transformers does (it looks
    for the single file first), so forgeline starts from the model transformers would run."""
    folder = Path(folder)
    if (folder / SINGLE).exists():
        with open_weights(checked_file(folder / SINGLE, folder)) as f:  # a link out of the folder: refused
            return {name: folder / SINGLE for name in f.keys()}
    if (folder / INDEX).exists():
        return indexed_files(folder)
    pickles = sorted({p.name for pattern in PICKLES for p in folder.glob(pattern)})
    if pickles:
        raise HFImportError(f"{folder / pickles[0]}: pickle checkpoints are refused (loading one can run code, and "
                            "forgeline never unpickles); convert it to safetensors first, e.g. with transformers: "
                            "AutoModelForCausalLM.from_pretrained(folder).save_pretrained(folder) where you trust "
                            "the file")
    raise HFImportError(f"{folder}: no {SINGLE} or {INDEX}")


def _unique_keys(pairs: list[tuple[str, Any]], where: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen and seen[key] != value:
            raise HFImportError(f"{where}: `{key}` is listed twice, in {seen[key]} and {value}")
        seen[key] = value
    return seen


def shard_file(folder: Path, file: str, where: Path, tensor: str) -> Path:
    """`folder / file` for an index's `weight_map` entry that is a plain file name (as every published index
    writes, `model-00001-of-00004.safetensors`): `../elsewhere/w.safetensors`, an absolute path or a sub-folder
    would make the folder's weights read from outside it, so they are refused naming the index and the tensor.
    Links are `checked_file`'s to judge when the shard is opened."""
    if not isinstance(file, str):
        raise TypeError(f"`{tensor}` maps to {file!r:.60}, not a file name")
    if file in ("", ".", "..") or Path(file).name != file or "\\" in file:
        raise HFImportError(f"{where}: `{tensor}` is listed in {file!r:.100}, not a file name in the checkpoint "
                            f"folder: an index may name only the folder's own shards")
    return folder / file


def indexed_files(folder: Path) -> dict[str, Path]:
    """A sharded checkpoint's tensor -> shard map, as its index states it and the shards' own headers confirm:
    a shard the index lists that is not there, a tensor listed in two shards or stored in two, and a tensor
    listed in a shard that does not hold it are each refused naming the index, the shard and the tensor (the
    index alone would let the first two fail mid-load and the third pick one copy silently); so is a shard
    outside the folder (`shard_file`, `checked_file`: `"../elsewhere/w.safetensors"` was read)."""
    where = folder / INDEX
    index = read_json_object(where, folder, hook=lambda pairs: _unique_keys(pairs, where))
    try:
        listed = {name: shard_file(folder, file, where, name) for name, file in index["weight_map"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise HFImportError(f"{where}: not a safetensors index with a `weight_map` ({exc!r})") from None
    stored: dict[str, Path] = {}
    firsts: dict[Path, str] = {}  # a tensor each shard is listed for, to name in an error
    for name, shard in listed.items():
        firsts.setdefault(shard, name)
    for shard, first in sorted(firsts.items()):
        if not shard.is_file() and not shard.is_symlink():
            raise HFImportError(f"{where}: lists shard {shard.name} (e.g. for `{first}`), which is not in {folder}")
        try:
            checked_file(shard, folder)  # a link out of the folder (whatever its name) is refused unopened
        except HFImportError as exc:
            raise HFImportError(f"{where}: lists shard {shard.name} (e.g. for `{first}`): {exc}") from None
        with open_weights(shard) as f:
            for name in f.keys():
                if name in stored:
                    raise HFImportError(f"{where}: `{name}` is stored in two shards, {stored[name].name} and "
                                        f"{shard.name}: which copy is the weight is ambiguous")
                stored[name] = shard
    wrong = sorted(name for name, shard in listed.items() if stored.get(name) != shard)
    if wrong:
        raise HFImportError(f"{where}: lists `{wrong[0]}` in {listed[wrong[0]].name}, which does not hold it "
                            f"({len(wrong)} such tensors)")
    return listed


def missing_weights(folder: Path, files: dict[str, Path], mapping: dict[str, str], tied: bool) -> None:
    """Raise, naming the first, when a weight the config implies is in none of `files`; a missing
    `lm_head.weight` beside `tie_word_embeddings` false says which key would make the checkpoint load."""
    missing = [hf for hf in dict.fromkeys(mapping.values()) if hf not in files]  # a fused tensor named once
    if not missing:
        return
    hint = ""
    if "lm_head.weight" in missing and not tied:
        hint = ("; config.json's tie_word_embeddings is false (or absent: false for these families), so the head "
                "must be stored — if this model's head is its embedding, the file must say tie_word_embeddings true")
    raise HFImportError(f"{folder}: weight `{missing[0]}` is missing ({len(missing)} missing in all){hint}")


def iter_tensors(folder: Path, names: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for `names`, reading each safetensors file once, one tensor in memory at a time."""
    files = weight_files(folder)
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for file, wanted in sorted(by_file.items()):
        with open_weights(file) as f:
            for name in wanted:
                yield name, float_weight(file, name, f.get_tensor(name))


def read_slice(folder: Path, name: str, dim: int, start: int, stop: int) -> torch.Tensor:
    """Rows (dim 0) or columns (dim 1) [start, stop) of tensor `name`, without reading the rest of it."""
    file = weight_files(folder)[name]
    with open_weights(file) as f:
        part = f.get_slice(name)
        return float_weight(file, name, part[start:stop] if dim == 0 else part[:, start:stop])


def check_shapes(cfg: ModelConfig, files: dict[str, Path]) -> dict[str, list[tuple[str, HFRef]]]:
    """Every tensor the config implies (after `missing_weights`) has the shape it implies, read from the files'
    headers only; a mismatch is refused naming the file and the HF tensor (a fused one with its parts), on
    every load path (`load_hf_state`, training's `init_weights.HFSource`). Returns HF name -> the (our key, ref)
    pairs it holds."""
    from tasks.train.modeling.model import Transformer

    with torch.device("meta"):  # the shapes the config implies, without materialising any weight
        shapes = {k: tuple(v.shape) for k, v in Transformer(cfg, 0).state_dict().items()}
    held: dict[str, list[tuple[str, HFRef]]] = {}
    for ours, ref in hf_refs(cfg).items():
        held.setdefault(ref.name, []).append((ours, ref))
    by_file: dict[Path, list[str]] = {}
    for hf in sorted(held):
        by_file.setdefault(files[hf], []).append(hf)
    for file, names in sorted(by_file.items()):
        with open_weights(file) as f:
            for hf in names:
                got, want = tuple(f.get_slice(hf).get_shape()), hf_shape(held[hf], shapes)
                if got != want:
                    fused = f" (rows of {', '.join(o.rsplit('.', 2)[-2] for o, _ in held[hf])} stacked)" \
                        if len(held[hf]) > 1 else ""
                    raise HFImportError(f"{file}: `{hf}` has shape {got}, config.json implies {want}{fused}")
    return held


def load_hf_state(folder: Path, cfg: ModelConfig, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The plain model's state dict from the checkpoint (in `dtype`, default the checkpoint's own), after
    checking every tensor the config implies is there with the shape it implies (a fused one whole, then split)."""
    files = weight_files(folder)
    missing_weights(folder, files, key_map(cfg), cfg.tie_embeddings)
    held = check_shapes(cfg, files)
    state: dict[str, torch.Tensor] = {}
    for hf, tensor in iter_tensors(folder, sorted(held)):
        for ours, ref in held[hf]:
            part = tensor if ref.stop is None else tensor[ref.start:ref.stop].clone()  # no storage shared by parts
            state[ours] = part if dtype is None else part.to(dtype)
    return state


def head_stored_apart(folder: Path) -> bool:
    """Whether the folder's weights hold an `lm_head.weight` whose values differ from `model.embed_tokens.weight`
    (compared as transformers' `tie_weights` does, exactly, in row blocks so that no whole table is held twice);
    False when it stores no head or no weights yet (loading them refuses such a folder)."""
    if not (folder / SINGLE).exists() and not (folder / INDEX).exists():
        return False
    files = weight_files(folder)
    head, table = "lm_head.weight", "model.embed_tokens.weight"
    if head not in files or table not in files:
        return False
    with open_weights(files[head]) as fh, open_weights(files[table]) as ft:
        a, b = fh.get_slice(head), ft.get_slice(table)
        shape = tuple(a.get_shape())
        if shape != tuple(b.get_shape()) or len(shape) != 2:  # not the table's: the shape check names it
            return True
        step = max(1, HEAD_BLOCK // max(1, shape[1]))
        for start in range(0, shape[0], step):
            x, y = a[start:start + step], b[start:start + step]
            common = torch.promote_types(x.dtype, y.dtype)
            if not torch.equal(x.to(common), y.to(common)):
                return True
    return False


def hf_shape(held: list[tuple[str, HFRef]], shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of the HF tensor holding `held` ((our key, ref) pairs): our tensor's, or for a fused one its
    parts' rows stacked."""
    (ours, ref), *_ = held
    return shapes[ours] if ref.rows is None else (ref.rows, *shapes[ours][1:])
