"""Layout planner: memory arithmetic, the seed rule (dp → ZeRO → tp in a node → pp across nodes), rejections."""

from __future__ import annotations

import pytest

from specs.pretrain import ModelSpec, ParallelSpec
from specs.architecture import ModelConfig, ParamCounts, param_counts
from tasks.train.planning.plan_render import render_plan
from tasks.train.planning.planner import GIB, ClusterSpec, candidate_layouts, estimate_memory, plan, validate_layout

GPT2_VOCAB = 50257
SEVEN_B = dict(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32)  # Llama-7B shape
H100_NODE = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=80, device="h100-sxm")


def counts_of(model: ModelSpec, vocab_size: int) -> ParamCounts:
    return param_counts(ModelConfig.from_spec(model, vocab_size, seq_len=1024))  # the count ignores seq_len


def test_param_counts_match_the_flavors():
    gpt2 = counts_of(ModelSpec(flavor="gpt2-124m"), GPT2_VOCAB)
    # 12 blocks × (4·768² attention + 3·768·2048 SwiGLU + 2·768 norms) + 50257·768 tied table + final norm.
    assert gpt2.total == 12 * (4 * 768**2 + 3 * 768 * 2048 + 2 * 768) + GPT2_VOCAB * 768 + 768 == 123_551_232
    assert counts_of(ModelSpec(flavor="gpt2-124m", tie_embeddings=False), GPT2_VOCAB).total == \
        gpt2.total + GPT2_VOCAB * 768
    assert counts_of(ModelSpec(**SEVEN_B), 32000).total == pytest.approx(6.6e9, rel=0.02)


