"""Recipe planner: every training recipe (dp × tp × pp layout, ZeRO stage, micro-batch, gradient accumulation,
activation checkpointing, sequence parallelism) that can run a model on a cluster at a global batch, its memory
per device (tasks/train/planning/plan_memory.py) and estimated step time (tasks/train/planning/plan_cost.py), and the choice:
the fastest recipe that fits with a safety margin.

Used by `python -m tasks plan` before a run and by `plan --measure` for its candidates. Rendering and the
explanation are tasks/train/planning/plan_render.py. All sizes are bytes; GiB (2**30) only when rendered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specs.pretrain import ModelSpec, ParallelSpec, layout_problems, shape_problems
from tasks.train.planning.cluster import ClusterSpec
from specs.architecture import ModelConfig, flops_per_token, param_counts
from tasks.train.planning.plan_cost import (CHECKPOINTING, checkpoint_mode, estimate_step, gradient_comm_bytes,
                                            stage_blocks)
from tasks.train.planning.plan_memory import (BYTES_PER_PARAM, GIB, MemoryEstimate, block_activation_bytes,
                                              estimate_memory, model_config, tied_gradient_bytes)
from tasks.train.planning import plan_render
from tasks.train.planning.plan_result import Plan, PlanRow

# A recipe is ranked by speed only while its estimate leaves this share of the device free: the memory model
# ignores allocator fragmentation spikes, NCCL's lazily grown buffers and the temporary buffers of the loss.
MEMORY_SAFETY = 0.85
# Estimated times within this of the fastest count as a tie (the model is not that precise): the tie goes to
# the simplest recipe (TIE_ORDER).
TIE_TOLERANCE = 0.02
# The checkpointing modes the search draws from: what the engine runs (`pretrain.activation_checkpointing` is
# a bool: off or every block). "selective" (every other block) is priced by plan_cost/plan_memory but has no
# params key yet; add it here when the engine grows one.
ENGINE_CHECKPOINTING = ("off", "full")
# The bf16 section's engine step against torch_autocast's on the same model (one H200, issue #29: 0.73–0.77× of a
# plain loop against 0.83×), a cost the step model does not price: the section replaces a torch_autocast recipe
# that fits only by recomputing only when its estimate is faster by more than the worst of that ratio.
SECTION_STEP_COST = 0.83 / 0.73
__all__ = ["BYTES_PER_PARAM", "GIB", "MEMORY_SAFETY", "ClusterSpec", "MemoryEstimate", "Plan", "PlanRow",
           "block_activation_bytes", "candidate_layouts", "estimate_memory", "plan", "search", "stage_blocks",
           "validate_layout"]


def candidate_layouts(world_size: int) -> list[tuple[int, int, int]]:
    """Every (dp, tp, pp) with dp·tp·pp = world_size, least model parallelism first (pp, then tp)."""
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    return [(world_size // (pp * tp), tp, pp) for pp in divisors for tp in divisors if (world_size // pp) % tp == 0]


def spec_limit_problems(layout: tuple[int, int, int]) -> list[str]:
    """Why ParallelSpec's own bounds refuse a (dp, tp, pp), as params validation would (read from its fields)."""
    problems = []
    for axis, value in zip(("dp", "tp", "pp"), layout):
        for bound in ParallelSpec.model_fields[axis].metadata:
            if (most := getattr(bound, "le", None)) is not None and value > most:
                problems.append(f"parallel.{axis}: must be ≤ {most} (ParallelSpec), got {value}")
    return problems


def tp_node_problem(tp: int, gpus_per_node: int) -> str | None:
    """Why a tensor group of `tp` cannot stay inside a node, or None."""
    # DeepSpeed's PipeModelDataParallelTopology orders ranks [pipe, data, model]: a tensor group is tp
    # consecutive ranks, which stay on one node when tp divides the devices per node. It all-reduces inside every
    # layer, so it must not cross the (slower) inter-node link.
    if tp > gpus_per_node:
        return f"parallel.tp: {tp} > {gpus_per_node} devices per node (tensor parallel stays inside a node)"
    if gpus_per_node % tp:
        return f"parallel.tp: must divide the {gpus_per_node} devices per node, got {tp}"
    return None


