"""Hostile Hugging Face checkpoint folders met by mix and pretrain after the first hardening (test_hf_hostile.py):
a context length that is not a positive integer, an index naming shards outside the folder, integer weights on
the per-rank loading path, RoPE numbers that give NaN frequencies, string booleans, and numbers Python cannot
hold. Each is refused naming the file and the key (or the index entry / tensor) before any training, where
before it hung mix, read files outside the folder, cast silently or raised a bare traceback.

The folder is made by transformers' own `save_pretrained` (tasks/train/hf/tiny_checkpoint.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specs.init import ModelInitSpec
from specs.mix import MixJob
from tasks.core.runner import StagePaths
from tasks.data.mixing.packing import PackWriter
from tasks.data.mixing.tokenizer import CheckpointTokenizerError, checkpoint_tokenizer, fit_seq_len
from tasks.mix import fit_checkpoint
from tasks.train.checkpointing.init_weights import HFSource
from tasks.train.hf.hf_export import key_map
from tasks.train.hf.hf_families import HFImportError
from tasks.train.hf.hf_files import check_checkpoint_files
from tasks.train.hf.hf_import import hf_model_config, weight_files


@pytest.fixture(scope="module")
def good(tiny_hf_folder) -> Path:
    return tiny_hf_folder


@pytest.fixture
def copy(good, tmp_path):
    return Path(shutil.copytree(good, tmp_path / "ckpt"))


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **changes}))


def raw_config_entry(folder: Path, key: str, literal: str) -> None:
    """Add `"key": <literal>` as raw JSON text (a 400-digit number json.dumps would not write from a float)."""
    text = (folder / "config.json").read_text().rstrip().rstrip("}")
    (folder / "config.json").write_text(f'{text}, "{key}": {literal}}}')


# ------------------------------------------------------------------------- 1: context length, packing
@pytest.mark.parametrize("value", [-5, 0, 2.5, True, "abc", [4], 1e300])
def test_a_context_length_that_is_not_a_positive_integer_is_refused_by_mix(copy, tmp_path, value):
    """-5 became mix's seq_len and PackWriter wrote empty shards forever; 2.5 read as 2, true as 1; "abc" and
    [4] raised a bare ValueError/TypeError."""
    edit_config(copy, max_position_embeddings=value)
    message = r"config.json: `max_position_embeddings` must be an integer in 1\.\."
    with pytest.raises(HFImportError, match=message):
        fit_seq_len(1024, copy, "mix.seq_len", False)
    job = MixJob(val_fraction=0.1, model_init=ModelInitSpec(kind="hf", path=str(copy)))
    with pytest.raises(HFImportError, match=message):
        fit_checkpoint(job, StagePaths(root=tmp_path, stage="mix", seed=1))


def test_a_valid_context_length_still_cuts_the_default_seq_len(copy):
    edit_config(copy, max_position_embeddings=64)
    assert fit_seq_len(1024, copy, "mix.seq_len", False) == 64


@pytest.mark.parametrize("seq_len, shards", [(-5, 4), (0, 4), (1, 4), (8, 0)])
def test_the_packer_refuses_a_length_that_would_never_fill_a_shard(tmp_path, seq_len, shards):
    with pytest.raises(ValueError, match="must be an integer of at least"):
        PackWriter(tmp_path, "train", seq_len, 0, "uint16", shards)


# ------------------------------------------------------------------------------- 2: index entries
def outside_index(folder: Path, how: str) -> None:
    """Move the weights out of `folder` and write an index pointing at them `how`."""
    elsewhere = folder.parent / "elsewhere"
    elsewhere.mkdir()
    names = list(load_file(folder / "model.safetensors"))
    shutil.move(folder / "model.safetensors", elsewhere / "w.safetensors")
    target = {"relative": "../elsewhere/w.safetensors", "absolute": str(elsewhere / "w.safetensors"),
              "subfolder": "sub/w.safetensors"}.get(how, "shard-00001.st")
    if how == "link":  # a name check_checkpoint_files does not glob (*.safetensors)
        os.symlink(elsewhere / "w.safetensors", folder / target)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": dict.fromkeys(names, target)}))


@pytest.mark.parametrize("how, message", [
    ("relative", "is listed in '../elsewhere/w.safetensors', not a file name in the checkpoint folder"),
    ("absolute", "not a file name in the checkpoint folder"),
    ("subfolder", "is listed in 'sub/w.safetensors', not a file name"),
    ("link", "lists shard shard-00001.st .*symbolic link to .*outside the checkpoint folder"),
])
def test_an_index_naming_a_shard_outside_the_folder_is_refused(copy, how, message):
    outside_index(copy, how)
    cfg = hf_model_config(copy, 64)
    with pytest.raises(HFImportError, match=rf"model.safetensors.index.json: .*{message}"):
        HFSource(copy, cfg)  # what pretrain builds: it read the weights from outside before


def test_an_index_of_plain_shard_names_still_loads(copy):
    shutil.move(copy / "model.safetensors", copy / "model-00001-of-00001.safetensors")
    names = list(load_file(copy / "model-00001-of-00001.safetensors"))
    (copy / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": dict.fromkeys(names, "model-00001-of-00001.safetensors")}))
    assert set(weight_files(copy).values()) == {copy / "model-00001-of-00001.safetensors"}


# -------------------------------------------------------------------- 3: integer weights, per-rank path
@pytest.mark.parametrize("name, cast", [("model.norm.weight", lambda t: t > 0),
                                        ("lm_head.weight", lambda t: (t * 1000).to(torch.int32))])
def test_integer_weights_are_refused_on_the_per_rank_loading_path(copy, name, cast):
    tensors = load_file(copy / "model.safetensors")
    tensors[name] = cast(tensors[name])
    save_file(tensors, copy / "model.safetensors")
    cfg = hf_model_config(copy, 64)
    ours = {hf: key for key, hf in key_map(cfg).items()}[name]
    with pytest.raises(HFImportError, match=rf"`{name}` is stored as torch\.(bool|int32), not a floating-point"):
        HFSource(copy, cfg).read(ours, None, 0, 1)  # load_local's path: was cast to float silently
    with pytest.raises(HFImportError, match="not a floating-point"):
        HFSource(copy, cfg).read(ours, 0, 0, 2)


# ---------------------------------------------------------------------------- 4: RoPE and booleans
@pytest.mark.parametrize("changes, message", [
    ({"rope_parameters": {"rope_type": "default", "rope_theta": -5.0}}, "`rope_parameters.rope_theta` must be a "
     "positive finite number, got -5.0"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}}, "`rope_parameters.rope_theta` must be a "
     "positive finite number, got 0"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 0.0}}, "`rope_scaling.factor` must be a positive"),
    ({"rope_parameters": {"rope_type": "linear", "factor": -4.0, "rope_theta": 1e4}}, "`rope_parameters.factor`"),
    ({"rope_parameters": {"rope_type": "linear", "factor": True, "rope_theta": 1e4}}, "got True"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                          "original_max_position_embeddings": 512, "rope_theta": 1e4}},
     "high_freq_factor (1.0) must be greater than its low_freq_factor (1.0)"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": -512,
                          "rope_theta": 1e4}}, "`rope_parameters.original_max_position_embeddings` must be a positive"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "truncate": "false", "rope_theta": 1e4}},
     "`rope_parameters.truncate` must be true or false, got 'false'"),
    ({"tie_word_embeddings": "false"}, "`tie_word_embeddings` must be true or false, got 'false'"),
    ({"use_sliding_window": "false"}, "`use_sliding_window` must be true or false"),
])
def test_rope_numbers_and_switches_that_break_the_model_are_refused(copy, changes, message):
    """Each was accepted: NaN/inf frequencies (theta <= 0, factor 0, equal llama3 factors), a math domain error
    mid-run (yarn's negative original context) or a string "false" read as true (a tied head)."""
    edit_config(copy, **changes)
    with pytest.raises(HFImportError, match="config.json: ") as err:
        hf_model_config(copy, 64)
    assert message in str(err.value)


def test_valid_rope_scalings_still_load(copy):
    edit_config(copy, tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 512, "rope_theta": 5e5})
    assert hf_model_config(copy, 64).rope_high_freq_factor == 4.0
    edit_config(copy, rope_parameters={"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 256,
                                       "truncate": False, "rope_theta": 1e4})
    assert hf_model_config(copy, 64).rope_factor == 4.0  # 1024 / 256


