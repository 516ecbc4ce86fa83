"""`plan` with `model.init.kind: hf` plans the checkpoint's own shape, read from its config.json by the import
code pretraining uses (hf_import.hf_model_config): a probe found it planned the tiny flavor instead (1.8M
parameters for a Llama-2-7B folder), and the shape keys cannot be --set beside a checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specs.init import ModelInitSpec
from specs.pretrain import ModelSpec, ParallelSpec
from tasks.train.planning.cluster import ClusterSpec
from tasks.train.planning.planner import search, validate_layout

ROOT = Path(__file__).resolve().parents[1]
# Llama-2-7B's config.json (the shape fields; no weights: the planner reads none)
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
             "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
             "initializer_range": 0.02, "torch_dtype": "float16"}
LLAMA2_7B_PARAMS = 6_738_415_616  # the published count: 32 blocks of 202.4M, untied 32000 × 4096 table and head


def checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "llama-2-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA2_7B))
    return folder


def test_search_plans_the_checkpoint_shape(tmp_path):
    model = ModelSpec(init=ModelInitSpec(kind="hf", path=str(checkpoint(tmp_path))))
    cluster = ClusterSpec(nodes=4, gpus_per_node=8, device="a100", precision="bf16")
    p = search(model, cluster, vocab_size=32000, seq_len=4096, global_batch=256)
    assert p.params.total == LLAMA2_7B_PARAMS
    assert "layers 32, d_model 4096, heads 32/32 kv, vocab 32000, seq_len 4096" in p.model_name
    assert p.chosen is not None


def test_the_cli_plans_the_checkpoint_not_the_flavor(tmp_path):
    folder = checkpoint(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tasks", "plan", "--nodes", "4", "--gpus-per-node", "8",
                           "--device", "a100", "--global-batch", "256", "--set", "model.init.kind=hf",
                           f"model.init.path={folder}", "mix.seq_len=4096", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["parameters"] == LLAMA2_7B_PARAMS
    assert str(folder) in out["model"] and "tiny" not in out["model"]


def test_the_params_layout_is_checked_against_the_checkpoint_shape(tmp_path):
    model = ModelSpec(init=ModelInitSpec(kind="hf", path=str(checkpoint(tmp_path))))
    assert validate_layout(model, ParallelSpec(dp=4, tp=2), 8) == []
    # 32 heads do not split over tp 64: the spec alone (no shape beside a checkpoint) could not say so
    assert "must divide model n_heads (32)" in validate_layout(model, ParallelSpec(dp=1, tp=64), 64)[0]
