"""The planner prices the training mode the engine really runs (bf16 through DeepSpeed's torch_autocast on GPUs
by default: fp32 weights and gradients), and refuses inputs it cannot plan for: a global batch below 1, a
multi-node cluster without a link between nodes, a layout beyond ParallelSpec's limits."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from specs import load_params
from specs.pretrain import ModelSpec, ParallelSpec
from tasks.__main__ import build_parser, cluster_from_args
from tasks.train.planning.cluster import ClusterSpec
from tasks.train.planning.plan_memory import GIB, estimate_memory, state_bytes
from tasks.train.planning.plan_render import explain, finite, plan_dict
from tasks.train.planning.planner import MEMORY_SAFETY, SECTION_STEP_COST, TIE_TOLERANCE, search
from tests.conftest import REPO

SEVEN_B = ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_multiple_of=256,
                    tie_embeddings=False)
ARGS = dict(vocab_size=32000, seq_len=2048, micro_batch=1, precision="bf16", tp=1, pp=1,
            activation_checkpointing=True)


def tasks_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tasks", "plan", *args], cwd=REPO, capture_output=True, text=True)


def states(zero: int, autocast: bool, dp: int = 8, pp: int = 1, precision: str = "bf16"):
    m = estimate_memory(SEVEN_B, dp=dp, zero_stage=zero, autocast=autocast,
                        **{**ARGS, "pp": pp, "precision": precision})
    return m.parameters, m.gradients, m.optimizer, m.params_on_device


@pytest.mark.parametrize("zero, expected", [
    (0, (4, 4, 8, 1, 1, 1)),       # torch AdamW on the fp32 weights: no master copy
    (1, (4, 4, 12, 1, 1, 8)),      # the fp32 flat partition is cloned even from fp32 weights
    (2, (4, 4, 12, 1, 8, 8)),
    (3, (4, 4, 8, 8, 8, 8)),       # ZeRO-3 steps the fp32 weights' own partition
])
def test_torch_autocast_keeps_fp32_weights_and_gradients(zero, expected):
    w, g, o, *div = expected
    weights, grads, optim, n = states(zero, autocast=True)
    assert (weights, grads, optim) == (-(-n * w // div[0]), -(-n * g // div[1]), -(-n * o // div[2]))


def test_the_bf16_section_and_fp32_as_deepspeed_holds_them():
    n = states(0, False)[3]
    assert states(0, False)[:3] == (2 * n, 2 * n, 12 * n)          # FP16_Optimizer-style fp32 master, m, v
    assert states(1, False)[:3] == (2 * n, 2 * n, 12 * n // 8)
    assert states(1, False, precision="fp32")[2] == 12 * n // 8    # the cloned fp32 partition (was 8 bytes)
    assert states(0, False, precision="fp32")[:3] == (4 * n, 4 * n, 8 * n)
    # bf16 section with a pipeline and no ZeRO: DeepSpeed's BF16_Optimizer shards the fp32 master over dp and
    # keeps a bf16 accumulation buffer beside the gradients
    assert state_bytes("bf16", False, 0, pp=2) == (2, 4, 12, False, False, True)
    with pytest.raises(ValueError, match="bf16 only"):
        state_bytes("fp16", True, 0, 1)


def test_a_recipe_that_fits_with_bf16_weights_does_not_with_torch_autocast():
    """7B at ZeRO-1 over 8 × 48 GiB: 2 + 2 + 12/8 bytes per parameter fits inside the margin, the 4 + 4 + 12/8 of
    the engine's default CUDA mode does not. The old accounting priced every bf16 run as the first."""
    cluster = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=48, device="h100-sxm")
    fixed = {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 1, "micro_batch": 1, "checkpointing": "full"}
    kw = dict(vocab_size=32000, seq_len=2048, global_batch=64, fixed=fixed)
    section = search(SEVEN_B, cluster.model_copy(update={"mixed_precision": "sections"}), **kw).chosen
    assert section is not None and section.within_margin
    forced = cluster.model_copy(update={"mixed_precision": "torch_autocast"})
    assert forced.autocast and search(SEVEN_B, forced, **kw).chosen is None
    # left to the engine (auto), the planner falls back to the section and the recipe names it
    fallback = search(SEVEN_B, cluster, **kw)
    assert fallback.chosen.memory.total == section.memory.total and fallback.chosen.within_margin
    assert fallback.chosen.recipe()["pretrain.speed.mixed_precision"] == "sections"
    assert "pretrain.speed.mixed_precision=sections" in fallback.why and not fallback.cluster.autocast
    # the activations: under autocast the residual stream, each recomputed block's kept input, is fp32
    section_kw = {**ARGS, "dp": 8, "zero_stage": 1}
    a, s = (estimate_memory(SEVEN_B, autocast=x, **section_kw).activations for x in (True, False))
    assert a > s


