"""What a Hugging Face checkpoint states about ending generation, carried from import to export.

A published checkpoint may stop generation at several ids: Llama 3.1 Instruct's config.json and
generation_config.json both say `eos_token_id: [128001, 128008, 128009]` (end of text, end of message, end of
turn), and its generation_config.json also holds sampling defaults (temperature, top_p). forgeline's rule is that
a default never overrides what a user's checkpoint states, so:

- mix reads the statement once (`stated_generation`) and writes it as `hf_stated.json` beside the checkpoint's
  tokenizer files; sft and prefer carry it to their folders, export reads it from the finished model's folder
  (the checkpoint folder itself is no dependency of export);
- export writes config.json's `eos_token_id` as the checkpoint's own value or list, with the end-of-turn token
  SFT trained replies to end with appended when the checkpoint did not list it (`end_ids`: the one thing training
  changed), and generation_config.json as the checkpoint had it, with only that list changed (`generation_config`);
- named chat templates beside the default one (`named_templates`: `tool_use`, `rag`) go back into the exported
  tokenizer_config.json's list, the default being the template SFT trained with;
- config.json's `bos_token_id` / `pad_token_id` (Vicuna states `pad_token_id: 0`, its tokenizer names no pad)
  and, of a Qwen model without a window, its inert `sliding_window` / `max_window_layers` go back as stated
  (`config`, `stated_ids`); tokenizer_config.json's behaviour keys (`TOKENIZER_KEYS`: model_max_length,
  padding_side, add_bos_token, clean_up_tokenization_spaces, ...) go back as stated (`tokenizer`).

Without a statement (a model pretrained here) the files are what they always were: one eos id, the named tokens'
ids, forgeline's tokenizer settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.train.hf.hf_families import HFImportError

STATED = "hf_stated.json"
GENERATION = "generation_config.json"
EndIds = int | list[int] | None
# config.json keys export writes as the checkpoint states them: training changes none of them. The window keys
# are inert on a Qwen model without a window (use_sliding_window false); export writes them back only then.
CONFIG_KEYS = ("bos_token_id", "pad_token_id", "sliding_window", "max_window_layers")
# tokenizer_config.json keys that state how the tokenizer behaves; export writes forgeline's own (model_max_length
# the context, no clean-up of spaces) only where the checkpoint stated none. tokenizer_class is not among them:
# export writes a plain fast tokenizer over the verbatim tokenizer.json (hf_export.tokenizer_config).
TOKENIZER_KEYS = ("add_bos_token", "add_eos_token", "add_prefix_space", "clean_up_tokenization_spaces", "legacy",
                  "model_max_length", "padding_side", "spaces_between_special_tokens", "split_special_tokens",
                  "truncation_side")


def stated_generation(folder: Path) -> dict[str, Any]:
    """The checkpoint's `eos_token_id` (config.json's: an id, a list of ids, or None), its generation_config.json
    as written (None when it has none; transformers then derives one from config.json) and its named chat
    templates other than the default (`named_templates`; the key only when there are some); `config`: its
    config.json's `CONFIG_KEYS` it has, `tokenizer`: its tokenizer_config.json's `TOKENIZER_KEYS` it has."""
    folder = Path(folder)
    config_file = folder / "config.json"  # absent: pretrain refuses the folder, naming it (hf_import)
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    generation = None
    if (folder / GENERATION).is_file():
        try:
            generation = json.loads((folder / GENERATION).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise HFImportError(f"{folder / GENERATION}: not JSON ({exc})") from None
        if not isinstance(generation, dict):
            raise HFImportError(f"{folder / GENERATION}: not a JSON object")
    check_stated_ids(config, generation, config_file, folder / GENERATION)
    tok_file = folder / "tokenizer_config.json"
    tok_cfg = json.loads(tok_file.read_text(encoding="utf-8")) if tok_file.is_file() else {}
    return {"eos_token_id": config.get("eos_token_id"), "generation_config": generation,
            "config": {k: config[k] for k in CONFIG_KEYS if k in config},
            "tokenizer": {k: tok_cfg[k] for k in TOKENIZER_KEYS if k in tok_cfg},
            **({"chat_templates": named} if (named := named_templates(folder)) else {})}


def check_stated_ids(config: dict[str, Any], generation: dict[str, Any] | None, config_file: Path,
                     generation_file: Path) -> None:
    """Every id config.json and generation_config.json state (`eos_token_id`, an id or a list, checked element by
    element; `bos_token_id`, `pad_token_id`) is null or a token id below config.json's `vocab_size`: an id past the
    embedding would crash generation or padding long after import, so HFImportError names the file, key, value
    and vocabulary size now. Without a usable `vocab_size` only the type is checked (hf_import refuses that
    folder, naming the field)."""
    vocab = config.get("vocab_size")
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None
    for where, key, value in ((config_file, "eos_token_id", config.get("eos_token_id")),
                              (generation_file, "eos_token_id", (generation or {}).get("eos_token_id")),
                              *((config_file, k, config.get(k)) for k in ("bos_token_id", "pad_token_id"))):
        ids = value if isinstance(value, list) and key == "eos_token_id" else [value]
        if not all(i is None or (isinstance(i, int) and not isinstance(i, bool) and i >= 0) for i in ids):
            raise HFImportError(f"{where}: {key} {value!r} is not a token id" + " or a list of them" * (
                key == "eos_token_id"))
        outside = next((i for i in ids if vocab is not None and i is not None and i >= vocab), None)
        if outside is not None:
            which = f"{outside} (in {value!r})" if isinstance(value, list) else f"{value!r}"
            raise HFImportError(f"{where}: {key} {which} is outside the vocabulary (vocab_size {vocab} in "
                                f"{config_file.name}: ids 0-{vocab - 1})")


def named_templates(folder: Path) -> dict[str, str]:
    """The checkpoint's chat templates other than "default" (Hermes' or Command R's `tool_use`, `rag`): from
    tokenizer_config.json's list form, and `additional_chat_templates/*.jinja` where transformers 5 saves them.
    SFT trains with the default one; export writes these back beside it so none is lost."""
    cfg_file = Path(folder) / "tokenizer_config.json"
    listed = json.loads(cfg_file.read_text(encoding="utf-8")).get("chat_template") if cfg_file.is_file() else None
    named = {t["name"]: t["template"] for t in listed if isinstance(t, dict) and t.get("name") != "default"} \
        if isinstance(listed, list) else {}
    extra = Path(folder) / "additional_chat_templates"
    named.update({f.stem: f.read_text(encoding="utf-8") for f in sorted(extra.glob("*.jinja"))} if extra.is_dir()
                 else {})
    return dict(sorted(named.items()))


def read_stated(folder: Path) -> dict[str, Any] | None:
    """The `hf_stated.json` of a stage folder (None: the model was not imported from a checkpoint)."""
    path = Path(folder) / STATED
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stated_ids(stated: dict[str, Any] | None, named: dict[str, int | None]) -> dict[str, int | None]:
    """The special-token ids config.json and a derived generation_config.json state: the named tokens' ids
    (`named`), with the checkpoint's own `bos_token_id` / `pad_token_id` wherever its config.json has the key (a
    null included: transformers reads the file's value, not the tokenizer's)."""
    own = (stated or {}).get("config") or {}
    return {**named, **{k: own[k] for k in ("bos_token_id", "pad_token_id") if k in own}}


def end_ids(stated: EndIds, turn_end: int | None) -> EndIds:
    """The eos ids to export: the checkpoint's (`stated`, an id or a list) with `turn_end` appended when it is
    not among them, a list staying a list; `turn_end` alone when the checkpoint stated none."""
    if stated is None or stated == []:
        return turn_end
    ids = list(stated) if isinstance(stated, list) else [stated]
    if turn_end is not None and turn_end not in ids:
        ids.append(turn_end)
    return ids if isinstance(stated, list) or len(ids) > 1 else ids[0]


def generation_config(stated: dict[str, Any] | None, ids: dict[str, int | None], seq_len: int) -> dict[str, Any]:
    """generation_config.json: the checkpoint's own with its eos list extended by the end of turn (`end_ids`),
    else — no checkpoint, or one without the file — the named special tokens' ids and `max_length`."""
    turn_end = ids.get("eos_token_id")
    own = (stated or {}).get("generation_config")
    if own is not None:
        return {**own, "eos_token_id": end_ids(own.get("eos_token_id", (stated or {}).get("eos_token_id")),
                                               turn_end)}
    eos = end_ids((stated or {}).get("eos_token_id"), turn_end)
    return {"bos_token_id": ids.get("bos_token_id"), "eos_token_id": eos, "pad_token_id": ids.get("pad_token_id"),
            "max_length": seq_len}


def chat_templates(trained: str | None, stated: dict[str, Any] | None) -> str | list[dict[str, str]] | None:
    """tokenizer_config.json's `chat_template`: the one SFT trained with, as the "default" of a list that keeps
    the checkpoint's other named templates when it had any (`named_templates`)."""
    named = (stated or {}).get("chat_templates")
    if trained is None or not named:
        return trained
    return [{"name": name, "template": text} for name, text in {"default": trained, **named}.items()]


def check_end_ids(files: dict[str, EndIds], vocab: int) -> None:
    """Every eos id each file states must be a token of the exported tokenizer (`vocab` ids): raises ValueError
    naming the file and the id (export's own check, before anything is written)."""
    for where, value in files.items():
        ids = value if isinstance(value, list) else [] if value is None else [value]
        outside = [i for i in ids if not 0 <= i < vocab]
        if outside:
            raise ValueError(f"{where}: eos_token_id {outside[0]} is not a token of the exported tokenizer "
                             f"({vocab} tokens); generation could never stop there")
