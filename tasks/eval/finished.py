"""Which model a run finished with: the preference-tuned one (data/prefer/) when that stage trained, else SFT's
(the prefer stage switched off writes no model). Export publishes it; the benchmark scores it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def finished_model(paths: Any) -> tuple[Path, str]:
    """(folder, stage) of the finished model, for a stage whose upstream holds sft and prefer (`paths`: its
    StagePaths). prefer's report says whether it trained; its folder then holds the same files as sft's."""
    tuned = paths.input("prefer")
    report = tuned / "report.json"
    if report.is_file() and json.loads(report.read_text()).get("enabled"):
        return tuned, "prefer"
    return paths.input("sft"), "sft"