def validate_layout(model: ModelSpec, parallel: ParallelSpec, world_size: int,
                    gpus_per_node: int | None = None) -> list[str]:
    """Why `parallel` cannot run `model` on `world_size` ranks (empty when it can), each naming the params key."""
    problems = layout_problems(model, parallel)
    if model.init.kind == "hf":  # the spec cannot see a checkpoint's shape (layout_problems): its config.json can
        c = model_config(model, 0, 0)
        problems += shape_problems(c.n_heads, c.n_kv_heads, c.ffn_hidden, c.n_layers, parallel,
                                   "the checkpoint's intermediate_size")
    if parallel.world_size != world_size:
        problems.append(f"parallel: dp × tp × pp = {parallel.dp} × {parallel.tp} × {parallel.pp} = "
                        f"{parallel.world_size}, but the world size is {world_size}")
    if gpus_per_node is not None and (p := tp_node_problem(parallel.tp, gpus_per_node)):
        problems.append(p)
    return problems


def tie_order(r: PlanRow) -> tuple:
    """The simplest recipe first: least model parallelism, lowest ZeRO stage, least recomputation, no sequence
    parallelism, then the largest micro-batch (fewer, larger kernels: the cost model gives them no credit)."""
    return (r.pp, r.tp, r.zero_stage, CHECKPOINTING.index(r.checkpointing or "off"), r.sequence_parallel,
            -(r.micro_batch or 0))


def rank_rows(rows: list[PlanRow]) -> tuple[list[PlanRow], PlanRow | None]:
    """The eligible rows, fastest first, and the choice: the fastest within TIE_TOLERANCE, the tie going to
    `tie_order`. Eligible: fits with the safety margin, or (when none does) fits at all; without time estimates
    (no peak FLOP/s for the device) `tie_order` alone ranks them."""
    pool = [r for r in rows if r.within_margin] or [r for r in rows if r.fits]
    if not pool:
        return [], None
    if any(r.cost is None for r in pool):
        ranked = sorted(pool, key=tie_order)
        return ranked, ranked[0]
    ranked = sorted(pool, key=lambda r: (r.cost.s_per_token, tie_order(r)))
    best = ranked[0].cost.s_per_token
    return ranked, min((r for r in ranked if r.cost.s_per_token <= best * (1 + TIE_TOLERANCE)), key=tie_order)


@dataclass(frozen=True)
class _Shape:
    """What every recipe of one model shares: sizes and FLOPs, computed once per search."""

    cfg: ModelConfig                # the shape's keys, or a checkpoint's config.json (plan_memory.model_config)
    ffn_from: str                   # where the SwiGLU width comes from, for shape_problems' messages
    vocab_size: int
    seq_len: int
    n_layers: int
    d_model: int
    flops_per_token: int
    head_flops_per_token: int       # the output projection's 6·V·d: the last pipeline stage's extra work
    fused_attention: bool
    block_linear: int               # one block's linears (matrices and biases): what torch_autocast reduces in bf16


