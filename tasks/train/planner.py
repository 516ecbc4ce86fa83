"""Layout planner: per-device memory of a (dp, tp, pp, ZeRO) layout, its estimated step time
(tasks/train/plan_cost.py), and the choice: the fastest layout that fits with a safety margin.

Used by `python -m tasks plan` before a run and by `plan --measure` for its candidates. All sizes are bytes;
GiB (2**30) only when rendered.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from specs.pretrain import ModelSpec, ParallelSpec, layout_problems
from tasks.train.cluster import ClusterSpec
from tasks.train.config import ModelConfig, ParamCounts, flops_per_token, param_counts
from tasks.train.plan_cost import StepCost, describe, device_flops, estimate_step, stage_blocks

GIB = 1 << 30
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "fp16": 2}
# A layout is ranked by speed only while its estimate leaves this share of the device free: the memory model
# ignores allocator fragmentation spikes, NCCL's lazily grown buffers and the temporary buffers of the loss.
MEMORY_SAFETY = 0.85
# Estimated times within this of the fastest count as a tie (the model is not that precise): the tie goes to the
# least parallelism (fewest pipeline stages, then the smallest tensor group, then the lowest ZeRO stage).
TIE_TOLERANCE = 0.02


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device on the fullest pipeline stage."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    stage: str                # "only", "first" or "last": which stage is the fullest
    params_on_device: int     # parameters the stage computes with (before ZeRO-3 sharding)

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.overhead

    def breakdown_gib(self) -> dict[str, float]:
        keys = ("parameters", "gradients", "optimizer", "activations", "overhead", "total")
        return {k: round(getattr(self, k) / GIB, 3) for k in keys}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def block_activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, tp: int,
                           act_bytes: int, fused_attention: bool, sequence_parallel: bool = False) -> int:
    """Activations one block keeps for backward, per micro-batch.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 2 and
    Table 2: s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes with 16-bit activations and tensor parallel size t (no
    sequence parallelism; the 10·sbh of layer-norm inputs and dropout masks stay replicated). It is derived for a
    GPT block with a 4h GELU MLP and dropout, an upper bound for our SwiGLU block without dropout. The
    5·a·s/(h·t) term is the attention-score, softmax and dropout matrices: fused (flash) attention never stores
    them (Dao et al. 2022), so it is dropped when `fused_attention`.
    Sequence parallelism (`parallel.sequence_parallel`, tp > 1) splits the two norms' inputs (4·sbh), the
    dropout masks (2·sbh) and the q/k/v and gate/up matmuls' inputs (2·sbh each: `gather_linears` saves the
    rank's T/t tokens and re-gathers them in backward, as Megatron-LM does) by t too: 34/t, Korthikanti's
    eq. 5. (Before gather_linears those inputs stayed whole: 4 + 30/t. benchmarks/sp_memory.py measures
    the difference, 4·sbh·(1 − 1/t), on one block.)
    """
    s, b, h, a = seq_len, micro_batch, d_model, n_heads
    whole, split = (0, 34) if sequence_parallel and tp > 1 else (10, 24)
    per_sbh = whole + split / tp + (0.0 if fused_attention else 5 * a * s / (h * tp))
    return int(s * b * h * per_sbh * act_bytes / 2)


def estimate_memory(model: ModelSpec, vocab_size: int, seq_len: int, micro_batch: int, precision: str,
                    dp: int, tp: int, pp: int, zero_stage: int, activation_checkpointing: bool,
                    grad_accum: int = 1, overhead_bytes: int = 0, fused_attention: bool = True,
                    sequence_parallel: bool = False) -> MemoryEstimate:
    """Memory per device of the fullest pipeline stage (the first holds the embedding and the most micro-batches
    in flight, the last the output head and logits); `sequence_parallel` as `block_activation_bytes`."""
    r, counts = model.resolved(), param_counts(ModelConfig.from_spec(model, vocab_size, seq_len))
    w_bytes = BYTES_PER_PARAM[precision]
    # Rajbhandari et al. 2020 (ZeRO), §3.1: mixed-precision Adam keeps 2Ψ weights + 2Ψ grads + 12Ψ optimizer
    # states (fp32 master weights, momentum, variance); in plain fp32 the weights are the master: 4Ψ + 4Ψ + 8Ψ.
    # ZeRO-1 shards the optimizer states over dp, ZeRO-2 also the grads, ZeRO-3 also the weights (§5).
    opt_bytes = 8 if precision == "fp32" else 12
    blocks = stage_blocks(r["n_layers"], pp)
    block = _ceil_div(counts.block_matrices + counts.block_biases, tp) + counts.block_norms  # norms replicated
    per_block_act = block_activation_bytes(seq_len, micro_batch, r["d_model"], r["n_heads"], tp, w_bytes,
                                           fused_attention, sequence_parallel)
    token_split = tp if sequence_parallel else 1  # the residual stream between blocks: T/tp tokens per rank

    def stage_act(layers: int, in_flight: int) -> int:
        if activation_checkpointing:
            # Full recomputation keeps only each block's input (2·sbh bytes in 16-bit, Korthikanti §4.1) plus
            # one block's full working set while it is recomputed in backward.
            return layers * in_flight * _ceil_div(seq_len * micro_batch * r["d_model"] * w_bytes, token_split) \
                + per_block_act
        return layers * in_flight * per_block_act

    estimates = []
    stages = [("only", True, True)] if pp == 1 else [("first", True, False), ("last", False, True)]
    # The table and the head split by vocabulary rows over tp when tp divides the vocabulary (tp_model's
    # split_vocab), else every TP rank holds them whole.
    vocab_split = tp if vocab_size % tp == 0 else 1
    table, head = _ceil_div(counts.embedding, vocab_split), _ceil_div(counts.head, vocab_split)
    # Logits in compute precision plus the fp32 copy the cross-entropy works on (Korthikanti §4.3 counts 4sbv);
    # a split head's loss (tensor_parallel.vocab_parallel_cross_entropy) holds only this rank's V/tp columns.
    logits = seq_len * micro_batch * _ceil_div(vocab_size, vocab_split) * (w_bytes + 4)
    for name, first, last in stages:
        layers = blocks[0] if first else blocks[-1]
        n = layers * block + (table if first else 0)
        if last:
            # Untied: the head lives on the last stage. Tied with a pipeline: the last stage holds its own copy
            # of the table (DeepSpeed TiedLayerSpec all-reduces the two copies' grads).
            n += counts.final_norm + (table if model.tie_embeddings and pp > 1 else head)
        # 1F1B (Narayanan et al. 2021, PipeDream-Flush): stage i keeps up to pp − i micro-batches in flight.
        in_flight = min(pp, grad_accum) if first else 1
        estimates.append(MemoryEstimate(
            parameters=_ceil_div(n * w_bytes, dp if zero_stage >= 3 else 1),
            gradients=_ceil_div(n * w_bytes, dp if zero_stage >= 2 else 1),
            optimizer=_ceil_div(n * opt_bytes, dp if zero_stage >= 1 else 1),
            activations=stage_act(layers, in_flight) + (logits if last else 0),
            overhead=overhead_bytes, stage=name, params_on_device=n))
    return max(estimates, key=lambda e: e.total)


def candidate_layouts(world_size: int) -> list[tuple[int, int, int]]:
    """Every (dp, tp, pp) with dp·tp·pp = world_size, least model parallelism first (pp, then tp)."""
    divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
    return [(world_size // (pp * tp), tp, pp) for pp in divisors for tp in divisors if (world_size // pp) % tp == 0]


def _tp_node_problem(tp: int, gpus_per_node: int) -> str | None:
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
    if parallel.world_size != world_size:
        problems.append(f"parallel: dp × tp × pp = {parallel.dp} × {parallel.tp} × {parallel.pp} = "
                        f"{parallel.world_size}, but the world size is {world_size}")
    if gpus_per_node is not None and (p := _tp_node_problem(parallel.tp, gpus_per_node)):
        problems.append(p)
    return problems


@dataclass
class PlanRow:
    dp: int
    tp: int
    pp: int
    zero_stage: int | None          # None: rejected before memory (any stage)
    memory: MemoryEstimate | None
    fits: bool
    reasons: list[str] = field(default_factory=list)
    cost: StepCost | None = None    # None: rejected, or no peak FLOP/s known for the device
    within_margin: bool = False     # fits with MEMORY_SAFETY headroom: eligible for the speed ranking
    grad_accum: int | None = None   # micro-batches per step of this layout (None: rejected before memory)

    def to_dict(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "zero_stage": self.zero_stage, "fits": self.fits,
                "within_margin": self.within_margin, "grad_accum": self.grad_accum,
                # the script-facing names: GiB like --memory-gb, seconds per optimizer step
                "memory_gb_per_device": round(self.memory.total / GIB, 3) if self.memory else None,
                "step_time_s": round(self.cost.step_s, 6) if self.cost else None,
                "memory_gib": self.memory.breakdown_gib() if self.memory else None,
                "estimate": self.cost.as_dict() if self.cost else None, "reasons": list(self.reasons)}


@dataclass
class Plan:
    model_name: str
    params: ParamCounts
    cluster: ClusterSpec
    rows: list[PlanRow]
    chosen: PlanRow | None
    why: str
    ranked: list[PlanRow] = field(default_factory=list)  # rows by estimated time per token, best first
    cost_basis: str = ""                                  # the FLOP/s the times assume, or why there are none

    def render(self) -> str:
        c = self.cluster
        head = (f"model {self.model_name}, {self.params.total / 1e6:.1f}M parameters "
                f"({self.params.non_embedding / 1e6:.1f}M non-embedding)\n"
                f"cluster: {c.nodes} node(s) × {c.gpus_per_node} {c.device} ({c.memory_gb:g} GiB each, "
                f"{c.intra_node} inside a node, {c.inter_node} between nodes), {c.precision}\n"
                f"step time: {self.cost_basis}\n")
        cols = f"{'dp':>4} {'tp':>3} {'pp':>3} {'zero':>4} | {'params':>7} {'grads':>7} {'optim':>7} " \
               f"{'activ':>7} {'total':>7} GiB | {'s/step':>8} {'tokens/s':>10} | fits  | reason"
        lines = [head, cols, "-" * len(cols)]
        for r in self.rows:
            zero = "-" if r.zero_stage is None else str(r.zero_stage)
            if r.memory is None:
                mem = " ".join(f"{'':>7}" for _ in range(5))
            else:
                g = r.memory.breakdown_gib()
                mem = " ".join(f"{g[k]:>7.2f}" for k in ("parameters", "gradients", "optimizer", "activations",
                                                          "total"))
            t = f"{r.cost.step_s:>8.3g} {r.cost.tokens_per_s:>10,.0f}" if r.cost else f"{'':>8} {'':>10}"
            mark = "yes" if r.fits else "no"
            if r is self.chosen:
                mark += " *"
            row = f"{r.dp:>4} {r.tp:>3} {r.pp:>3} {zero:>4} | {mem}     | {t} | {mark:<5} | {'; '.join(r.reasons)}"
            lines.append(row.rstrip())
        lines.append("")
        if self.chosen:
            ch = self.chosen
            lines.append(f"chosen: dp={ch.dp} tp={ch.tp} pp={ch.pp} zero_stage={ch.zero_stage}")
        else:
            lines.append("chosen: none fits")
        lines += textwrap.wrap("why: " + self.why, width=110)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Machine-readable plan (`python -m tasks plan --json`): every layout, fastest eligible first."""
        ranked_ids = {id(r) for r in self.ranked}
        rest = [r for r in self.rows if id(r) not in ranked_ids]
        layouts = [{"rank": i + 1, **r.to_dict()} for i, r in enumerate(self.ranked)]
        layouts += [{"rank": None, **r.to_dict()} for r in rest]
        for entry, row in zip(layouts, self.ranked + rest):
            entry["chosen"] = row is self.chosen
        return {"model": self.model_name, "parameters": self.params.total, "cluster": self.cluster.model_dump(),
                "cost_model": {"basis": self.cost_basis, "memory_safety": MEMORY_SAFETY,
                               "tie_tolerance": TIE_TOLERANCE},
                "chosen": self.chosen.to_dict() if self.chosen else None, "why": self.why,
                "candidates": layouts[:len(self.ranked)], "layouts": layouts}