def test_parameter_bytes_are_exact_and_zero_shards_them():
    m = ModelSpec(flavor="gpt2-124m")
    n = counts_of(m, GPT2_VOCAB).total
    kw = dict(vocab_size=GPT2_VOCAB, seq_len=1024, micro_batch=8, precision="bf16", tp=1, pp=1,
              activation_checkpointing=False)
    plain = estimate_memory(m, dp=8, zero_stage=0, **kw)
    assert plain.parameters == 2 * n == 247_102_464  # ≈ 248 MB of bf16 weights
    assert plain.gradients == 2 * n and plain.optimizer == 12 * n  # fp32 master + Adam m, v
    assert estimate_memory(m, dp=8, zero_stage=1, **kw).optimizer == 12 * n // 8
    z2 = estimate_memory(m, dp=8, zero_stage=2, **kw)
    assert (z2.gradients, z2.parameters) == (2 * n // 8, 2 * n)
    z3 = estimate_memory(m, dp=8, zero_stage=3, **kw)
    assert z3.parameters == 2 * n // 8 and z3.activations == plain.activations
    fp32 = estimate_memory(m, dp=1, zero_stage=0, **{**kw, "precision": "fp32"})
    assert (fp32.parameters, fp32.gradients, fp32.optimizer) == (4 * n, 4 * n, 8 * n)


def test_activations_follow_korthikanti_and_shrink_with_tp_pp_and_checkpointing():
    m = ModelSpec(flavor="gpt2-124m")
    kw = dict(vocab_size=GPT2_VOCAB, seq_len=1024, micro_batch=4, precision="bf16", dp=1, zero_stage=0)
    base = estimate_memory(m, tp=1, pp=1, activation_checkpointing=False, fused_attention=False, **kw)
    s, b, h, a, L = 1024, 4, 768, 12, 12
    # pp 1 and a vocabulary tp does not divide: the plain head's fused chunked loss (one 2^25-logit chunk in
    # fp32 + bf16, the hidden states' gradient, the head's fp32 gradient), never the [B, T, V] logits
    logits = (1 << 25) * 6 + s * b * h * 2 + GPT2_VOCAB * h * 4
    assert base.activations == int(s * b * h * (34 + 5 * a * s / h)) * L + logits
    fused = estimate_memory(m, tp=1, pp=1, activation_checkpointing=False, **kw)
    assert fused.activations == s * b * h * 34 * L + logits
    tp2 = estimate_memory(m, tp=2, pp=1, activation_checkpointing=False, **kw)
    assert tp2.activations == s * b * h * (10 + 12) * L + logits
    # sequence parallelism: norms' inputs, dropout masks and (gather_linears) the matmuls' inputs split too: 34/t
    sp2 = estimate_memory(m, tp=2, pp=1, activation_checkpointing=False, sequence_parallel=True, **kw)
    assert sp2.activations == s * b * h * 17 * L + logits
    sp2_ckpt = estimate_memory(m, tp=2, pp=1, activation_checkpointing=True, sequence_parallel=True, **kw)
    assert sp2_ckpt.activations == 2 * s * b * h * L // 2 + s * b * h * 17 + logits  # stored inputs: T/2
    assert estimate_memory(m, tp=1, pp=1, activation_checkpointing=False, sequence_parallel=True,
                           **kw).activations == fused.activations  # no effect at tp = 1
    ckpt = estimate_memory(m, tp=1, pp=1, activation_checkpointing=True, **kw)
    assert ckpt.activations == 2 * s * b * h * L + s * b * h * 34 + logits
    # 1F1B: the first of 4 stages keeps 4 micro-batches of its 3 layers in flight = all 12 layers' worth.
    small_vocab = {**kw, "vocab_size": 256}  # so the last stage's logits do not make it the fullest
    pp4 = estimate_memory(m, tp=1, pp=4, activation_checkpointing=False, grad_accum=8, **small_vocab)
    assert pp4.stage == "first" and pp4.activations == s * b * h * 34 * L


def test_candidates_cover_every_factorization():
    assert sorted(candidate_layouts(1)) == [(1, 1, 1)]
    layouts = candidate_layouts(8)
    assert len(layouts) == 10 and all(dp * tp * pp == 8 for dp, tp, pp in layouts)
    assert layouts[0] == (8, 1, 1)  # least model parallelism first


@pytest.mark.parametrize("flavor", ["tiny", "gpt2-124m"])
def test_small_models_get_pure_data_parallel_on_8_h100(flavor):
    p = plan(ModelSpec(flavor=flavor), H100_NODE, vocab_size=GPT2_VOCAB, seq_len=1024, micro_batch=8)
    c = p.chosen
    assert (c.dp, c.tp, c.pp, c.zero_stage) == (8, 1, 1, 0)
    assert "Data parallel is preferred" in p.why
    text = render_plan(p)
    assert "chosen: dp=8 tp=1 pp=1 zero_stage=0" in text and "why:" in text


def test_tiny_on_one_cpu():
    cpu = ClusterSpec(device="cpu", memory_gb=16, precision="fp32", overhead_gb=0.5, intra_node="shm",
                      inter_node="none")
    p = plan(ModelSpec(flavor="tiny"), cpu, vocab_size=8192, seq_len=256, micro_batch=8)
    assert [(r.dp, r.tp, r.pp, r.zero_stage) for r in p.rows] == [(1, 1, 1, 0)]
    assert p.chosen is p.rows[0]


def test_zero_before_tensor_parallel_when_plain_dp_does_not_fit():
    # 1B on 8 × 12 GiB in DeepSpeed's bf16 section: ZeRO-0 needs ~15 GiB (weights + grads + 12 bytes/param of
    # Adam states), ZeRO-1 fits but all-reduces its buckets and all-gathers the weights after backward with nothing
    # to hide behind (DeepSpeed 0.19.8 under forgeline's config), 4 % behind ZeRO-2, whose all-reduce overlaps the
    # backward (ZeRO-3 within the 2 % tie, the simpler stage wins). Through torch_autocast (what a GPU run does by default) ZeRO-1 keeps fp32
    # weights and gradients whole (8 bytes/param): ZeRO-2 or 3, still no tensor parallelism (ZeRO-3 is 2 %
    # ahead since ZeRO-2's exposed all-gather after the step is priced in the fp32 DeepSpeed sends).
    small = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=12, device="l4", mixed_precision="sections")
    p = plan(ModelSpec(flavor="1b"), small, vocab_size=8192, seq_len=256, micro_batch=8)
    zero0 = next(r for r in p.rows if (r.dp, r.tp, r.pp, r.zero_stage) == (8, 1, 1, 0))
    assert not zero0.fits and "GiB per device" in zero0.reasons[0]
    assert (p.chosen.dp, p.chosen.tp, p.chosen.pp, p.chosen.zero_stage) == (8, 1, 1, 2)
    zero1 = next(r for r in p.rows if (r.dp, r.tp, r.pp, r.zero_stage, r.micro_batch) == (8, 1, 1, 1, 8))
    assert zero1.within_margin and zero1.cost.dp_exposed_s == zero1.cost.dp_comm_s
    assert zero1.cost.s_per_token > 1.02 * p.chosen.cost.s_per_token
    auto = plan(ModelSpec(flavor="1b"), small.model_copy(update={"mixed_precision": "auto"}), vocab_size=8192,
                seq_len=256, micro_batch=8).chosen
    assert (auto.dp, auto.tp, auto.pp) == (8, 1, 1) and auto.zero_stage >= 2
    # A 7B shape on 8 × 32 GiB: only ZeRO-3 keeps it data parallel (23.1 GiB, inside the 85 % margin).
    p7 = plan(ModelSpec(**SEVEN_B), small.model_copy(update={"memory_gb": 32}), vocab_size=32000, seq_len=2048,
              micro_batch=1)
    assert (p7.chosen.tp, p7.chosen.pp, p7.chosen.zero_stage) == (1, 1, 3)
    assert "ZeRO-3 shards" in p7.why
    # On 8 × 24 GiB the same ZeRO-3 layout still fits but uses 96 % of the device: the planner leaves the
    # margin and splits the model over a tensor group instead (the seed rule took the 96 % layout).
    p24 = plan(ModelSpec(**SEVEN_B), small.model_copy(update={"memory_gb": 24}), vocab_size=32000, seq_len=2048,
               micro_batch=1)
    dp_z3 = next(r for r in p24.rows if (r.dp, r.tp, r.pp, r.zero_stage) == (8, 1, 1, 3))
    assert dp_z3.fits and not dp_z3.within_margin and "above the 85% margin" in dp_z3.reasons[0]
    assert p24.chosen.tp > 1 and p24.chosen.within_margin
    assert p24.chosen.memory.total <= 0.85 * 24 * GIB


