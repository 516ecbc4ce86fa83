"""The recipe search (tasks/train/planning/planner.py search): micro-batch and accumulation from the global batch,
checkpointing and sequence parallelism where memory needs them, `--fix` constraints, the recipe to paste, the
loss's memory, and the `plan` command's exit status."""

from __future__ import annotations

import json

import pytest

from specs import load_params
from specs.pretrain import ModelSpec
from tasks.__main__ import main
from tasks.train.planning.plan_memory import (block_activation_bytes, estimate_memory, loss_activation_bytes,
                                     loss_implementation)
from tasks.train.planning.plan_render import params_fragment, set_line
from tasks.train.planning.planner import ClusterSpec, batch_splits, search
from tests.conftest import REPO

SEVEN_B = ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32)
H100_NODE = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=80, device="h100-sxm")


def test_batch_splits_divide_the_global_batch():
    assert batch_splits(64, 8, {}) == ([(1, 8), (2, 4), (4, 2), (8, 1)], "")
    assert batch_splits(96, 8, {}) == ([(1, 12), (2, 6), (4, 3)], "")          # 12 per replica: 1, 2, 4
    assert batch_splits(96, 8, {"micro_batch": 3}) == ([(3, 4)], "")          # a fixed size need not be 2^k
    assert batch_splits(64, 8, {"grad_accum": 2}) == ([(4, 2)], "")
    assert batch_splits(60, 8, {})[1] == "global batch 60 is not a multiple of dp 8"
    assert "micro_batch 16 × dp 8" in batch_splits(64, 8, {"micro_batch": 16})[1]
    with pytest.raises(ValueError, match="must be fixed"):
        batch_splits(None, 8, {"micro_batch": 2})


def test_search_shrinks_the_micro_batch_and_recomputes_only_when_memory_needs_it():
    # 7B data parallel on 8 × 40 GiB at 256 sequences of 2048: params' micro-batch 8 without recomputation
    # fits no ZeRO stage (~73 GiB of activations alone).
    small = H100_NODE.model_copy(update={"memory_gb": 40})
    dp_only = {"tp": 1, "pp": 1}
    kept = search(SEVEN_B, small, vocab_size=32000, seq_len=2048, global_batch=256,
                  fixed={**dp_only, "micro_batch": 8, "checkpointing": "off"})
    assert kept.chosen is None
    p = search(SEVEN_B, small, vocab_size=32000, seq_len=2048, global_batch=256, fixed=dp_only)
    # Under torch_autocast no micro-batch fits without recomputation since the bf16 weight copies (12 GiB at
    # micro-batch 1, tests/test_plan_weight_copies.py) are priced: micro-batch 8 is kept, recomputed.
    assert p.chosen.micro_batch < 8 or p.chosen.checkpointing == "full"
    c = p.chosen
    assert c.within_margin and c.micro_batch * c.grad_accum * c.dp == 256
    # every recipe the search priced keeps the global batch
    assert all(r.micro_batch * r.grad_accum * r.dp == 256 for r in p.rows if r.memory is not None)
    assert {r.checkpointing for r in p.rows if r.memory is not None} == {"off", "full"}
    # with recomputation off the same layout fits only at a smaller micro-batch, or not at all
    if c.checkpointing == "full":
        plain = [r for r in p.rows if (r.dp, r.tp, r.pp) == (c.dp, c.tp, c.pp) and r.checkpointing == "off"]
        assert not any(r.within_margin for r in plain)


def test_fixed_keys_are_kept():
    p = search(SEVEN_B, H100_NODE, vocab_size=32000, seq_len=2048, global_batch=64,
               fixed={"checkpointing": True, "zero_stage": 1, "tp": 2})
    priced = [r for r in p.rows if r.memory is not None]
    assert priced and all(r.checkpointing == "full" and r.tp == 2 for r in priced)
    assert all(r.zero_stage == 1 for r in priced)    # dp 1 too: a fixed key is never changed
    assert p.fixed == {"checkpointing": True, "zero_stage": 1, "tp": 2}


