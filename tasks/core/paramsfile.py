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