def test_tensor_parallel_inside_a_node_when_zero_is_not_enough():
    # Activations dominate (ZeRO cannot shard them); tp splits most of them.
    node = ClusterSpec(nodes=1, gpus_per_node=8, memory_gb=32, device="a100")
    p = plan(ModelSpec(flavor="1b"), node, vocab_size=8192, seq_len=2048, micro_batch=16)
    assert not any(r.fits for r in p.rows if r.tp == 1 and r.pp == 1)
    c = p.chosen
    assert c.pp == 1 and c.tp > 1 and c.dp * c.tp == 8
    assert "Tensor parallel" in p.why


def test_pipeline_across_nodes_when_tensor_parallel_in_a_node_is_not_enough():
    two_by_two = ClusterSpec(nodes=2, gpus_per_node=2, memory_gb=40, device="a100")
    p = plan(ModelSpec(flavor="1b"), two_by_two, vocab_size=8192, seq_len=4096, micro_batch=16)
    assert not any(r.fits for r in p.rows if r.pp == 1)
    c = p.chosen
    assert c.pp > 1 and c.zero_stage <= 1 and c.tp <= 2
    assert "pipeline" in p.why and "ZeRO ≤ 1" in p.why
    assert all(r.zero_stage in (None, 0, 1) for r in p.rows if r.pp > 1)  # DeepSpeed's limit


