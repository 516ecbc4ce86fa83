"""What a published checkpoint's files state comes out of import → export unchanged unless training changed it
("a default never overrides what a user's checkpoint states"): for every family of tests/helpers/hf_published.py
(scaled down) with the tokenizer_config.json, special_tokens_map.json and generation_config.json its hub ships,
export's four JSON files are compared key by key with the originals. Every difference is listed in ALLOWED with
its reason; a new override or a dropped key fails the test (the before → after table is in the README's Hugging
Face section)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.train.hf.hf_generation import stated_generation
from tasks.train.hf.hf_import import hf_model_config, load_hf_state
from tests.helpers.hf_published import PUBLISHED, VOCAB, scale_down
from tests.test_hf_published import save_raw

HUGE = 1000000000000000019884624838656  # transformers' VERY_LARGE_INTEGER, Llama 2's and Mistral's model_max_length
FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_files(name: str, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tokenizer_config.json, special_tokens_map.json and generation_config.json the family's hub ships (their
    keys that state behaviour; token names renamed to the scaled-down ids' `t{id}`)."""
    kind = ("llama2" if raw["model_type"] == "llama" and raw["vocab_size_published"] <= 32016 else
            "mistral" if raw["model_type"] == "mistral" else "qwen" if raw["model_type"].startswith("qwen") else
            "smol" if name.startswith("SmolLM") else "llama3")
    bos, eos = raw.get("bos_token_id"), raw["eos_token_id"]
    eos_one = eos[-1] if isinstance(eos, list) else eos
    named = {"eos_token": f"t{eos_one}"}
    if kind in ("llama2", "mistral", "llama3", "smol"):
        named["bos_token"] = f"t{bos}"
    if kind in ("llama2", "mistral", "smol"):
        named["unk_token"] = f"t{VOCAB - 20}" if kind != "smol" else f"t{eos_one}"
    if kind == "qwen":
        named["pad_token"] = f"t{bos}"  # Qwen2.5: pad <|endoftext|>, eos <|im_end|> (Instruct) or the same
    tok_cfg = {**named, "model_max_length": {"llama2": HUGE, "mistral": HUGE, "llama3": 131072, "qwen": 131072,
                                             "smol": 8192}[kind],
               "clean_up_tokenization_spaces": kind in ("llama3", "qwen"),
               "tokenizer_class": {"llama2": "LlamaTokenizer", "mistral": "LlamaTokenizer", "qwen": "Qwen2Tokenizer",
                                   "llama3": "PreTrainedTokenizerFast", "smol": "GPT2Tokenizer"}[kind]}
    if kind in ("llama2", "mistral"):
        tok_cfg.update(add_bos_token=True, add_eos_token=False, legacy=False, padding_side="right" if
                       kind == "llama2" else "left", spaces_between_special_tokens=False)
    if kind == "qwen":
        tok_cfg.update(errors="replace", split_special_tokens=False, padding_side="right")
    gen = {"bos_token_id": bos, "eos_token_id": eos, "transformers_version": raw["transformers_version"]}
    if "pad_token_id" in raw:
        gen["pad_token_id"] = raw["pad_token_id"]
    if kind == "llama3" and "Instruct" in name:
        gen.update(do_sample=True, temperature=0.6, top_p=0.9)
    return {"tokenizer_config.json": tok_cfg, "special_tokens_map.json": dict(named), "generation_config.json": gen}


def published_folder(name: str, folder: Path) -> dict[str, dict[str, Any]]:
    """The scaled-down checkpoint `name` as its hub lays it out (weights, config.json, tokenizer.json over ids
    0..VOCAB-1 named `t{i}`, the files of `tokenizer_files`); returns the four JSON files as written."""
    from tokenizers import Tokenizer, models

    raw = scale_down(PUBLISHED[name])
    save_raw(raw, folder)
    files = tokenizer_files(name, {**raw, "vocab_size_published": PUBLISHED[name]["vocab_size"]})
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.add_special_tokens(sorted({v for v in files["special_tokens_map.json"].values()}))
    tok.save(str(folder / "tokenizer.json"))
    for file, content in files.items():
        (folder / file).write_text(json.dumps(content))
    return {"config.json": raw, **files}