# ---------------------------------------------------------------------- 5: numbers Python cannot hold
def test_a_400_digit_rope_theta_is_refused_naming_it(copy):
    raw_config_entry(copy, "rope_theta", "1" + "0" * 400)  # was OverflowError from math.isfinite
    with pytest.raises(HFImportError, match="config.json: `rope_theta` must be a positive finite number"):
        hf_model_config(copy, 64)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_an_integer_of_over_4300_digits_is_refused_naming_the_file(copy, name):
    text = (copy / name).read_text().rstrip().rstrip("}")
    (copy / name).write_text(text + ', "huge": ' + "9" * 5000 + "}")  # was a bare ValueError (int-parsing limit)
    with pytest.raises(HFImportError, match=rf"{name}: a number in it cannot be read"):
        check_checkpoint_files(copy)  # mix's gate
    if name == "config.json":
        with pytest.raises(HFImportError, match="config.json: a number in it cannot be read"):
            hf_model_config(copy, 64)


@pytest.mark.parametrize("eos_id, message", [(-1, "eos_token_id -1 is not a token"),
                                             (2**40, "eos_token_id 1099511627776 is not a token"),
                                             (True, "no eos_token")])
def test_an_eos_token_id_no_tokenizer_can_hold_is_refused(copy, eos_id, message):
    """With no eos_token in tokenizer_config.json mix takes config.json's id: -1 and 2**40 raised a bare
    OverflowError from tokenizers (ids are u32); `true` was read as id 1."""
    edit_config(copy, eos_token_id=eos_id)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("eos_token")
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointTokenizerError, match=message):
        checkpoint_tokenizer(copy)