def _price(shape: _Shape, cluster: ClusterSpec, layout: tuple[int, int, int], zero: int, micro_batch: int,
           grad_accum: int, checkpointing: str, sequence_parallel: bool) -> PlanRow:
    """Memory and estimated step time of one recipe."""
    dp, tp, pp = layout
    mem_limit = cluster.memory_gb * GIB
    est = estimate_memory(shape.cfg, shape.vocab_size, shape.seq_len, micro_batch, cluster.precision, dp, tp,
                          pp, zero, checkpointing, grad_accum, int(cluster.overhead_gb * GIB),
                          shape.fused_attention, sequence_parallel, cluster.autocast, cluster.compiled)
    fits = est.total <= mem_limit
    why_not = [] if fits else [f"needs {est.total / GIB:.1f} GiB > {cluster.memory_gb:g} GiB per device"]
    if fits and est.total > MEMORY_SAFETY * mem_limit:
        why_not.append(f"{est.total / mem_limit:.0%} of the device: above the {MEMORY_SAFETY:.0%} margin")
    w_bytes = BYTES_PER_PARAM[cluster.precision]  # the compute precision of activations
    blocks = stage_blocks(shape.n_layers, pp)
    linear = (blocks[-1] if est.stage == "last" else blocks[0]) * -(-shape.block_linear // tp)
    grad_bytes = gradient_comm_bytes(est.params_on_device, linear, cluster.precision, cluster.autocast, zero, tp)
    weight_bytes = est.params_on_device * (4 if cluster.autocast else w_bytes)  # fp32 weights under autocast
    cost = estimate_step(cluster, flops_per_token=shape.flops_per_token, n_layers=shape.n_layers,
                         d_model=shape.d_model, act_bytes=w_bytes, grad_bytes_on_device=grad_bytes,
                         weight_bytes_on_device=weight_bytes,
                         dp=dp, tp=tp, pp=pp, zero_stage=zero, micro_batch=micro_batch, seq_len=shape.seq_len,
                         grad_accum=grad_accum, activation_checkpointing=checkpointing,
                         head_flops_per_token=shape.head_flops_per_token, sequence_parallel=sequence_parallel,
                         tied_grad_bytes=tied_gradient_bytes(shape.cfg, cluster.precision, cluster.autocast, zero,
                                                             tp, pp))
    return PlanRow(dp, tp, pp, zero, est, fits, why_not, cost, within_margin=est.total <= MEMORY_SAFETY * mem_limit,
                   grad_accum=grad_accum, micro_batch=micro_batch, checkpointing=checkpointing,
                   sequence_parallel=sequence_parallel)


def batch_splits(global_batch: int | None, dp: int, fixed: Mapping[str, Any]) -> tuple[list[tuple[int, int]], str]:
    """(micro_batch, grad_accum) pairs a replica of a dp-wide layout can run, or [] and why not.

    With a global batch: micro-batches of 1, 2, 4, … (and a fixed one) that divide its share per replica, the
    accumulation the rest. Without one (the old per-layout mode), the fixed micro-batch and accumulation."""
    mb, ga = fixed.get("micro_batch"), fixed.get("grad_accum")
    if global_batch is None:
        if mb is None or ga is None:
            raise ValueError("without a global batch, micro_batch and grad_accum must be fixed")
        return [(mb, ga)], ""
    if global_batch % dp:
        return [], f"global batch {global_batch} is not a multiple of dp {dp}"
    per_replica = global_batch // dp
    sizes = sorted({1 << k for k in range(per_replica.bit_length()) if per_replica % (1 << k) == 0}
                   | ({mb} if mb else set()))
    pairs = [(b, per_replica // b) for b in sizes if per_replica % b == 0 and (mb is None or b == mb)
             and (ga is None or per_replica // b == ga)]
    if not pairs:
        return [], (f"global batch {global_batch} is not a multiple of micro_batch {mb} × dp {dp}"
                    + (f" × grad_accum {ga}" if ga else ""))
    return pairs, ""


def _layout_options(shape: _Shape, cluster: ClusterSpec, seq_len: int, layout: tuple[int, int, int],
                    global_batch: int | None, fixed: Mapping[str, Any], checkpointing: tuple[str, ...]):
    """(problems, recipe options) of one layout: options are (zero, micro_batch, grad_accum, mode, sp)."""
    dp, tp, pp = layout
    c = shape.cfg
    problems = spec_limit_problems(layout) + shape_problems(
        c.n_heads, c.n_kv_heads, c.ffn_hidden, c.n_layers, ParallelSpec.model_construct(dp=dp, tp=tp, pp=pp),
        shape.ffn_from)
    if p := tp_node_problem(tp, cluster.gpus_per_node):
        problems.append(p)
    splits, why = batch_splits(global_batch, dp, fixed)
    if why:
        problems.append(why)
    # ZeRO shards over dp (nothing to shard at dp = 1, so the search skips it there); DeepSpeed allows ZeRO ≤ 1
    # with a pipeline. A fixed stage is kept even at dp = 1, where DeepSpeed runs it on one rank: a recipe that
    # silently changed it would contradict the "fixed:" line above it.
    zeros = [0] if dp == 1 else ([0, 1] if pp > 1 else [0, 1, 2, 3])
    if "zero_stage" in fixed:
        zeros = [fixed["zero_stage"]]
        if pp > 1 and fixed["zero_stage"] > 1:
            problems.append(f"parallel.zero_stage {fixed['zero_stage']}: DeepSpeed allows ZeRO ≤ 1 with a pipeline")
    modes = [checkpoint_mode(fixed["checkpointing"])] if "checkpointing" in fixed else list(checkpointing)
    sps = [False] if tp == 1 else [fixed["sequence_parallel"]] if "sequence_parallel" in fixed else [False, True]
    if True in sps and seq_len % tp:
        sps.remove(True)
        if not sps:
            problems.append(f"parallel.sequence_parallel: seq_len {seq_len} is not a multiple of tp {tp}")
    options = [(z, mb, ga, mode, sp) for z in zeros for mb, ga in splits for mode in modes for sp in sps]
    return problems, options


def search(model: ModelSpec, cluster: ClusterSpec, *, vocab_size: int, seq_len: int,
           global_batch: int | None = None, fixed: Mapping[str, Any] | None = None, fused_attention: bool = True,
           checkpointing: tuple[str, ...] = ENGINE_CHECKPOINTING) -> Plan:
    """Price every recipe and choose: the lowest estimated time per token among those that fit with
    MEMORY_SAFETY headroom (ties: `tie_order`).

    `global_batch`: sequences per optimizer step, shared by every recipe (micro_batch × grad_accum × dp); None
    keeps the fixed micro_batch and grad_accum per replica, so the global batch grows with dp (compare by time
    per token). `fixed`: recipe fields (RECIPE_KEYS' names: dp, tp, pp, zero_stage, micro_batch, grad_accum,
    checkpointing as a mode or bool, sequence_parallel) the search must keep."""
    if global_batch is not None and global_batch < 1:
        raise ValueError(f"global batch: at least 1 sequence per step, got {global_batch}")
    fixed = dict(fixed or {})
    # A checkpoint's shape (and vocabulary: its embedding rows) is its config.json's, read once here.
    cfg = model_config(model, vocab_size, seq_len)
    vocab_size, counts = cfg.vocab_size, param_counts(cfg)
    ffn_from = ("the checkpoint's intermediate_size" if model.init.kind == "hf" else "model.ffn_hidden"
                if model.ffn_hidden else "model.d_model and model.ffn_multiple_of")
    shape = _Shape(cfg, ffn_from, vocab_size, seq_len, cfg.n_layers, cfg.d_model, flops_per_token(cfg),
                   6 * vocab_size * cfg.d_model, fused_attention, counts.block_matrices + counts.block_biases)
    rows: list[PlanRow] = []
    for layout in candidate_layouts(cluster.world_size):
        if any(fixed.get(axis, v) != v for axis, v in zip(("dp", "tp", "pp"), layout)):
            continue
        problems, options = _layout_options(shape, cluster, seq_len, layout, global_batch, fixed, checkpointing)
        if problems or not options:
            rows.append(PlanRow(*layout, None, None, False, problems or ["no recipe left by the fixed keys"]))
            continue
        rows += [_price(shape, cluster, layout, *option) for option in options]
    ranked, chosen = rank_rows(rows)
    name = (f"{plan_render.model_label(model, detail=False)} (layers {cfg.n_layers}, d_model {cfg.d_model}, "
            f"heads {cfg.n_heads}/{cfg.n_kv_heads} kv, vocab {vocab_size}, seq_len {seq_len})")
    result = Plan(name, counts, cluster, rows, chosen, "", ranked, plan_render.cost_basis(cluster), global_batch,
                  fixed)
    result.why = plan_render.explain(result, model, seq_len, MEMORY_SAFETY, TIE_TOLERANCE)
    return _bf16_section_fallback(result, model, vocab_size=vocab_size, seq_len=seq_len, global_batch=global_batch,
                                  fixed=fixed, fused_attention=fused_attention, checkpointing=checkpointing)


def _bf16_section_fallback(result: Plan, model: ModelSpec, **search_args: Any) -> Plan:
    """`result`, or the plan in DeepSpeed's bf16 section (bf16 weights and gradients, the fp32 master in the
    optimizer) where the mode is left to the engine (`mixed_precision: auto`) and the engine's default bf16 mode
    on GPUs (torch_autocast: fp32 weights and gradients, a bf16 copy of the block weights per micro-batch in
    flight) either fits no recipe within the margin (the section's recipe, when it fits better), or fits only by
    recomputing and the section's recipe is estimated faster even after `SECTION_STEP_COST`. Its recipe then
    sets the mode.

    Only in those cases: where torch_autocast fits without recomputation it trained faster on a GPU (a per-step
    cost the model does not price), so the section's lower gradient traffic is not allowed to choose it.
    Published runs need it: Pythia-6.9B on A100 40 GB, Megatron's 530B and 1T with sequence parallelism and no
    recomputation, all of which ran in a bf16/fp16 section; Nemotron-4 340B and torchtitan's 405B at
    micro-batch 2, which fit torch_autocast only by recomputing every block (a third more compute)."""
    cluster, chosen = result.cluster, result.chosen
    if cluster.mixed_precision != "auto" or not cluster.autocast:
        return result
    if chosen and chosen.within_margin and chosen.checkpointing == "off":
        return result
    alt = search(model, cluster.model_copy(update={"mixed_precision": "sections"}), **search_args)
    if alt.chosen is None or not (alt.chosen.within_margin or chosen is None):
        return result
    recomputes = chosen is not None and chosen.within_margin
    if recomputes and not _section_pays(chosen, alt.chosen):
        return result
    for row in alt.rows:
        row.mixed_precision = "sections"
    if recomputes:
        faster = 1 - alt.chosen.cost.s_per_token / chosen.cost.s_per_token
        reason = (f"fits within the {MEMORY_SAFETY:.0%} margin only by recomputing "
                  f"({plan_render.recipe_text(chosen)}); DeepSpeed's bf16 section (bf16 weights and gradients, the "
                  f"fp32 master in the optimizer) is estimated {faster:.0%} faster per token, more than its measured "
                  "per-step cost "
                  f"({SECTION_STEP_COST:.2f}×)")
    else:
        default = (f"{chosen.memory.total / GIB:.1f} GiB ({plan_render.recipe_text(chosen)})"
                   if chosen else "nothing fits at all")
        reason = (f"fits no recipe within the {MEMORY_SAFETY:.0%} margin (best: {default}); DeepSpeed's bf16 section "
                  "does (bf16 weights and gradients, the fp32 master in the optimizer)")
    alt.why = ("The engine's default bf16 mode on GPUs (torch_autocast: fp32 weights and gradients, a bf16 copy of the "
               f"block weights per micro-batch in flight) {reason}, so the recipe sets "
               "pretrain.speed.mixed_precision=sections (--mixed-precision torch_autocast keeps the default mode). "
               + alt.why)
    return alt


def _section_pays(autocast: PlanRow, section: PlanRow) -> bool:
    """The section's recipe is faster per token than torch_autocast's even with the section's per-step cost."""
    if autocast.cost is None or section.cost is None:    # no FLOP/s known (CPU, unknown device): no speed to weigh
        return False
    return section.cost.s_per_token * SECTION_STEP_COST < autocast.cost.s_per_token


def plan(model: ModelSpec, cluster: ClusterSpec, *, vocab_size: int, seq_len: int, micro_batch: int,
         grad_accum: int = 1, activation_checkpointing: bool | str = False, fused_attention: bool = True,
         global_batch: int | None = None, sequence_parallel: bool = False) -> Plan:
    """The layouts (dp × tp × pp × ZeRO) of one fixed recipe: `search` with the micro-batch, checkpointing and
    sequence parallelism kept (and grad_accum too without a global batch: every layout keeps micro_batch ×
    grad_accum per replica)."""
    fixed: dict[str, Any] = {"micro_batch": micro_batch, "checkpointing": checkpoint_mode(activation_checkpointing),
                             "sequence_parallel": sequence_parallel}
    if global_batch is None:
        fixed["grad_accum"] = grad_accum
    return search(model, cluster, vocab_size=vocab_size, seq_len=seq_len, global_batch=global_batch, fixed=fixed,
                  fused_attention=fused_attention, checkpointing=(fixed["checkpointing"],))
