"""Apply validated overrides to params.yaml in place (comments and layout kept), like `dvc exp run -S`.

Writing overrides into the file — instead of passing them around in memory — is what keeps a run
reproducible: `dvc repro` afterwards sees the same params, and `dvc params diff` shows what changed.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from specs import Params, load_params
from tasks.core.files import write_text_atomic


def write_overrides(path: Path, overrides: dict[str, Any]) -> Params:
    """Validate `overrides` against the schema, then write them into `path`. Raises ParamsError first."""
    params = load_params(path, overrides)
    if not overrides:
        return params
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip mode: keeps comments, key order and flow style
    yaml.preserve_quotes = True
    doc = yaml.load(path.read_text(encoding="utf-8"))
    for key, value in overrides.items():
        value = _quoted_if_ambiguous(value)
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    out = io.StringIO()
    yaml.dump(doc, out)
    write_text_atomic(path, out.getvalue())
    return params


def _quoted_if_ambiguous(value: Any) -> Any:
    """A string YAML 1.1 would read as something else (`yes`, `on`, `010`, `1:20`) written double-quoted:
    ruamel's round-trip dump (YAML 1.2) writes `yes` bare, which the next load refuses (PyYAML reads True, DVC
    'yes'); lists and mappings are walked. Other values as they are."""
    import yaml as pyyaml
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, str):
        try:
            plain = pyyaml.safe_load(value) == value
        except pyyaml.YAMLError:
            plain = False
        return value if plain and "\n" not in value else DoubleQuotedScalarString(value)
    if isinstance(value, list):
        return [_quoted_if_ambiguous(v) for v in value]
    if isinstance(value, dict):
        return {k: _quoted_if_ambiguous(v) for k, v in value.items()}
    return value