def _seed_key(r: PlanRow) -> tuple:
    # The seed rule as one ordering: least model parallelism, least communication.
    return (r.pp, r.tp, r.zero_stage)


def rank_rows(rows: list[PlanRow]) -> tuple[list[PlanRow], PlanRow | None]:
    """The eligible rows, fastest first, and the choice: the fastest within TIE_TOLERANCE, the tie going to the
    seed order. Eligible: fits with the safety margin, or (when none does) fits at all; without time estimates
    (no peak FLOP/s for the device) the seed order alone ranks them."""
    pool = [r for r in rows if r.within_margin] or [r for r in rows if r.fits]
    if not pool:
        return [], None
    if any(r.cost is None for r in pool):
        ranked = sorted(pool, key=_seed_key)
        return ranked, ranked[0]
    ranked = sorted(pool, key=lambda r: (r.cost.s_per_token, _seed_key(r)))
    best = ranked[0].cost.s_per_token
    return ranked, min((r for r in ranked if r.cost.s_per_token <= best * (1 + TIE_TOLERANCE)), key=_seed_key)


def plan(model: ModelSpec, cluster: ClusterSpec, *, vocab_size: int, seq_len: int, micro_batch: int,
         grad_accum: int = 1, activation_checkpointing: bool = False, fused_attention: bool = True,
         global_batch: int | None = None, sequence_parallel: bool = False) -> Plan:
    """Every candidate layout × allowed ZeRO stage with its memory and estimated step time, and the choice: the
    lowest estimated time per token among the layouts that fit with MEMORY_SAFETY headroom.

    Each layout keeps `micro_batch` and `grad_accum` (its global batch grows with dp), unless `global_batch`
    (sequences) is given: then each layout runs global_batch / (micro_batch · dp) micro-batches, so fewer
    replicas mean more micro-batches and a smaller pipeline bubble, as when a published batch size is fixed."""
    world, mem_limit = cluster.world_size, cluster.memory_gb * GIB
    cfg = ModelConfig.from_spec(model, vocab_size, seq_len)
    r_shape, fpt, w_bytes = model.resolved(), flops_per_token(cfg), BYTES_PER_PARAM[cluster.precision]
    rows: list[PlanRow] = []
    for dp, tp, pp in candidate_layouts(world):
        reasons = layout_problems(model, ParallelSpec.model_construct(dp=dp, tp=tp, pp=pp))
        if p := _tp_node_problem(tp, cluster.gpus_per_node):
            reasons.append(p)
        m = grad_accum
        if global_batch is not None:
            m = global_batch // (micro_batch * dp)
            if m < 1 or global_batch % (micro_batch * dp):
                reasons.append(f"global batch {global_batch} is not a multiple of micro_batch {micro_batch} × "
                               f"dp {dp}")
        if reasons:
            rows.append(PlanRow(dp, tp, pp, None, None, False, reasons))
            continue
        # ZeRO shards over dp (nothing to shard at dp = 1); DeepSpeed allows ZeRO ≤ 1 with a pipeline.
        for zero in [0] if dp == 1 else ([0, 1] if pp > 1 else [0, 1, 2, 3]):
            est = estimate_memory(model, vocab_size, seq_len, micro_batch, cluster.precision, dp, tp, pp, zero,
                                  activation_checkpointing, m, int(cluster.overhead_gb * GIB),
                                  fused_attention, sequence_parallel)
            fits = est.total <= mem_limit
            why_not = [] if fits else [f"needs {est.total / GIB:.1f} GiB > {cluster.memory_gb:g} GiB per device"]
            if fits and est.total > MEMORY_SAFETY * mem_limit:
                why_not.append(f"{est.total / mem_limit:.0%} of the device: above the {MEMORY_SAFETY:.0%} margin")
            cost = estimate_step(cluster, flops_per_token=fpt, n_layers=r_shape["n_layers"],
                                 d_model=r_shape["d_model"], act_bytes=w_bytes,
                                 grad_bytes_on_device=est.params_on_device * w_bytes, dp=dp, tp=tp, pp=pp,
                                 zero_stage=zero, micro_batch=micro_batch, seq_len=seq_len, grad_accum=m,
                                 activation_checkpointing=activation_checkpointing)
            rows.append(PlanRow(dp, tp, pp, zero, est, fits, why_not, cost,
                                within_margin=est.total <= MEMORY_SAFETY * mem_limit, grad_accum=m))
    ranked, chosen = rank_rows(rows)
    counts = param_counts(cfg)
    basis = device_flops(cluster)[1]
    why = _why(model, cluster, rows, ranked, chosen, counts, micro_batch, seq_len)
    name = (f"{model.flavor} (layers {r_shape['n_layers']}, d_model {r_shape['d_model']}, heads "
            f"{r_shape['n_heads']}/{r_shape['n_kv_heads']} kv, vocab {vocab_size}, seq_len {seq_len}, "
            f"micro_batch {micro_batch})")
    return Plan(name, counts, cluster, rows, chosen, why, ranked, basis)