def test_the_mode_follows_the_engine_resolution_and_the_params():
    """The planner's `auto` is the engine's: torch_autocast where dsconfig writes it for CUDA ranks."""
    from specs.batch import BatchGeometry  # noqa: F401  (ds_config's import chain)
    from tasks.train.parallel.dsconfig import ds_config

    params = load_params(REPO / "params.yaml", ["pretrain.precision=bf16", "parallel.accelerator=cuda"])
    assert ds_config(params.pretrain, params.parallel)["torch_autocast"]["enabled"]
    assert ClusterSpec(device="h100-sxm").autocast and not ClusterSpec(device="cpu").autocast
    assert not ClusterSpec(device="a100", precision="fp16").autocast
    args = build_parser().parse_args(["plan", "--device", "a100"])
    assert cluster_from_args(args, params).autocast
    sections = load_params(REPO / "params.yaml", ["pretrain.precision=bf16",
                                                 "pretrain.speed.mixed_precision=sections"])
    assert not cluster_from_args(args, sections).autocast
    forced = build_parser().parse_args(["plan", "--device", "a100", "--mixed-precision", "torch_autocast"])
    assert cluster_from_args(forced, sections).autocast


@pytest.mark.parametrize("batch", ["-8", "0"])
def test_a_global_batch_below_one_is_refused(batch):
    proc = tasks_cli("--global-batch", batch)
    assert proc.returncode == 2 and "--global-batch: must be ≥ 1" in proc.stderr, proc.stderr
    with pytest.raises(ValueError, match="at least 1 sequence"):
        search(ModelSpec(), ClusterSpec(), vocab_size=8192, seq_len=256, global_batch=int(batch))


def test_several_nodes_need_a_link_between_them():
    with pytest.raises(ValidationError, match="'none' is for one node, but nodes = 2"):
        ClusterSpec(nodes=2, inter_node="none")
    proc = tasks_cli("--nodes", "2", "--inter-node", "none", "--json")
    assert proc.returncode == 2 and "--inter-node: 'none' is for one node" in proc.stderr
    assert ClusterSpec(nodes=1, inter_node="none").world_size == 1


def test_json_has_no_infinity_or_nan():
    assert finite({"a": float("inf"), "b": [1.0, float("nan")], "c": "x"}) == {"a": None, "b": [1.0, None],
                                                                               "c": "x"}
    p = search(ModelSpec(), ClusterSpec(device="h100-sxm", inter_node="none", gpus_per_node=2), vocab_size=8192,
               seq_len=256, global_batch=8)
    json.dumps(plan_dict(p, MEMORY_SAFETY, TIE_TOLERANCE), allow_nan=False)
    proc = tasks_cli("--json", "--inter-node", "none", "--device", "h100-sxm", "--gpus-per-node", "2")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout, parse_constant=lambda name: pytest.fail(f"JSON has {name}"))


def test_the_search_keeps_to_parallel_spec_limits():
    """4096 nodes × 3 GPUs with a 3-layer model: dp 12288 would be fastest, but params cap dp at 4096."""
    p = search(ModelSpec(n_layers=3, d_model=512, n_heads=8, n_kv_heads=2),
               ClusterSpec(nodes=4096, gpus_per_node=3, memory_gb=16, device="v100"), vocab_size=65024,
               seq_len=4096, global_batch=24576)
    most = next(m.le for m in ParallelSpec.model_fields["dp"].metadata if hasattr(m, "le"))
    c = p.chosen
    assert c is not None and c.dp <= most
    ParallelSpec(dp=c.dp, tp=c.tp, pp=c.pp, zero_stage=c.zero_stage)   # the recipe loads
    wide = next(r for r in p.rows if r.dp > most)
    assert wide.memory is None and f"parallel.dp: must be ≤ {most}" in wide.reasons[0]


def test_an_overridden_shape_is_labelled_custom():
    custom = ModelSpec(flavor="tiny", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8)
    p = search(custom, ClusterSpec(gpus_per_node=8, device="h100-sxm"), vocab_size=8192, seq_len=256,
               global_batch=8)
    assert p.model_name.startswith("custom shape from tiny (layers 80")
    assert "custom shape from tiny: n_layers 80, n_heads 64, n_kv_heads 8, d_model 8192" in p.why
    assert "model tiny (" not in p.why
    plain = search(ModelSpec(), ClusterSpec(), vocab_size=8192, seq_len=256, global_batch=8)
    assert plain.model_name.startswith("tiny (") and plain.why.startswith("tiny (")
    assert GIB == 1 << 30