def test_impossible_layouts_are_rejected_with_reasons():
    p = plan(ModelSpec(flavor="gpt2-124m"), ClusterSpec(nodes=2, gpus_per_node=8, memory_gb=80),
             vocab_size=GPT2_VOCAB, seq_len=1024, micro_batch=8)
    reasons = {(r.dp, r.tp, r.pp): " ".join(r.reasons) for r in p.rows if r.zero_stage is None}
    assert "must divide model n_heads (12)" in reasons[(2, 8, 1)]
    assert "16 > 8 devices per node" in reasons[(1, 16, 1)]
    assert "at most model n_layers (12) stages, got 16" in reasons[(1, 1, 16)]
    uneven = next(r for r in p.rows if (r.dp, r.tp, r.pp) == (2, 1, 8))  # 12 blocks over 8 stages: 2 × 4, 1 × 4
    assert uneven.zero_stage is not None and not any("n_layers" in x for x in uneven.reasons)
    too_small = plan(ModelSpec(flavor="1b"), ClusterSpec(memory_gb=4), vocab_size=8192, seq_len=256, micro_batch=8)
    assert too_small.chosen is None and "needs" in too_small.rows[0].reasons[0]
    assert "No layout" in too_small.why and "chosen: none fits" in render_plan(too_small)


def test_validate_layout_adds_world_size_and_node_checks():
    m = ModelSpec(flavor="gpt2-124m")
    assert validate_layout(m, ParallelSpec(dp=2, tp=2, pp=2), 8) == []
    problems = validate_layout(m, ParallelSpec(dp=2, tp=2, pp=2), 4)
    assert problems == ["parallel: dp × tp × pp = 2 × 2 × 2 = 8, but the world size is 4"]
    bad = validate_layout(m, ParallelSpec(dp=1, tp=8, pp=16), 128, gpus_per_node=4)
    assert any(p.startswith("parallel.tp: must divide model n_heads") for p in bad)
    assert any(p.startswith("parallel.pp: at most model n_layers (12) stages") for p in bad)
    assert any("8 > 4 devices per node" in p for p in bad)


def test_cluster_spec_is_strict():
    with pytest.raises(ValueError, match="extra"):
        ClusterSpec(gpus=8)
    assert ClusterSpec(nodes=2, gpus_per_node=8).world_size == 16
    assert all(f.description for f in ClusterSpec.model_fields.values())
    assert GIB == 2**30


def test_plan_cli_options_are_the_cluster_spec_fields(monkeypatch, capsys):
    """`python -m tasks plan`'s cluster options are generated from ClusterSpec: same names, defaults and help."""
    from specs import load_params
    from tasks.__main__ import PLAN_DEFAULTS_FROM_PARAMS, build_parser, cluster_from_args
    from tests.conftest import REPO

    fields = ClusterSpec.model_fields
    params = load_params(REPO / "params.yaml", ["pretrain.precision=fp16", "parallel.dp=2"])
    cluster = cluster_from_args(build_parser().parse_args(["plan"]), params)
    spec_defaults = {name: f.default for name, f in fields.items() if name not in PLAN_DEFAULTS_FROM_PARAMS}
    assert {name: getattr(cluster, name) for name in spec_defaults} == spec_defaults
    assert (cluster.precision, cluster.gpus_per_node) == ("fp16", 2)  # the run's precision and world size
    given = cluster_from_args(build_parser().parse_args(
        ["plan", "--gpus-per-node", "8", "--memory-gb", "24", "--precision", "bf16", "--intra-node", "pcie"]), params)
    assert (given.gpus_per_node, given.memory_gb, given.precision, given.intra_node) == (8, 24.0, "bf16", "pcie")

    monkeypatch.setenv("COLUMNS", "400")  # no wrapping inside a help text (argparse would break "h100-sxm")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, f in fields.items():
        shown = PLAN_DEFAULTS_FROM_PARAMS.get(name, f.default)
        assert f"--{name.replace('_', '-')} " in text and f"{f.description} (default: {shown})" in text, name


def test_plan_cli_reports_an_invalid_cluster_option_by_its_flag(capsys):
    from tasks.__main__ import main
    from tests.conftest import REPO

    assert main(["--root", str(REPO), "plan", "--nodes", "0", "--memory-gb", "0"]) == 2
    err = capsys.readouterr().err
    assert "--nodes: must be ≥ 1, got 0" in err and "--memory-gb: must be > 0.0, got 0.0" in err


