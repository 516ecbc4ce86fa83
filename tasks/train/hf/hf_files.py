"""Guards for the files of a Hugging Face checkpoint folder, applied before any of them is parsed or allocated.

A downloaded folder is untrusted input. Before forgeline reads it (mix reads its tokenizer, pretrain its
config.json and weights):
- every file it may read must be a regular file in the folder, or a link into the folder or, for a hub cache
  snapshot (`<repo>/snapshots/<rev>/` linking to `<repo>/blobs/`), into that repo's cache folder — the rule of
  ingest's `symlinks: inside` — so a `config.json -> /etc/passwd` or `model.safetensors -> /dev/zero` is refused
  without being opened;
- a JSON or template file must be under a size cap (a 2 GB config.json was read whole, 1 GB of memory) and parse
  as a JSON object (malformed ones raised bare JSONDecodeError/AttributeError from the reader that met them);
- config.json's shape numbers must be positive integers within caps (10^12 vocab rows, zero heads, `"lots"`,
  `true`, 300.5, NaN and infinities were refused late, obscurely or not at all); RoPE's theta, factors and
  original context positive and finite wherever they are written (`rope_parameters.rope_theta: -5` gave NaN
  frequencies, a 400-digit theta an OverflowError); its switches real JSON booleans (`"false"` read as true);
- a number no float can hold or an integer of over 4300 digits (Python's int-parsing limit) is refused naming
  the file, not raised as a bare OverflowError/ValueError from the line that met it.
Safetensors headers are the library's to check (header length, offsets, shape overflow: it refuses them
without allocating); `open_weights` turns its error into one naming the file, and `float_weight` refuses a
weight stored as integers, booleans or float8 (it would be cast to floats silently, scales dropped).
"""

from __future__ import annotations

import json
import math
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tasks.train.hf.hf_families import HFImportError

JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
              "model.safetensors.index.json")
# Published files are far below these: config.json ~1 KB, an index ~100 KB to 9 MB, tokenizer.json 2-35 MB
# (Gemma 3's 262k-token vocab). The caps bound what a hostile file costs, not what a real one needs.
SMALL_CAP = 4 * 1024 * 1024
INDEX_CAP = 64 * 1024 * 1024  # a sharded index lists every tensor: ~9 MB for DeepSeek-V3's 90k
TOKENIZER_CAP = 512 * 1024 * 1024
# Shape caps, well above any published model (Llama 3.1 405B: hidden 16384, FFN 53248, 126 layers, 128 heads;
# Gemma 3: 262144 tokens; Llama 4: 10M positions): a number past them is a broken or hostile file.
INT_CAPS = {"vocab_size": 1 << 22, "hidden_size": 1 << 17, "intermediate_size": 1 << 20,
            "num_hidden_layers": 1 << 12, "num_attention_heads": 1 << 12, "num_key_value_heads": 1 << 12,
            "head_dim": 1 << 14, "max_position_embeddings": 1 << 27, "sliding_window": 1 << 27,
            "max_window_layers": 1 << 12}
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
POSITIVE_FLOATS = ("rms_norm_eps", "rope_theta")
# RoPE entries that divide or take logs: 0 or a negative one gives inf/NaN frequencies (`factor: 0`), or a math
# domain error mid-training (yarn's `original_max_position_embeddings: -512`). null means "derived" (yarn's factor).
POSITIVE_ROPE = ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                 "attention_factor")
# Switches transformers reads as real booleans: a string "false" is truthy in Python (it was read as true).
BOOLEANS = ("tie_word_embeddings", "use_sliding_window", "attention_bias", "mlp_bias")
ROPE_BOOLEANS = ("truncate",)


def link_roots(folder: Path) -> list[Path]:
    """Where a link in `folder` may point: the folder and, in a hub cache snapshot, the repo's cache folder (the
    rule of ingest's `symlinks: inside`, kept here so that the training stages need no corpus reader)."""
    roots = [folder.resolve()]
    for up in (folder, *folder.absolute().parents):
        if up.name == "snapshots" and (up.parent / "blobs").is_dir():
            return roots + [up.parent.resolve()]
    return roots


def checked_file(path: Path, folder: Path, cap: int | None = None) -> Path:
    """`path` if it is a regular file in `folder` (or a link into it or its hub cache) and under `cap` bytes."""
    if path.is_symlink():
        target = path.resolve()
        roots = link_roots(Path(folder))
        if not any(target.is_relative_to(r) for r in roots):
            raise HFImportError(f"{path}: symbolic link to {target}, outside the checkpoint folder "
                                f"({', '.join(map(str, roots))}): refused, not read")
    try:
        info = path.stat()
    except OSError as exc:
        raise HFImportError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise HFImportError(f"{path}: not a regular file (a device, pipe or folder): refused, not read")
    if cap is not None and info.st_size > cap:
        raise HFImportError(f"{path}: {info.st_size} bytes, over the {cap}-byte cap for this file: refused, not "
                            "read (a published one is far smaller)")
    return path


def read_json_object(path: Path, folder: Path, hook: Any = None) -> dict[str, Any]:
    """A checkpoint's JSON file as a dict, after `checked_file`; malformed text is an HFImportError naming it."""
    text = checked_file(path, folder, INDEX_CAP if path.name.endswith(".index.json") else SMALL_CAP).read_bytes()
    try:
        data = json.loads(text.decode("utf-8"), object_pairs_hook=hook)
    except UnicodeDecodeError as exc:
        raise HFImportError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise HFImportError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except HFImportError:  # the hook's own refusal (a key listed twice), already naming the file
        raise
    except ValueError as exc:  # an integer of over 4300 digits: Python's int-parsing limit, not JSON's
        raise HFImportError(f"{path}: a number in it cannot be read ({str(exc)[:80]})") from None
    except RecursionError:
        raise HFImportError(f"{path}: nested too deeply") from None
    if not isinstance(data, dict):
        raise HFImportError(f"{path}: must be a JSON object, got {type(data).__name__}")
    return data