def test_a_large_pipeline_bubble_is_warned_with_the_batch_that_shrinks_it():
    # A 70B shape held to pp=8 on 32 devices with a global batch of 16: m = 16 micro-batches, bubble 7/23 = 30 %
    llama70 = ModelSpec(flavor="1b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                        tie_embeddings=False)
    cluster = ClusterSpec(nodes=4, gpus_per_node=8, memory_gb=80, device="h100-sxm")
    p = search(llama70, cluster, vocab_size=32000, seq_len=4096, global_batch=16, fixed={"pp": 8})
    c = p.chosen
    assert c.pp == 8 and c.bubble_share > 0.25
    text = explain(p, llama70, 4096, MEMORY_SAFETY, TIE_TOLERANCE)
    enough = c.micro_batch * 63 * c.dp
    assert f"Warning: a {c.bubble_share:.0%} bubble" in text and f"global batch of {enough} sequences" in text
    # (pp−1)/(m+pp−1) at the batch it names is 10 %
    assert (c.pp - 1) / (enough // (c.micro_batch * c.dp) + c.pp - 1) == pytest.approx(0.1)
    calm = search(llama70, cluster, vocab_size=32000, seq_len=4096, global_batch=256, fixed={"pp": 8})
    assert calm.chosen.bubble_share < 0.25 and "Warning" not in explain(calm, llama70, 4096, MEMORY_SAFETY,
                                                                         TIE_TOLERANCE)


def test_plan_reads_compile_from_the_params_unless_given():
    # eager blocks under torch_autocast hold more bf16 weight copies (plan_memory.autocast_weight_copy_bytes):
    # a run with speed.compile off must be planned eager, as `mixed_precision` is read from the params
    args = build_parser().parse_args(["plan", "--device", "a100"])
    eager = load_params(REPO / "params.yaml", ["pretrain.speed.compile='off'"])
    assert not cluster_from_args(args, eager).compiled
    assert cluster_from_args(args, load_params(REPO / "params.yaml")).compiled  # auto: compiled on GPUs
    forced = build_parser().parse_args(["plan", "--device", "a100", "--compile", "on"])
    assert cluster_from_args(forced, eager).compiled


PYTHIA_6_9B = ["--nodes", "16", "--gpus-per-node", "8", "--memory-gb", "40", "--device", "a100", "--global-batch",
               "1024", "--set", "model.n_layers=32", "model.d_model=4096", "model.n_heads=32", "model.n_kv_heads=32",
               "model.tie_embeddings=false", "mix.seq_len=2048", "mix.tokenizer.vocab_size=50432", "parallel.dp=64",
               "parallel.tp=2", "parallel.pp=1", "parallel.zero_stage=1", "pretrain.micro_batch_size=8",
               "pretrain.activation_checkpointing=true", "--fix", "parallel.dp", "parallel.tp", "parallel.pp",
               "parallel.zero_stage", "pretrain.micro_batch_size", "pretrain.activation_checkpointing"]


def test_a_published_run_over_the_margin_in_torch_autocast_is_planned_in_the_bf16_section(capsys):
    """Pythia-6.9B as EleutherAI trained it (GPT-NeoX's pythia-6.9b.yml: 128 A100 40 GB, tp 2, dp 64, ZeRO-1,
    micro-batch 8, recomputation): 40.2 GiB per device under torch_autocast, so `plan` exited 2 for a run that
    happened (in fp16 sections). Left on `auto`, the planner falls back to the bf16 section and says so; the
    recipe it prints loads as params; forcing torch_autocast still refuses."""
    from tasks.__main__ import main
    root = ["--root", str(REPO), "plan"]
    assert main(root + PYTHIA_6_9B + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    chosen = data["chosen"]
    assert chosen["recipe"]["pretrain.speed.mixed_precision"] == "sections" and chosen["within_margin"]
    assert "pretrain.speed.mixed_precision=sections" in data["why"] and data["cluster"]["training_mode"] == "bf16"
    assert "  speed:\n    mixed_precision: sections" in chosen["params_yaml"]
    params = load_params(REPO / "params.yaml", chosen["set"].split()[1:])
    assert params.pretrain.speed.mixed_precision == "sections" and params.parallel.tp == 2
    assert main(root + PYTHIA_6_9B + ["--mixed-precision", "torch_autocast"]) == 2
    assert "chosen: none fits" in capsys.readouterr().out


def test_a_recipe_that_fits_in_torch_autocast_does_not_name_the_mode():
    """The fallback is only a fallback: a recipe within the margin in the engine's default mode keeps it."""
    cluster = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=80, device="h100-sxm")
    p = search(SEVEN_B, cluster, vocab_size=32000, seq_len=2048, global_batch=64)
    assert p.chosen.within_margin and p.cluster.autocast and p.chosen.mixed_precision is None
    assert "pretrain.speed.mixed_precision" not in p.chosen.recipe()


def test_fixed_axes_that_miss_the_device_count_are_named(capsys):
    from tasks.__main__ import main
    args = ["--root", str(REPO), "plan", "--nodes", "1", "--gpus-per-node", "8", "--device", "a100",
            "--global-batch", "4", "--set", "model.flavor=1b", "parallel.dp=1", "parallel.tp=4", "parallel.pp=1",
            "--fix", "parallel.dp", "parallel.tp", "parallel.pp"]
    assert main(args) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "make dp × tp × pp = 4 devices, but the cluster has 8" in out and "divisibility" not in out


def test_a_device_without_bf16_is_pointed_to_fp16():
    from tasks.train.planning.plan_cost import device_flops
    flops, why = device_flops(ClusterSpec(device="v100", gpus_per_node=8, memory_gb=32))
    assert flops is None and "--precision fp16" in why
    assert device_flops(ClusterSpec(device="v100", precision="fp16"))[0] == 125e12 * 0.5
    assert "--precision fp16" not in device_flops(ClusterSpec(device="no-such-card"))[1]


@pytest.mark.parametrize("device, given, memory", [
    ("a100-sxm4-40gb", None, 40), ("NVIDIA A100-SXM4-80GB", None, 80), ("a100", None, 80), ("l4", None, 24),
    ("h200", None, 141), ("Tesla V100-SXM2-16GB", None, 16), ("NVIDIA GH200 480GB", None, 80),
    ("l4", "20", 20), ("a100-40gb", "80", 80)])
def test_the_memory_of_a_named_device_is_its_own_unless_given(device, given, memory):
    """`--device a100-sxm4-40gb` was planned with the field's default 80 GiB: a silent 2x (the name sets the peak
    only). A size the name states, or the one size the product is sold in, is taken; --memory-gb still wins; a
    GH200's "480GB" counts its CPU's memory, so none is read from it."""
    params = load_params(REPO / "params.yaml")
    args = ["plan", "--device", device] + (["--memory-gb", given] if given else [])
    assert cluster_from_args(build_parser().parse_args(args), params).memory_gb == memory


def test_the_section_replaces_torch_autocast_that_fits_only_by_recomputing_where_it_pays():
    """Nemotron-4 340B's cluster and batch (768 × 8 H100, 2304 sequences): torch_autocast fits only with every
    block recomputed (a third more compute); the bf16 section fits without and is estimated ~27 % faster per
    token, more than its measured per-step cost (SECTION_STEP_COST), so `auto` plans the section and says why.
    With recomputation fixed both modes recompute, the section gains only its halved gradient traffic (< the
    step cost), and torch_autocast stays; on a device with no known FLOP/s there is no speed to weigh."""
    from tests.published_configs import ALL_RUNS
    run = next(r for r in ALL_RUNS if r.name.startswith("Nemotron-4 340B"))
    kw = dict(vocab_size=run.vocab_size, seq_len=run.seq_len, global_batch=run.global_batch)
    auto = search(run.model, run.cluster, **kw)
    autocast = search(run.model, run.in_mode("torch_autocast").cluster, **kw).chosen
    assert autocast.within_margin and autocast.checkpointing == "full" and autocast.mixed_precision is None
    c = auto.chosen
    assert c.within_margin and c.mixed_precision == "sections" and c.checkpointing == "off"
    assert c.recipe()["pretrain.speed.mixed_precision"] == "sections"
    assert c.cost.s_per_token * SECTION_STEP_COST < autocast.cost.s_per_token
    assert "only by recomputing" in auto.why and "pretrain.speed.mixed_precision=sections" in auto.why
    full = search(run.model, run.cluster, fixed={"checkpointing": "full"}, **kw).chosen
    in_section = search(run.model, run.in_mode("sections").cluster, fixed={"checkpointing": "full"}, **kw).chosen
    assert in_section.cost.s_per_token < full.cost.s_per_token              # faster by the model, but not enough
    assert full.mixed_precision is None and full.checkpointing == "full"
    unknown = search(run.model, run.cluster.model_copy(update={"device": "no-such-card"}), **kw).chosen
    assert unknown.mixed_precision is None