def test_plan_json_ranks_every_layout_by_estimated_time(capsys):
    import json

    from tasks.__main__ import main
    from tests.conftest import REPO

    args = ["--root", str(REPO), "plan", "--nodes", "2", "--gpus-per-node", "4", "--device", "a100", "--json",
            "--set", "parallel.dp=8"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    layouts = out["layouts"]
    ranked = [x for x in layouts if x["rank"] is not None]
    assert [x["rank"] for x in ranked] == list(range(1, len(ranked) + 1)) and len(ranked) >= 4
    per_token = [x["estimate"]["step_s"] / x["estimate"]["tokens"] for x in ranked]
    assert per_token == sorted(per_token)
    assert all(x["within_margin"] and x["fits"] for x in ranked)
    rejected = [x for x in layouts if x["rank"] is None]
    assert rejected and all(x["reasons"] for x in rejected)  # every unranked layout says why
    chosen = [x for x in layouts if x["chosen"]]
    # (tiny's 1.8M gradients cross InfiniBand in fp32 under torch_autocast: a 2-stage pipeline edges out dp 8)
    assert len(chosen) == 1 and chosen[0]["dp"] == out["chosen"]["dp"]
    assert per_token[ranked.index(chosen[0])] <= per_token[0] * 1.02  # the fastest, or tied with it
    assert out["cluster"]["device"] == "a100" and "assumed MFU" in out["cost_model"]["basis"]
    assert out["params_layout"] == {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 0, "problems": []}
    # The script-facing summary: candidates = the ranked layouts; the choice's memory (GiB) and step time.
    assert out["candidates"] == ranked
    assert out["chosen"]["memory_gb_per_device"] == pytest.approx(out["chosen"]["memory_gib"]["total"], abs=1e-3)
    assert out["chosen"]["step_time_s"] == pytest.approx(out["chosen"]["estimate"]["step_s"])
    # A global batch of 8 sequences with the params' micro_batch 8 kept (--fix): only dp = 1 layouts run it;
    # searched, the micro-batch shrinks to let every dp of 1–8 run it.
    assert main(args + ["--global-batch", "8", "--fix", "pretrain.micro_batch_size"]) == 0
    fixed = json.loads(capsys.readouterr().out)["layouts"]
    assert {x["dp"] for x in fixed if x["rank"] is not None} == {1}
    assert any("global batch 8 is not a multiple" in " ".join(x["reasons"]) for x in fixed)
    assert main(args + ["--global-batch", "8"]) == 0
    free = json.loads(capsys.readouterr().out)
    assert {x["dp"] for x in free["layouts"] if x["rank"] is not None} == {1, 2, 4, 8}
    assert free["chosen"]["micro_batch"] * free["chosen"]["grad_accum"] * free["chosen"]["dp"] == 8


def test_plan_takes_a_shape_after_one_set_and_counts_sequence_parallelism(capsys):
    """The issue's form: `--set model.n_layers=… model.d_model=… …` (several overrides after one flag) gives a
    70B shape without a params file of its own; with `parallel.sequence_parallel` the same layout needs less
    activation memory (its norms and residual stream hold T/tp tokens)."""
    import json

    from tasks.__main__ import main
    from tests.conftest import REPO

    shape = ["model.n_layers=80", "model.d_model=8192", "model.n_heads=64", "model.n_kv_heads=8",
             "model.ffn_hidden=28672", "mix.seq_len=4096", "mix.tokenizer.vocab_size=32000",
             "pretrain.micro_batch_size=1", "parallel.dp=8", "parallel.tp=8", "parallel.zero_stage=2"]
    acts = {}
    for sp in ("false", "true"):
        args = ["--root", str(REPO), "plan", "--nodes", "8", "--gpus-per-node", "8", "--device", "h100-sxm",
                "--json", "--set", *shape, f"parallel.sequence_parallel={sp}", "--fix",
                "parallel.sequence_parallel", "pretrain.micro_batch_size", "pretrain.activation_checkpointing"]
        assert main(args) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["parameters"] == pytest.approx(69e9, rel=0.01) and "layers 80" in out["model"]
        assert out["params_layout"]["problems"] == []  # the params' own layout (dp 8 × tp 8, ZeRO-2) fits
        same = [x for x in out["layouts"] if (x["dp"], x["tp"], x["pp"], x["zero_stage"]) == (8, 8, 1, 2)]
        acts[sp] = same[0]["memory_gib"]["activations"]
    assert acts["true"] < acts["false"]