def check_checkpoint_files(folder: Path) -> None:
    """Refuse the folder if any file forgeline may read from it breaks the rules above (nothing is parsed beyond
    the small JSON files; weights and tokenizer.json are only stat'ed)."""
    folder = Path(folder)
    for name in JSON_FILES:
        if (folder / name).is_symlink() or (folder / name).exists():
            read_json_object(folder / name, folder)
    for name in ("tokenizer.json", "chat_template.jinja"):
        if (folder / name).is_symlink() or (folder / name).exists():
            checked_file(folder / name, folder, TOKENIZER_CAP if name == "tokenizer.json" else SMALL_CAP)
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("additional_chat_templates/*.jinja")):
        checked_file(path, folder, SMALL_CAP if path.suffix == ".jinja" else None)


def check_config_numbers(cfg: dict[str, Any], where: Path) -> None:
    """config.json's shape numbers: integers (not booleans, not 300.5) in 1..cap (`max_window_layers` from 0),
    `null` where the family derives them; eps and RoPE theta positive and finite; every number in
    `rope_scaling`/`rope_parameters` finite, its theta, factors and original context positive; switches
    (`tie_word_embeddings`, ...) true, false or null."""
    for key in INT_CAPS:
        check_config_int(cfg, key, where)
    for key in POSITIVE_FLOATS:
        value = cfg.get(key)
        if value is not None and not _finite(value, positive=True):
            raise HFImportError(f"{where}: `{key}` must be a positive finite number, got {value!r:.60}")
    for key in BOOLEANS:
        if cfg.get(key) is not None and not isinstance(cfg[key], bool):
            raise HFImportError(f"{where}: `{key}` must be true or false, got {cfg[key]!r:.60}")
    for key in ("rope_scaling", "rope_parameters"):
        section = cfg.get(key)
        if isinstance(section, dict):
            check_rope_numbers(section, f"{where}: `{key}.")


def check_config_int(cfg: dict[str, Any], key: str, where: Path) -> int | None:
    """`cfg[key]` if it is an integer (not a boolean, not 300.5) in 1..`INT_CAPS[key]` (`max_window_layers` from
    0); None when it is absent or null and the model may derive it. E.g. `max_position_embeddings: -5` is
    refused here, where mix had packed sequences of -5 tokens forever."""
    value, cap = cfg.get(key), INT_CAPS[key]
    if value is None and key not in REQUIRED:
        return None
    low = 0 if key == "max_window_layers" else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= cap:
        raise HFImportError(f"{where}: `{key}` must be an integer in {low}..{cap}, got {value!r:.60}")
    return value


def check_rope_numbers(section: dict[str, Any], what: str) -> None:
    """A RoPE dict (`what`: "<file>: `rope_parameters." to name an entry): numbers finite, `POSITIVE_ROPE` ones
    positive (a boolean is not a number there), `truncate` a boolean. A string is left to the reader, which
    refuses it ("a field cannot be read")."""
    bad = [k for k, v in section.items() if not isinstance(v, (bool, str, type(None), list, dict))
           and not _finite(v)]
    if bad:
        raise HFImportError(f"{what}{bad[0]}` must be a finite number, got {section[bad[0]]!r:.60}")
    for k in POSITIVE_ROPE:
        value = section.get(k)
        if value is not None and not isinstance(value, str) and not _finite(value, positive=True):
            raise HFImportError(f"{what}{k}` must be a positive finite number, got {value!r:.60}")
    for k in ROPE_BOOLEANS:
        if section.get(k) is not None and not isinstance(section[k], bool):
            raise HFImportError(f"{what}{k}` must be true or false, got {section[k]!r:.60}")


def _finite(value: Any, positive: bool = False) -> bool:
    """A real number (not a boolean) a float can hold, finite (and > 0 when `positive`): a 400-digit integer is
    not one (`math.isfinite` raised OverflowError on it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and (number > 0 or not positive)


@contextmanager
def open_weights(path: Path) -> Iterator[Any]:
    """`safetensors.safe_open(path)`, its refusals (header too large, offsets out of range or overlapping, shape
    overflow, a truncated file: checked before anything is allocated) raised as errors naming the file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            yield f
    except SafetensorError as exc:
        raise HFImportError(f"{path}: not a valid safetensors file ({exc})") from None


def float_weight(path: Path, name: str, tensor: Any) -> Any:
    """`tensor` if it holds floating-point values of 16 bits or more; integer, boolean and float8 weights would be
    cast silently."""
    if not tensor.is_floating_point():
        raise HFImportError(f"{path}: `{name}` is stored as {tensor.dtype}, not a floating-point type: a weight "
                            "of this checkpoint cannot be read from it")
    if tensor.element_size() < 2:  # float8 (and narrower): quantized values whose scale tensors would be dropped
        raise HFImportError(f"{path}: `{name}` is stored as {tensor.dtype}, a quantized 8-bit float whose scales "
                            "(e.g. `weight_scale_inv`) forgeline does not apply: use the unquantized checkpoint")
    return tensor
