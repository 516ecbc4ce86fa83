"""The one rule for params against a checkpoint (specs/init.py), key by key, on the params.yaml that ships: a value
that only repeats a default never overrides what the checkpoint states; a value the user set does where the
checkpoint can honour it; one it cannot honour is an error naming both.

The README's checkpoint recipe failed at export before this: params.yaml pinned `export.eos_token: <|end|>`
(forgeline's own token), which overrode the checkpoint's ChatML template (test_the_shipped_export_section_...).
The whole recipe runs in tests/test_recipes.py (slow); these are the fast checks of each key."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from specs.export import ExportSpec
from specs.init import ModelInitSpec, user_set
from specs.params import apply_overrides, read_params_file, validate_params
from specs.review import ReviewSpec
from specs.sft import SFTSpec, resolved_dropout
from tasks.data.mixing.tokenizer import fit_seq_len, save_tokenizer, train_tokenizer
from tasks.eval.export_card import base_model_note, card_description, personal_data_note
from tasks.export import context_of, export_specials
from specs.architecture import ModelConfig
from tasks.train.hf.tiny_checkpoint import SPECIALS
from tests.conftest import REPO


def shipped_params() -> dict:
    """The params.yaml that ships: the file a user edits (not the schema's defaults)."""
    return read_params_file(REPO / "params.yaml")


HF = {"model.init": {"kind": "hf", "path": "checkpoints/hf/x"}}
CHATML = {"template": "checkpoint", "end_of_turn": "<|im_end|>",
          "special_tokens": {"eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}}
FORGELINE = {"template": "forgeline", "end_of_turn": "<|end|>", "special_tokens": {}}


def problems(overrides: dict) -> str:
    try:
        validate_params(apply_overrides(shipped_params(), {**HF, **overrides}))
    except ValueError as exc:
        return str(exc)
    return ""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    """A checkpoint's tokenizer.json: ChatML's tokens, none of forgeline's chat markers."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    save_tokenizer(train_tokenizer(["the mill by the river grinds grain"] * 20, 300, 2, SPECIALS), path)
    return path


def test_a_value_at_its_default_is_no_choice():
    spec = SFTSpec.model_validate({"steps": 150, "dropout": None, "overflow": "drop"})
    assert user_set(spec) == {"overflow": "drop"}  # 150 repeats the default, null is "not set"


def test_the_shipped_params_take_a_checkpoint_as_they_are():
    assert problems({}) == ""


@pytest.mark.parametrize("key, value, where", [
    ("model.d_model", 256, "config.json"), ("model.init_std", 0.01, "config.json"),
    ("mix.tokenizer.vocab_size", 32000, "tokenizer.json"),
    ("mix.tokenizer.special_tokens", ["<s>"], "tokenizer.json"),
])
def test_a_key_the_checkpoint_decides_names_the_value_and_the_file(key, value, where):
    message = problems({key: value})
    assert f"{key}: {value!r} is set here, but with model.init.kind: hf it comes from the checkpoint's {where} " \
           "(checkpoints/hf/x): remove the key" in message, message


def test_the_shipped_export_section_stops_at_the_checkpoints_turn_end(tokenizer):
    spec = ExportSpec.model_validate(shipped_params()["export"])
    assert spec.eos_token is None  # before: `<|end|>`, which a ChatML checkpoint does not have
    assert export_specials(spec, CHATML, tokenizer) == {"eos_token": "<|im_end|>", "pad_token": "<|pad|>"}
    assert export_specials(spec, FORGELINE, tokenizer) == {"eos_token": "<|end|>"}


def test_a_chosen_eos_wins_and_one_outside_the_vocabulary_names_both(tokenizer):
    chosen = export_specials(ExportSpec(eos_token="<|endoftext|>"), CHATML, tokenizer)
    assert chosen["eos_token"] == "<|endoftext|>"
    with pytest.raises(ValueError, match=r"export.eos_token: '<\|end\|>' is not in the vocabulary of .*; the "
                                         r"checkpoint's chat template ends a turn with '<\|im_end\|>'"):
        export_specials(ExportSpec(eos_token="<|end|>"), CHATML, tokenizer)


def test_dropout_follows_the_models_origin_unless_set():
    shipped = SFTSpec.model_validate(shipped_params()["sft"])
    assert shipped.dropout is None
    assert (resolved_dropout(shipped.dropout, False), resolved_dropout(shipped.dropout, True)) == (0.1, 0.0)
    assert resolved_dropout(0.05, True) == resolved_dropout(0.05, False) == 0.05


def test_sequence_length_against_the_checkpoints_positions(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 128}))
    assert fit_seq_len(64, tmp_path, "mix.seq_len", chosen=True) == 64
    assert fit_seq_len(256, tmp_path, "mix.seq_len", chosen=False) == 128  # only the default: the checkpoint's
    with pytest.raises(ValueError, match=r"mix.seq_len: 2048 is longer than the checkpoint's "
                                         r"max_position_embeddings 128 \(.*config.json\)"):
        fit_seq_len(2048, tmp_path, "mix.seq_len", chosen=True)


def test_export_states_the_checkpoints_context_not_the_length_trained_at():
    cfg = ModelConfig(vocab_size=8, seq_len=64, n_layers=1, n_heads=2, n_kv_heads=2, d_model=8, ffn_hidden=16)
    assert context_of(cfg).seq_len == 64  # trained here from scratch: its own length
    assert context_of(replace(cfg, max_positions=1024)).seq_len == 1024
    assert "max_positions" not in cfg.to_dict()  # config.json of a scratch model stays byte-identical


def test_review_mode_off_as_yaml_writes_it():
    assert ReviewSpec.model_validate(yaml.safe_load("{mode: off}")).mode == "off"  # YAML 1.1: off is false


def test_the_card_says_when_personal_data_was_let_through():
    params = shipped_params()
    assert personal_data_note(params) is None
    note = personal_data_note(apply_overrides(params, {"clean.pii.enabled": False,
                                                       "review.max_kept_pii_fraction": 0.05}))
    assert "PII scrubbing was off" in note and "`review.max_kept_pii_fraction: 0.05`" in note


def test_init_spec_needs_a_path_for_hf():
    with pytest.raises(ValueError, match="model.init.path: required with kind: hf"):
        ModelInitSpec(kind="hf")


def test_the_card_does_not_describe_a_checkpoints_weights_as_forgeline_made():
    params = apply_overrides(shipped_params(), HF)
    spec = ExportSpec.model_validate(params["export"])
    assert "from the checkpoint `checkpoints/hf/x`" in card_description(spec, params)
    assert "`cc-by-sa-4.0` here is export.license's default" in base_model_note(spec, params)
    mine = ExportSpec.model_validate({**params["export"], "description": "Mine.", "license": "llama3.2"})
    assert card_description(mine, params) == "Mine." and "`llama3.2` here is set in params" in base_model_note(
        mine, params)
    scratch = shipped_params()
    assert card_description(spec, scratch) == spec.description and base_model_note(spec, scratch) == ""
