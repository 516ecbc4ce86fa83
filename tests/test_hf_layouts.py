"""Hugging Face checkpoints as published repositories lay them out, and what their files state that must survive
import → train → export: a list of end ids and generation_config.json (Llama 3.1 Instruct), a config.json
without max_position_embeddings, sharded safetensors with an index (and the broken indexes a copy can leave),
pickle-only folders, tied and untied heads with no lm_head stored, a tokenizer given only as tokenizer.model, and
chat templates as a list of named templates or a separate chat_template.jinja. Each test fails on the code before
its fix (the before → after table is in the README's Hugging Face section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tasks.train.hf.hf_generation import end_ids, stated_generation
from tasks.train.hf.hf_import import HFImportError, hf_model_config, load_hf_state
from tests.helpers.hf_published import PUBLISHED, VOCAB, scale_down
from tests.test_hf_import import llama_tied, qwen2, save_hf
from tests.test_hf_published import T, save_raw

INDEX = "model.safetensors.index.json"


def word_tokenizer(path: Path, size: int = VOCAB) -> Path:
    """A WordLevel tokenizer with ids 0..size-1 (`t{i}`), so any scaled-down id is a token."""
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0")).save(str(path))
    return path


# ------------------------------------------------------------------------------------------------ end tokens
@pytest.mark.parametrize("turn_end, want", [("last", "the same list"), (5, "the list and 5")])
def test_export_keeps_the_checkpoints_end_ids_and_generation_config(turn_end, want, tmp_path):
    """Llama 3.1 Instruct states three stop ids in config.json and generation_config.json (with sampling
    defaults): export writes that list back — the template's end of turn appended only when not in it — and the
    generation config as it was; transformers reads both and gives the same logits. Before: one eos id in each,
    the sampling defaults gone."""
    from transformers import GenerationConfig

    from tasks.train.hf.hf_export import check_hf, export_hf

    raw = scale_down(PUBLISHED["Llama-3.1-8B-Instruct"])
    stops = raw["eos_token_id"]
    assert isinstance(stops, list) and len(set(stops)) == 3
    save_raw(raw, tmp_path / "in")
    own = {"bos_token_id": raw["bos_token_id"], "do_sample": True, "eos_token_id": stops, "temperature": 0.6,
           "top_p": 0.9, "transformers_version": "4.42.3"}
    (tmp_path / "in" / "generation_config.json").write_text(json.dumps(own))
    cfg = hf_model_config(tmp_path / "in")
    end = stops[-1] if turn_end == "last" else turn_end
    expected = stops if turn_end == "last" else [*stops, turn_end]
    state = load_hf_state(tmp_path / "in", cfg)
    export_hf(state, cfg, word_tokenizer(tmp_path / "tokenizer.json"), tmp_path / "out", card={},
              special_tokens={"eos_token": f"t{end}"}, stated=stated_generation(tmp_path / "in"))
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eos_token_id"] == expected, want
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text()) == {**own, "eos_token_id": expected}
    read = GenerationConfig.from_pretrained(tmp_path / "out")
    assert read.eos_token_id == expected and read.temperature == 0.6 and read.top_p == 0.9
    assert check_hf(tmp_path / "out", state, cfg, seq=T, tol=2e-5) < 2e-5


@pytest.mark.parametrize("stated, turn_end, out", [
    (None, 3, 3), ([], 3, 3), (3, 3, 3), (0, 3, [0, 3]), ([0, 1, 3], 3, [0, 1, 3]), ([0, 1], 3, [0, 1, 3]),
    ([0], 0, [0]), ([0, 1], None, [0, 1])])
def test_end_ids_keep_what_the_checkpoint_states(stated, turn_end, out):
    assert end_ids(stated, turn_end) == out


def test_an_end_id_the_tokenizer_lacks_is_refused_at_export(tmp_path):
    from tasks.train.hf.hf_export import export_hf

    save_raw(scale_down(PUBLISHED["Llama-3.1-8B-Instruct"]), tmp_path / "in")
    cfg = hf_model_config(tmp_path / "in")
    with pytest.raises(ValueError, match=r"config.json: eos_token_id 1\d\d is not a token of the exported"):
        export_hf(load_hf_state(tmp_path / "in", cfg), cfg, word_tokenizer(tmp_path / "tok.json", size=100),
                  tmp_path / "out", card={}, special_tokens={"eos_token": "t5"},
                  stated=stated_generation(tmp_path / "in"))
    assert not (tmp_path / "out").exists()


def test_a_malformed_generation_config_is_refused_naming_it(tmp_path):
    save_raw(scale_down(PUBLISHED["Llama-3.1-8B-Instruct"]), tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": ["<|eot_id|>"]}))
    with pytest.raises(HFImportError, match="generation_config.json: eos_token_id"):
        stated_generation(tmp_path)


# ------------------------------------------------------------------------------------------- context length
@pytest.mark.parametrize("kind, default", [("llama", 2048), ("qwen2", 32768), ("mistral", 131072)])
def test_no_max_position_embeddings_means_the_family_default(kind, default, tmp_path):
    """transformers reads an absent max_position_embeddings as the family's class default; mix, pretrain, sft
    and export now do too (the error says so). Before: no limit at all on seq_len."""
    from tasks.data.mixing.tokenizer import fit_seq_len, max_positions

    (tmp_path / "config.json").write_text(json.dumps({"model_type": kind, "hidden_size": 64}))
    assert max_positions(tmp_path) == default
    assert fit_seq_len(default, tmp_path, "mix.seq_len", chosen=True) == default
    assert fit_seq_len(default * 2, tmp_path, "mix.seq_len", chosen=False) == default
    with pytest.raises(ValueError, match=rf"mix.seq_len: {default * 2} is longer than the checkpoint's "
                                         rf"max_position_embeddings \(not in the file: {kind}'s default, as "
                                         rf"transformers reads it\) {default}"):
        fit_seq_len(default * 2, tmp_path, "mix.seq_len", chosen=True)


# ------------------------------------------------------------------------------------------ weight layouts
def sharded(tmp_path: Path) -> tuple[torch.nn.Module, dict, list[str]]:
    hf = save_hf(qwen2(), tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / INDEX).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    return hf, index, shards


def test_an_index_naming_a_shard_that_is_not_there_is_refused(tmp_path):
    _, _, shards = sharded(tmp_path)
    (tmp_path / shards[1]).unlink()
    with pytest.raises(HFImportError, match=rf"{INDEX}: lists shard {shards[1]} \(e.g. for `.*`\), which is not in"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


def test_a_tensor_stored_in_two_shards_is_refused(tmp_path):
    """Two copies of one tensor: the index names one, transformers' loader could take either; forgeline refuses
    rather than pick (before: it read the index's copy silently)."""
    _, index, shards = sharded(tmp_path)
    name = next(n for n, f in index["weight_map"].items() if f == shards[0])
    other = load_file(tmp_path / shards[1])
    other[name] = load_file(tmp_path / shards[0])[name] + 1
    save_file(other, tmp_path / shards[1], metadata={"format": "pt"})
    with pytest.raises(HFImportError, match=rf"`{name}` is stored in two shards, {shards[0]} and {shards[1]}"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


def test_an_index_listing_a_tensor_twice_or_in_the_wrong_shard_is_refused(tmp_path):
    _, index, shards = sharded(tmp_path)
    name, first = next(iter(index["weight_map"].items()))
    wrong = next(s for s in shards if s != first)
    text = json.dumps(index)
    twice = text.replace('"weight_map": {', f'"weight_map": {{"{name}": "{wrong}", ', 1)
    (tmp_path / INDEX).write_text(twice)
    with pytest.raises(HFImportError, match=rf"`{name}` is listed twice"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))
    (tmp_path / INDEX).write_text(json.dumps({**index, "weight_map": {**index["weight_map"], name: wrong}}))
    with pytest.raises(HFImportError, match=rf"lists `{name}` in {wrong}, which does not hold it"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


@pytest.mark.parametrize("files", [
    ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"),
    ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"),
    ("consolidated.00.pth",)])  # Meta's original layout
def test_pickle_shards_are_refused_by_name_without_unpickling(files, tmp_path, monkeypatch):
    save_hf(llama_tied(), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    for name in files:
        torch.save({"x": torch.zeros(1)}, tmp_path / name)
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a pickle was loaded"))
    with pytest.raises(HFImportError, match=r"\.(bin|pth|json): pickle checkpoints are refused .* convert it"):
        load_hf_state(tmp_path, hf_model_config(tmp_path))


def test_a_tied_head_need_not_be_stored_and_an_untied_missing_one_says_which_key(tmp_path):
    from tasks.train.checkpointing.init_weights import HFSource

    save_hf(llama_tied(), tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")
    cfg = hf_model_config(tmp_path)
    assert cfg.tie_embeddings and load_hf_state(tmp_path, cfg)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["tie_word_embeddings"]  # absent: false for llama, as transformers reads it
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = hf_model_config(tmp_path)
    for load in (lambda: load_hf_state(tmp_path, cfg), lambda: HFSource(tmp_path, cfg)):
        with pytest.raises(HFImportError, match="`lm_head.weight` is missing .* tie_word_embeddings true"):
            load()


# ------------------------------------------------------------------------------------------ tokenizer files
def test_a_tokenizer_given_only_as_tokenizer_model_is_refused_naming_the_fix(tmp_path):
    from tasks.data.mixing.tokenizer import CheckpointTokenizerError, checkpoint_tokenizer

    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x00")  # a sentencepiece proto; never parsed
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(CheckpointTokenizerError, match=r"tokenizer.json: missing .* only tokenizer.model, a slow "
                                                       r"tokenizer: .*save_pretrained"):
        checkpoint_tokenizer(tmp_path)


CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}")
OTHER = CHATML.replace("<|im_start|>", "<|im_start|>#")


def chat_folder(tmp_path: Path, template, jinja: str | None = None) -> Path:
    from tasks.train.hf.tiny_checkpoint import SPECIALS
    from tokenizers import Tokenizer, models

    vocab = {t: i for i, t in enumerate([*SPECIALS, "#", "a", "\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="a"))
    tok.add_special_tokens(SPECIALS)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast",
        **({"chat_template": template} if template is not None else {})}))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return tmp_path


@pytest.mark.parametrize("template, jinja, used", [
    ([{"name": "tool_use", "template": OTHER}, {"name": "default", "template": CHATML}], None, CHATML),
    (OTHER, CHATML, CHATML),  # transformers reads chat_template.jinja first (before: forgeline read the config's)
    (None, CHATML, CHATML)])  # the file alone
def test_the_chat_template_transformers_would_use_is_the_one_sft_trains_with(template, jinja, used, tmp_path):
    from transformers import AutoTokenizer

    from tasks.data.mixing.tokenizer import load_tokenizer
    from tasks.train.inputs.chat_template import checkpoint_chat

    folder = chat_folder(tmp_path, template, jinja)
    chat = checkpoint_chat(folder, load_tokenizer(folder / "tokenizer.json"))
    assert chat is not None and chat.template == used
    talk = [{"role": "user", "content": "a"}]
    hf = AutoTokenizer.from_pretrained(folder).apply_chat_template(talk, tokenize=False)
    assert chat.text(talk, add_generation_prompt=False) == hf


def test_named_templates_without_a_default_are_refused_naming_them(tmp_path):
    from tasks.data.mixing.tokenizer import load_tokenizer
    from tasks.train.inputs.chat_template import TemplateError, checkpoint_chat

    folder = chat_folder(tmp_path, [{"name": "tool_use", "template": OTHER}, {"name": "rag", "template": CHATML}])
    with pytest.raises(TemplateError, match=r"list of named templates \['rag', 'tool_use'\] with none named "
                                            r"`default`"):
        checkpoint_chat(folder, load_tokenizer(folder / "tokenizer.json"))


def test_named_templates_beside_the_default_survive_export(tmp_path):
    """A checkpoint with `tool_use` and `rag` templates beside its default (the list form and transformers 5's
    additional_chat_templates/ folder): SFT trains with the default, export writes all three back, and
    transformers renders each by name. Before: only the default was exported."""
    from transformers import AutoTokenizer

    from specs.architecture import ModelConfig
    from tasks.train.hf.hf_export import export_hf
    from tasks.train.hf.hf_generation import named_templates
    from tasks.train.modeling.model import Transformer

    folder = tmp_path / "in"
    folder.mkdir()
    chat_folder(folder, [{"name": "default", "template": CHATML}, {"name": "tool_use", "template": OTHER}])
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "rag.jinja").write_text(OTHER.replace("#", "a"))
    named = named_templates(folder)
    assert named == {"rag": OTHER.replace("#", "a"), "tool_use": OTHER}
    (folder / "config.json").write_text(json.dumps({"eos_token_id": 3}))
    assert stated_generation(folder)["chat_templates"] == named
    cfg = ModelConfig(vocab_size=16, seq_len=16, n_layers=1, n_heads=2, n_kv_heads=1, d_model=16, ffn_hidden=32)
    export_hf(Transformer(cfg, 0).state_dict(), cfg, folder / "tokenizer.json", tmp_path / "out", card={},
              chat_template=CHATML, special_tokens={"eos_token": "<|im_end|>"}, stated=stated_generation(folder))
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    talk = [{"role": "user", "content": "a"}]
    assert tok.apply_chat_template(talk, tokenize=False) == "<|im_start|>user\na<|im_end|>\n"
    assert tok.apply_chat_template(talk, tokenize=False, chat_template="tool_use") == "<|im_start|>#user\na<|im_end|>\n"
    assert tok.apply_chat_template(talk, tokenize=False, chat_template="rag") == "<|im_start|>auser\na<|im_end|>\n"