def test_small_model_stays_data_parallel_with_its_largest_micro_batch():
    """No tp or pp it does not need, and no recomputation; among tying micro-batches, the largest."""
    p = search(ModelSpec(flavor="gpt2-124m"), H100_NODE, vocab_size=50304, seq_len=1024, global_batch=128)
    c = p.chosen
    assert (c.dp, c.tp, c.pp, c.checkpointing, c.sequence_parallel) == (8, 1, 1, "off", False)
    assert c.micro_batch == 16 and c.grad_accum == 1


def test_sequence_parallel_is_chosen_for_memory_not_for_speed():
    # It moves more bytes (backward re-gathers), so it is taken only where it is what fits without
    # recomputation: a 70B shape on one node of 8 × 80 GiB with tp 8 and a micro-batch of 1 at 4096 tokens.
    llama70 = ModelSpec(flavor="1b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                        tie_embeddings=False)
    two_nodes = H100_NODE.model_copy(update={"nodes": 4})
    p = search(llama70, two_nodes, vocab_size=32000, seq_len=4096, global_batch=64, fixed={"tp": 8, "pp": 1})
    rows = {(r.sequence_parallel, r.checkpointing): r for r in p.rows if r.memory is not None and r.micro_batch == 1
            and r.zero_stage == 3}
    assert rows[(True, "off")].memory.activations < rows[(False, "off")].memory.activations
    assert rows[(True, "off")].cost.tp_comm_s > rows[(False, "off")].cost.tp_comm_s


def test_recipe_pastes_back_into_params():
    p = search(SEVEN_B, H100_NODE.model_copy(update={"nodes": 2}), vocab_size=32000, seq_len=2048, global_batch=64)
    line, fragment = set_line(p.chosen), params_fragment(p.chosen)
    assert line.startswith("--set parallel.dp=") and "pretrain.activation_checkpointing=" in line
    params = load_params(REPO / "params.yaml", line.split()[1:])
    c = p.chosen
    assert (params.parallel.dp, params.parallel.tp, params.parallel.pp, params.parallel.zero_stage) == \
        (c.dp, c.tp, c.pp, c.zero_stage)
    assert (params.pretrain.micro_batch_size, params.pretrain.grad_accum) == (c.micro_batch, c.grad_accum)
    assert params.pretrain.activation_checkpointing == (c.checkpointing == "full")
    assert fragment.splitlines()[0] == "parallel:" and "pretrain:" in fragment.splitlines()
    assert f"  micro_batch_size: {c.micro_batch}" in fragment


def test_loss_memory_follows_the_loss_the_engine_runs():
    tokens, vocab, d = 4 * 8192, 128256, 4096
    assert loss_activation_bytes(tokens, vocab, d, 2, "materialised") == tokens * vocab * 6
    chunked = loss_activation_bytes(tokens, vocab, d, 2, "chunked")
    # one 2^25-logit chunk (fp32 + bf16), dx [tokens, d] in bf16, the head's fp32 gradient [V, d]
    assert chunked == (1 << 25) * 6 + tokens * d * 2 + vocab * d * 4
    assert loss_activation_bytes(10, 100, d, 2, "chunked") == 10 * 100 * 6 + 10 * d * 2 + 100 * d * 4
    with pytest.raises(ValueError):
        loss_activation_bytes(tokens, vocab, d, 2, "fused")
    # the plain head runs the fused chunked loss; a pipeline's loss_fn and a vocab-parallel head take logits
    assert loss_implementation(pp=1, vocab_split=1) == "chunked"
    assert loss_implementation(pp=2, vocab_split=1) == loss_implementation(1, 4) == "materialised"
    args = dict(vocab_size=vocab, seq_len=8192, micro_batch=4, precision="bf16", dp=1, tp=1, zero_stage=0,
                activation_checkpointing=True)
    plain = estimate_memory(SEVEN_B, pp=1, **args)
    last = estimate_memory(SEVEN_B, pp=2, grad_accum=1, **args)   # 1 in flight: the head's stage is the fullest
    assert last.stage == "last"
    # full recomputation: one kept input per block (bf16 [B, T, d]) + one block's working set
    kept = 2 * tokens * 4096 + block_activation_bytes(8192, 4, 4096, 32, 1, 2, True)
    assert plain.activations == 31 * 2 * tokens * 4096 + kept + chunked
    assert last.activations == 15 * 2 * tokens * 4096 + kept + tokens * vocab * 6


def test_selective_checkpointing_lies_between_off_and_full():
    args = dict(vocab_size=32000, seq_len=2048, micro_batch=2, precision="bf16", dp=8, tp=1, pp=1, zero_stage=1)
    off, sel, full = (estimate_memory(SEVEN_B, activation_checkpointing=m, **args).activations
                      for m in ("off", "selective", "full"))
    assert full < sel < off


def test_first_stage_keeps_the_micro_batches_in_flight():
    args = dict(vocab_size=32000, seq_len=2048, micro_batch=1, precision="bf16", dp=1, tp=1, pp=4, zero_stage=0,
                activation_checkpointing="off")
    two, eight, sixteen = (estimate_memory(SEVEN_B, grad_accum=m, **args) for m in (2, 8, 16))
    assert two.stage == "first"
    assert eight.activations == pytest.approx(2 * two.activations, rel=1e-6)   # min(pp, m): 2 then 4
    assert sixteen.activations == eight.activations                              # never more than pp


def test_plan_exits_0_with_a_found_recipe_whatever_params_layout_says(capsys):
    args = ["--root", str(REPO), "plan", "--nodes", "2", "--gpus-per-node", "8", "--device", "h100-sxm",
            "--global-batch", "64"]
    assert main(args) == 0  # params.yaml's own layout is dp 1 on 16 devices: reported, not fatal
    out = capsys.readouterr().out
    assert "paste as overrides:" in out and "--set parallel.dp=" in out and "\n  parallel:\n" in out
    assert "params.yaml's own layout" in out and "the recipe above replaces it" in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"]["recipe"]["parallel.dp"] * data["chosen"]["recipe"]["parallel.tp"] * \
        data["chosen"]["recipe"]["parallel.pp"] == 16
    assert data["chosen"]["set"].startswith("--set ") and data["global_batch"] == 64
    assert data["params_layout"]["problems"]   # the params' layout is still reported as wrong for 16 devices


def test_plan_refuses_unknown_fix_keys_and_reports_nothing_fits(capsys):
    assert main(["--root", str(REPO), "plan", "--fix", "pretrain.steps"]) == 2
    assert "--fix pretrain.steps: not a recipe key" in capsys.readouterr().err
    args = ["--root", str(REPO), "plan", "--device", "h100-sxm", "--memory-gb", "0.01"]
    assert main(args) == 2 and "chosen: none fits" in capsys.readouterr().out


def test_a_fixed_zero_stage_is_kept_at_dp_1():
    # A probe fixed zero_stage 1 with dp 1 and got a ZeRO-0 recipe under a "fixed: zero_stage=1" header.
    # DeepSpeed runs ZeRO-1 on one data-parallel rank (a partition of the whole), so the fix is honoured.
    c = ClusterSpec(nodes=1, gpus_per_node=8, device="h100-sxm", memory_gb=80, precision="bf16")
    p = search(SEVEN_B, c, vocab_size=32000, seq_len=2048, global_batch=64, fixed={"zero_stage": 1, "dp": 1})
    assert p.chosen is not None and (p.chosen.dp, p.chosen.zero_stage) == (1, 1)
    assert {r.zero_stage for r in p.rows if r.zero_stage is not None} == {1}
