"""The exported model's README.md (its model card): YAML front matter, the model's shape, one section per entry of
the card the export stage assembles (lineage, params, metrics, ...), the files' hashes and usage. Split from
hf_export.py, which writes it beside the weights; deterministic (no timestamps), as the rest of the folder.
"""

from __future__ import annotations

from typing import Any

RESERVED_CARD_KEYS = ("name", "description", "license")


def _cell(value: Any) -> str:
    """One markdown table cell: short floats, no pipes or newlines that would break the table."""
    if value is None:
        text = "—"
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(_cell(v) for v in value)
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key in sorted(data, key=str):
        value = data[key]
        name = f"{prefix}{key}"
        rows.extend(_flatten(value, f"{name}.") if isinstance(value, dict) and value else [(name, value)])
    return rows


def _section(title: str, value: Any) -> list[str]:
    """A card section: dict -> key/value table (nested keys dotted, sorted), list of dicts -> table, else text."""
    lines = [f"## {title}", ""]
    if isinstance(value, dict):
        lines += ["| key | value |", "|---|---|"] + [f"| {_cell(k)} | {_cell(v)} |" for k, v in _flatten(value)]
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        cols: list[str] = []
        for row in value:
            cols += [c for c in row if c not in cols]
        lines += ["| " + " | ".join(_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(row.get(c)) for c in cols) + " |" for row in value]
    elif isinstance(value, list):
        lines += [f"- {_cell(v)}" for v in value]
    else:
        lines.append(str(value))
    return lines + [""]


def render_card(card: dict[str, Any], config: dict[str, Any], n_params: int, files: dict[str, dict]) -> str:
    """README.md: YAML front matter, title, description, the model's shape, then one section per remaining
    `card` entry in the given order (e.g. lineage, params, metrics), the exported files' hashes and usage."""
    name = str(card.get("name", "forgeline model"))
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation",
             f"license: {card.get('license', 'other')}", "tags:", "- forgeline", "- llama", "---", "",
             f"# {name}", ""]
    if card.get("description"):
        lines += [str(card["description"]), ""]
    shape = {k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "vocab_size", "max_position_embeddings", "rope_theta",
                                    "rms_norm_eps", "tie_word_embeddings")}
    lines += _section("Model", {"architecture": "LlamaForCausalLM", "parameters": f"{n_params:,}", **shape})
    for key, value in card.items():
        if key not in RESERVED_CARD_KEYS:
            lines += _section(key.replace("_", " ").capitalize(), value)
    lines += _section("Files", [{"file": f, "sha256": r["sha256"], "bytes": r["bytes"]} for f, r in files.items()])
    lines += ["## Usage", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
              'tok = AutoTokenizer.from_pretrained("path/to/this/folder")',
              'model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")', "```", ""]
    return "\n".join(lines)
