"""README's "Memory per layout" table is what `python -m tasks plan` answers for each row's command (a probe of
the README's recipes could not reproduce its former figures from any command the README gave)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def table_rows() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**Memory per layout**"):]
    section = section[:section.index("\n\n", section.index("| SHAPE |"))]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_table_has_its_rows():
    assert len(table_rows()) == 3


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: r[0].split("`")[1][:24])
def test_each_row_is_what_the_planner_answers(row):
    shape, cluster, batch, recipe, gib = row
    nodes = int(cluster.split("×")[0])
    command = [sys.executable, "-m", "tasks", "plan", "--nodes", str(nodes), "--gpus-per-node", "8", "--device",
               "h100-sxm", "--global-batch", batch, "--set", "mix.seq_len=4096", "mix.tokenizer.vocab_size=128256",
               "pretrain.micro_batch_size=1", "pretrain.activation_checkpointing=true",
               *shape.split("`")[1].split(), "--fix", "pretrain.micro_batch_size",
               "pretrain.activation_checkpointing", "--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = json.loads(done.stdout)["chosen"]
    layout = dict(re.findall(r"(dp|tp|pp) (\d+)", recipe))
    assert {k: chosen[k] for k in layout} == {k: int(v) for k, v in layout.items()}
    assert f"ZeRO-{chosen['zero_stage']}" in recipe
    assert chosen["grad_accum"] == int(re.search(r"accumulation (\d+)", recipe)[1]) if "accumulation" in recipe \
        else chosen["grad_accum"] == 1
    assert round(chosen["memory_gb_per_device"], 2) == float(gib)
