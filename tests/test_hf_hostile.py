"""Hostile Hugging Face checkpoint folders for `model.init.kind: hf`: absurd or mistyped config.json numbers,
oversized or malformed JSON, links out of the folder, forged safetensors headers and integer weights. Each is an
HFImportError naming the file (and the field or tensor), raised before anything is allocated or read whole.

The folder is made by transformers' own `save_pretrained` (tasks/train/hf/tiny_checkpoint.py), the safetensors
headers are rewritten in the published format (8-byte little-endian length, JSON header, data)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import pytest

from tasks.data.mixing.tokenizer import CheckpointTokenizerError, checkpoint_tokenizer
from tasks.train.hf.hf_families import HFImportError
from tasks.train.hf.hf_files import check_checkpoint_files
from tasks.train.hf.hf_import import hf_model_config, load_hf_state, read_slice


@pytest.fixture(scope="module")
def good(tiny_hf_folder) -> Path:
    return tiny_hf_folder


@pytest.fixture
def copy(good, tmp_path):
    def make(name: str = "ckpt") -> Path:
        return Path(shutil.copytree(good, tmp_path / name))
    return make


def load(folder: Path):
    return load_hf_state(folder, hf_model_config(folder, 64))


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **changes}))  # json writes NaN/Infinity as HF's do


def test_the_untouched_folder_loads(good):
    assert load(good)["layers.0.weight"].shape[1] == 64


@pytest.mark.parametrize("changes, message", [
    ({"vocab_size": 10**12}, "`vocab_size` must be an integer in 1..4194304, got 1000000000000"),
    ({"hidden_size": 0}, "`hidden_size` must be an integer in 1.."),
    ({"num_attention_heads": 0}, "`num_attention_heads` must be an integer in 1.."),  # was ZeroDivisionError
    ({"num_hidden_layers": -1}, "`num_hidden_layers` must be an integer in 1.."),
    ({"vocab_size": "lots"}, "`vocab_size` must be an integer in 1..4194304, got 'lots'"),  # was int() ValueError
    ({"vocab_size": True}, "got True"),          # was read as 1
    ({"vocab_size": 300.5}, "got 300.5"),         # was truncated to 300
    ({"hidden_size": float("inf")}, "got inf"),  # was OverflowError
    ({"intermediate_size": 10**9}, "`intermediate_size` must be an integer in 1..1048576"),
    ({"num_key_value_heads": -2}, "`num_key_value_heads` must be an integer"),
    ({"rms_norm_eps": float("nan")}, "`rms_norm_eps` must be a positive finite number, got nan"),  # was accepted
    ({"rope_theta": float("inf")}, "`rope_theta` must be a positive finite number, got inf"),     # was accepted
    ({"rope_scaling": {"rope_type": "linear", "factor": float("nan")}}, "`rope_scaling.factor` must be a finite"),
    ({"rope_scaling": {"rope_type": "linear", "factor": "x"}}, "a field cannot be read"),
    ({"model_type": ["llama"]}, "model_type `['llama']` is not supported"),
])
def test_absurd_config_numbers_are_refused_naming_the_field(copy, changes, message):
    folder = copy()
    edit_config(folder, **changes)
    with pytest.raises(HFImportError, match="config.json: ") as err:
        hf_model_config(folder, 64)
    assert message in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON (line 1, column 2"),
    ("[1, 2]", "must be a JSON object, got list"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (b"\xff\xfe{}", "not UTF-8 text"),
])
def test_malformed_config_json_is_refused_naming_it(copy, text, message):
    folder = copy()
    (folder / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(HFImportError, match="config.json: ") as err:
        hf_model_config(folder, 64)
    assert message in str(err.value)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "tokenizer.json"])
def test_an_oversized_file_is_refused_by_its_size_without_reading_it(copy, name):
    folder = copy()
    with open(folder / name, "r+b") as f:
        f.truncate(600 * 1024 * 1024)  # sparse: costs no disk, and reading it whole took ~1 GB before
    start = time.perf_counter()
    with pytest.raises(HFImportError, match=f"{name}: 629145600 bytes, over the"):
        check_checkpoint_files(folder)
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("name, target", [("config.json", "/etc/passwd"), ("tokenizer.json", "/etc/hostname"),
                                          ("model.safetensors", "/dev/zero"), ("chat_template.jinja", "/etc/passwd")])
def test_a_link_out_of_the_folder_is_refused_without_reading_it(copy, name, target):
    folder = copy()
    (folder / name).unlink(missing_ok=True)
    os.symlink(target, folder / name)
    with pytest.raises(HFImportError, match=f"{name}: symbolic link to {target}, outside the checkpoint folder"):
        check_checkpoint_files(folder)


def test_a_device_file_is_refused(copy):
    folder = copy()
    (folder / "tokenizer_config.json").unlink()
    os.mkfifo(folder / "tokenizer_config.json")  # opening a FIFO would block forever
    with pytest.raises(HFImportError, match="not a regular file"):
        check_checkpoint_files(folder)


def test_a_hub_cache_snapshot_of_links_into_blobs_loads(good, tmp_path):
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(good.iterdir())):
        shutil.copy(file, repo / "blobs" / f"sha{i}")
        os.symlink(f"../../blobs/sha{i}", snapshot / file.name)  # the layout huggingface_hub writes
    check_checkpoint_files(snapshot)
    assert load(snapshot)["layers.0.weight"].shape[1] == 64


def rewrite_header(folder: Path, edit=None, length: int | None = None) -> None:
    path = folder / "model.safetensors"
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    if edit:
        edit({k: v for k, v in header.items() if k != "__metadata__"})
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def first(tensors: dict) -> dict:
    return tensors[sorted(tensors)[0]]


def last(tensors: dict) -> dict:
    return tensors[sorted(tensors)[-1]]


@pytest.mark.parametrize("edit, length, message", [
    (None, 2**40, "header too large"),  # a header "of a terabyte"
    (lambda h: first(h).update(shape=[2**40, 2**40]), None, "overflow computing buffer size"),
    (lambda h: last(h).update(data_offsets=[last(h)["data_offsets"][0], last(h)["data_offsets"][1] + 10**12]), None,
     "invalid"),
    # overlapping: safetensors words it "invalid offset" or "invalid shape, data type, or offset" by which check
    # trips first, so only the word both share is asserted
    (lambda h: last(h).update(data_offsets=first(h)["data_offsets"]), None, "offset"),
])
def test_a_forged_safetensors_header_is_refused_naming_the_file(copy, edit, length, message):
    folder = copy()
    rewrite_header(folder, edit, length)
    with pytest.raises(HFImportError, match="model.safetensors: not a valid safetensors file") as err:
        load(folder)
    assert message in str(err.value)


def test_integer_weights_are_refused_not_cast(copy):
    folder = copy()

    def as_int(header):
        for meta in header.values():
            meta["dtype"] = "I32" if meta["dtype"] == "F32" else meta["dtype"]
    rewrite_header(folder, as_int)
    with pytest.raises(HFImportError, match="is stored as torch.int32, not a floating-point type"):
        load(folder)
    with pytest.raises(HFImportError, match="is stored as torch.int32"):
        read_slice(folder, "lm_head.weight", 0, 0, 2)


def with_split_first(folder: Path, pattern: str) -> None:
    """Put a Split on `pattern` before the checkpoint's own pre-tokenizer (the published tokenizer.json form)."""
    data = json.loads((folder / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        data["pre_tokenizer"]]}
    (folder / "tokenizer.json").write_text(json.dumps(data))


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"(\w+\s?)+$"])
def test_a_catastrophically_backtracking_tokenizer_regex_is_refused_at_load(copy, pattern):
    folder = copy()
    with_split_first(folder, pattern)
    start = time.perf_counter()
    with pytest.raises(CheckpointTokenizerError, match="regex backtracks"):
        checkpoint_tokenizer(folder)  # before: mix panicked (pyo3 PanicException) on the first long run of "a"
    assert time.perf_counter() - start < 10


def test_published_split_regexes_pass_the_backtracking_probe(copy):
    folder = copy()
    # GPT-4's / Llama 3's pre-tokenizer pattern (as in their tokenizer.json) and Qwen2's digit split
    with_split_first(folder, r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                             r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok, _, _ = checkpoint_tokenizer(folder)
    assert tok.encode("aaaa 1234 hello").ids


def test_malformed_tokenizer_config_is_refused_naming_it(copy):
    folder = copy()
    (folder / "tokenizer_config.json").write_text("{bad")  # was a bare JSONDecodeError from mix
    with pytest.raises(HFImportError, match="tokenizer_config.json: not valid JSON"):
        check_checkpoint_files(folder)