def export_published(folder: Path, out: Path) -> dict[str, dict[str, Any]]:
    """Import `folder` as `model.init.kind: hf` does and export it untrained as tasks/export.py does (the
    checkpoint's named tokens, its context, its hf_stated.json); returns the four exported JSON files."""
    from tasks.export import context_of
    from tasks.train.hf.hf_export import export_hf

    cfg = hf_model_config(folder)
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    specials = {k: tok_cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if k in tok_cfg}
    export_hf(load_hf_state(folder, cfg), context_of(cfg), folder / "tokenizer.json", out, card={},
              special_tokens=specials, stated=stated_generation(folder))
    return {f: json.loads((out / f).read_text()) for f in FILES}


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (published, exported) for every key whose value differs (absent: the string "<absent>")."""
    gone = "<absent>"
    return {k: (before.get(k, gone), after.get(k, gone)) for k in sorted(set(before) | set(after))
            if before.get(k, gone) != after.get(k, gone)}


def read_as_transformers(folder: Path, key: str, value: Any) -> bool:
    """Whether transformers reads the published file's absent (or null) `key` as the `value` export wrote (a
    config class without head_dim, Qwen2's: hidden_size / heads, as its attention computes it)."""
    from transformers import AutoConfig

    conf = AutoConfig.from_pretrained(folder)
    read = getattr(conf, key, None)
    if key == "head_dim" and read is None:
        read = conf.hidden_size // conf.num_attention_heads
    if key == "rope_theta":  # transformers 5 keeps it inside rope_parameters only
        read = conf.rope_parameters["rope_theta"]
    if key == "rope_parameters":  # transformers keeps a legacy `type` beside the `rope_type` it reads
        read = {k: v for k, v in read.items() if k != "type"}
    return read == value


FORMAT = "written explicitly, the value transformers reads from the published file"
# (file, key) -> (why the exported value may differ, the check it must pass: published, exported, input folder)
ALLOWED: dict[tuple[str, str], tuple[str, Any]] = {
    ("config.json", "transformers_version"): ("export names no transformers version", lambda a, b, f: b == "<absent>"),
    ("config.json", "torch_dtype"): ("the weights are exported in fp32 as trained (README)",
                                     lambda a, b, f: b == "float32"),
    ("config.json", "dtype"): ("transformers 5's name of torch_dtype; export writes torch_dtype float32",
                               lambda a, b, f: b == "<absent>"),
    **{("config.json", k): (FORMAT, lambda a, b, f, k=k: a == "<absent>" and read_as_transformers(f, k, b))
       for k in ("head_dim", "attention_dropout", "attention_bias", "mlp_bias", "rope_theta", "layer_types")},
    ("config.json", "rope_parameters"): (FORMAT, lambda a, b, f: a == "<absent>" and read_as_transformers(
        f, "rope_parameters", b)),
    ("config.json", "rope_scaling"): ("null is absent; the legacy `type` key is written as `rope_type`",
                                      lambda a, b, f: (a, b) == (None, "<absent>") or (
                                          {("rope_type" if k == "type" else k): v for k, v in a.items()} == b)),
    ("config.json", "pad_token_id"): ("not in the published config.json: the tokenizer's pad_token (or null, "
                                      "as transformers reads an absent key)",
                                      lambda a, b, f: a == "<absent>" and b == pad_of(f)),
    **{("config.json", k): ("read by no transformers model", lambda a, b, f: b == "<absent>")
       for k in ("use_mrope", "rope_interleaved", "is_llama_config")},
    # Phi-3's files: hub metadata; the remote-code pointer (the export is transformers' own Phi3ForCausalLM and
    # carries no code files); the original context, read only by longrope, which import refuses
    **{("config.json", k): ("not part of the model transformers builds from the export",
                            lambda a, b, f: b == "<absent>")
       for k in ("_name_or_path", "auto_map", "original_max_position_embeddings")},
    ("tokenizer_config.json", "tokenizer_class"): ("a plain fast tokenizer over the verbatim tokenizer.json",
                                                   lambda a, b, f: b == "PreTrainedTokenizerFast"),
    ("tokenizer_config.json", "errors"): ("read only by the slow byte-level tokenizer",
                                          lambda a, b, f: b == "<absent>"),
}


def pad_of(folder: Path) -> int | None:
    """The id of the folder's tokenizer_config.json `pad_token` (None without one)."""
    pad = json.loads((folder / "tokenizer_config.json").read_text()).get("pad_token")
    return None if pad is None else int(pad[1:])


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_export_changes_only_what_training_or_the_format_changes(name, tmp_path):
    """Key by key, each published file against its export: every difference is one ALLOWED lists, and passes
    its check. Before: bos/pad ids, Qwen's window keys, llama3 rope_scaling and the tokenizer's behaviour keys were
    overridden or dropped (the README's table)."""
    published = published_folder(name, tmp_path / "in")
    exported = export_published(tmp_path / "in", tmp_path / "out")
    wrong = {}
    for f in FILES:
        for key, (a, b) in diff(published[f], exported[f]).items():
            rule = ALLOWED.get((f, key))
            if rule is None or not rule[1](a, b, tmp_path / "in"):
                wrong[f"{f}: {key}"] = (a, b)
    assert not wrong, wrong