def _best(rows: list[PlanRow], pred) -> PlanRow | None:
    sized = [r for r in rows if r.memory is not None and pred(r)]
    return min(sized, key=lambda r: r.memory.total) if sized else None


def _layout(r: PlanRow) -> str:
    return f"dp={r.dp} tp={r.tp} pp={r.pp} ZeRO-{r.zero_stage}"


def _why(model, cluster, rows, ranked, chosen, counts, micro_batch, seq_len) -> str:
    def gib(row: PlanRow) -> str:
        return f"{row.memory.total / GIB:.1f} GiB"

    size = f"{model.flavor} ({counts.total / 1e6:.1f}M parameters)"
    if chosen is None:
        best = _best(rows, lambda r: True)
        need = f"the smallest need is {gib(best)} ({_layout(best)})" if best \
            else "no layout passes the divisibility checks"
        return (f"No layout of {size} fits {cluster.world_size} × {cluster.memory_gb:g} GiB: {need}. Turn on "
                "activation_checkpointing, lower micro_batch_size or seq_len, or plan for more or larger devices.")
    m, grad_accum = chosen.memory, chosen.grad_accum
    parts = [(f"{size} needs {gib(chosen)} per device at {_layout(chosen)} (weights {m.parameters / GIB:.1f}, "
              f"grads {m.gradients / GIB:.1f}, optimizer {m.optimizer / GIB:.1f}, activations "
              f"{m.activations / GIB:.1f}, overhead {m.overhead / GIB:.1f}) of {cluster.memory_gb:g} GiB.")]
    dp_fits = [r for r in ranked if r.tp == 1 and r.pp == 1]
    dp_best = _best(rows, lambda r: r.tp == 1 and r.pp == 1)
    if chosen.cost is not None:
        parts.append(f"Estimated {describe(chosen.cost)}.")
        runner = next((r for r in ranked if r is not chosen), None)
        if runner is not None and runner.cost is not None:
            slower = runner.cost.s_per_token / chosen.cost.s_per_token - 1
            parts.append(f"Next best: {_layout(runner)}, {slower:+.0%} time per token"
                         + (" (a tie within the model's precision: the least parallelism wins)."
                            if slower <= TIE_TOLERANCE else "."))
    else:
        parts.append("No step-time estimate for this device; the least parallelism that fits is taken.")
    if not chosen.within_margin:
        parts.append(f"No layout leaves {1 - MEMORY_SAFETY:.0%} headroom; this one fits with "
                     f"{m.total / (cluster.memory_gb * GIB):.0%} of the device used: activation_checkpointing "
                     "or a smaller micro_batch_size buys some.")
    if chosen.tp == 1 and chosen.pp == 1:
        parts.append("Data parallel is preferred: every rank runs the whole model and only gradients are "
                     "exchanged.")
        if chosen.zero_stage:
            parts.append(f"ZeRO-{chosen.zero_stage} shards "
                         + {1: "the optimizer states", 2: "optimizer states and gradients",
                            3: "optimizer states, gradients and weights (re-gathered every forward and backward)"}
                         [chosen.zero_stage] + f" over the {chosen.dp} data-parallel ranks.")
    elif chosen.pp == 1:
        parts.append(f"Tensor parallel tp={chosen.tp} splits every block's weights and most activations over "
                     f"{chosen.tp} devices of one node ({cluster.intra_node}); its all-reduces sit inside every "
                     "layer" + ("." if dp_fits or dp_best is None else
                                f"; plain data parallel {'exceeds the margin' if dp_best.fits else 'does not fit'} "
                                f"(best {gib(dp_best)})."))
    else:
        layers = model.resolved()["n_layers"]
        bubble = (chosen.pp - 1) / (grad_accum + chosen.pp - 1)
        small, big = layers // chosen.pp, -(-layers // chosen.pp)
        sizes = f"{small}" if small == big else f"{small}–{big} (the fullest paces the pipe)"
        parts.append(f"The pipeline cuts the {layers} layers into {chosen.pp} stages of {sizes}; "
                     f"only stage-boundary activations cross the {cluster.inter_node} link between nodes, where "
                     "wide data parallel would move every gradient. DeepSpeed allows ZeRO ≤ 1 with a pipeline. "
                     f"The 1F1B bubble is (pp−1)/(m+pp−1) = {bubble:.0%} at grad_accum m = {grad_accum}: use "
                     "m ≥ 4·pp.")
    global_seqs = micro_batch * grad_accum * chosen.dp
    parts.append(f"Global batch = micro_batch {micro_batch} × grad_accum {grad_accum} × dp {chosen.dp} = "
                 f"{global_seqs} sequences ({global_seqs * seq_len:,} tokens) per step.")
    return " ".join(parts)