def test_a_stated_null_pad_stays_null_and_a_derived_generation_config_keeps_the_stated_ids(tmp_path):
    """Qwen2.5 in transformers 5's layout states `pad_token_id: null` while its tokenizer names a pad; Vicuna
    states `pad_token_id: 0`: config.json keeps each, and without a generation_config.json the one export derives
    carries the same ids. Before: the tokenizer's pad id (Qwen), null (Vicuna)."""
    for name in ("Qwen2.5-1.5B (transformers 5 layout)", "vicuna-7b-v1.5"):
        folder = tmp_path / name.split()[0]
        raw = published_folder(name, folder / "in")["config.json"]
        (folder / "in" / "generation_config.json").unlink()
        exported = export_published(folder / "in", folder / "out")
        for f in ("config.json", "generation_config.json"):
            assert (exported[f]["bos_token_id"], exported[f]["pad_token_id"]) == (
                raw["bos_token_id"], raw["pad_token_id"]), (name, f)


def test_the_exported_tokenizer_behaves_as_the_checkpoints(tmp_path):
    """transformers reads the exported tokenizer with the checkpoint's padding side, length limit and clean-up
    (Mistral pads left; Llama 3.1 cleans up spaces and allows 131072 tokens). Before: right, the model's context,
    no clean-up."""
    from transformers import AutoTokenizer

    for name, want in (("Mistral-7B-v0.1", ("left", HUGE, False)), ("Llama-3.1-8B", ("right", 131072, True))):
        folder = tmp_path / name
        published_folder(name, folder / "in")
        export_published(folder / "in", folder / "out")
        tok = AutoTokenizer.from_pretrained(folder / "out")
        assert (tok.padding_side, tok.model_max_length, tok.clean_up_tokenization_spaces) == want, name


@pytest.mark.parametrize("key", ["bos_token_id", "pad_token_id"])
def test_a_stated_id_that_is_no_id_is_refused_naming_the_file(key, tmp_path):
    from tasks.train.hf.hf_families import HFImportError

    (tmp_path / "config.json").write_text(json.dumps({key: "<s>"}))
    with pytest.raises(HFImportError, match=rf"config.json: {key} '<s>' is not a token id$"):
        stated_generation(tmp_path)


@pytest.mark.parametrize(("files", "file", "key", "value"), [
    ({"config.json": {"bos_token_id": 32000}}, "config.json", "bos_token_id", "32000"),
    ({"config.json": {"pad_token_id": 40000}}, "config.json", "pad_token_id", "40000"),
    ({"config.json": {"eos_token_id": [2, 32000]}}, "config.json", "eos_token_id", r"32000 \(in \[2, 32000\]\)"),
    ({"generation_config.json": {"eos_token_id": [1, 2, 99999]}}, "generation_config.json", "eos_token_id",
     r"99999 \(in \[1, 2, 99999\]\)")])
def test_a_stated_id_outside_the_vocabulary_is_refused_naming_key_value_and_size(files, file, key, value, tmp_path):
    """Llama 2's config.json states `vocab_size: 32000`: an id of 32000 or more has no embedding row. Before, it
    was carried into hf_stated.json and export's config.json, and failed only when generation or padding used
    it."""
    from tasks.train.hf.hf_families import HFImportError

    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2,
                                                      "pad_token_id": None, **files.get("config.json", {})}))
    if "generation_config.json" in files:
        (tmp_path / "generation_config.json").write_text(json.dumps(files["generation_config.json"]))
    with pytest.raises(HFImportError, match=rf"{file}: {key} {value} is outside the vocabulary \(vocab_size 32000"):
        stated_generation(tmp_path)


def test_stated_ids_inside_the_vocabulary_and_a_null_pad_are_kept(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 32000, "bos_token_id": 0, "pad_token_id": None,
                                                      "eos_token_id": [2, 31999]}))
    stated = stated_generation(tmp_path)
    assert stated["eos_token_id"] == [2, 31999]
    assert stated["config"] == {"bos_token_id": 0, "pad_token_id": None}


if __name__ == "__main__":  # the table: python -m tests.test_hf_stated DIR
    import sys

    root = Path(sys.argv[1])
    for name in sorted(PUBLISHED):
        slug = name.replace(" ", "_").replace("(", "").replace(")", "")
        published = published_folder(name, root / slug / "in")
        exported = export_published(root / slug / "in", root / slug / "out")
        for f in FILES:
            for key, (a, b) in diff(published[f], exported[f]).items():
                print(f"{name}\t{f}\t{key}\t{json.dumps(a)[:60]}\t{json.dumps(b)[:60]}")
