"""Memory per device of one training recipe: weights, gradients and optimizer states after ZeRO sharding,
activations (Korthikanti et al. 2022) of the micro-batches 1F1B keeps in flight, and the loss's logits.

The planner (tasks/train/planning/planner.py) prices every candidate recipe with `estimate_memory`; plan --measure uses
it to skip layouts that cannot fit. All sizes are bytes; GiB (2**30) only when rendered. Pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from specs.pretrain import ModelSpec
from specs.architecture import ModelConfig, param_counts
from tasks.train.loop.telemetry import canonical_device
from tasks.train.planning.plan_cost import checkpoint_mode, recomputed_blocks, stage_blocks

GIB = 1 << 30
# Bytes of one weight in the training module: DeepSpeed's bf16/fp16 section casts it; fp32 and torch_autocast keep it
# fp32 (the compute precision of autocast's matmuls is 2 bytes: `act_bytes`, not this).
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "fp16": 2}
# Logits per chunk of the fused chunked loss (tasks/train/modeling/loss.py CHUNK_ELEMENTS: 128 MiB in fp32).
LOSS_CHUNK_ELEMENTS = 1 << 25

# Memory per device in GB as sold, for the planner when no --memory-gb is given: products sold in one size. A100
# (40/80), V100 (16/32) and H100 PCIe/SXM (80; 94 NVL) names state their size ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
# read by `device_memory_gb`; "GH200 480GB" counts the CPU's memory too, so no size is read from a GH200's name.
DEVICE_MEMORY_GB: dict[str, float] = {
    "h100-sxm": 80, "h100-pcie": 80, "h100-nvl": 94, "h200": 141, "h200-nvl": 141, "l4": 24, "l40s": 48, "a10": 24,
    "a10g": 24, "rtx-4090": 24, "mi300x": 192, "mi250x": 128,
}
_SIZED = ("a100", "v100", "h100-sxm", "h100-pcie")


def device_memory_gb(name: str) -> float | None:
    """Memory of one device named `name`: the size its name states (A100, V100, H100: `a100-40gb`), else the one
    size its product is sold in (DEVICE_MEMORY_GB), else None (an A100 or V100 without a size, a GH200, unknown)."""
    key, lowered = canonical_device(name), name.strip().lower()
    if key is None or "gh200" in lowered:
        return None
    if key in _SIZED and (size := re.search(r"(\d+)\s*gb?\b", lowered.replace("-", " "))):
        return float(size.group(1))
    return DEVICE_MEMORY_GB.get(key)


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


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class StateBytes(NamedTuple):
    """Bytes per parameter of weights, gradients and optimizer states, and whether ZeRO divides each by dp."""

    weights: int
    gradients: int
    optimizer: int
    shard_weights: bool
    shard_gradients: bool
    shard_optimizer: bool


def state_bytes(precision: str, autocast: bool, zero_stage: int, pp: int) -> StateBytes:
    """What DeepSpeed 0.19.8 holds per parameter for the engine's client AdamW (m and v in the dtype of what it
    steps), by training mode and ZeRO stage. `autocast`: bf16 as DeepSpeed's torch_autocast mode, what
    `pretrain.speed.mixed_precision: auto` resolves to on CUDA (SpeedSpec.autocast; dsconfig.ds_config writes
    `torch_autocast` and disables the `bf16` section): the module keeps fp32 weights, so DeepSpeed sees an fp32
    model (engine.get_data_types) and the states are those of fp32 training. Ψ = parameters; w = 4 bytes for fp32
    weights (fp32, torch_autocast), 2 for the bf16/fp16 sections; lines of deepspeed/runtime/ files, 0.19.8:

    ZeRO-0, fp32 weights   4Ψ + 4Ψ + 8Ψ (m, v): no wrapper, the weights are the master (engine.py 2314-2315:
                           `_do_optimizer_sanity_check` returns None for fp32).
    ZeRO-0, fp16; bf16 pp 1  2Ψ + 2Ψ + 12Ψ: FP16_(Unfused)Optimizer's fp32 master (fp16/fused_optimizer.py 100,
                           unfused_optimizer.py 78) + m, v (engine.py 2321: FP16 / DDP_BFLOAT16).
    ZeRO-0, bf16 pp > 1    2Ψ + 4Ψ + 12Ψ/dp: BF16_Optimizer (engine.py 2316-2320): fp32 master partitioned over dp
                           (bf16_optimizer.py 182) and a bf16 accumulation buffer beside the bf16 grads (191).
    ZeRO-1                 wΨ + wΨ + 12Ψ/dp: a flat fp32 partition `.clone()`d from the weights even when they are
                           fp32 already (zero/stage_1_and_2.py 560), + m, v of it; full gradients.
    ZeRO-2                 wΨ + wΨ/dp + 12Ψ/dp: the gradient partition buffer in the weights' dtype (2192).
    ZeRO-3                 wΨ/dp + wΨ/dp + 12Ψ/dp in bf16/fp16, 16Ψ/dp with fp32 weights: the fp32 partition *is*
                           the weights' (zero/stage3.py 1162-1167: "When torch autocast is enabled ... we don't need
                           another copy"); the gradient partitions in the accumulation dtype (791).

    So torch_autocast costs 16Ψ unsharded at ZeRO-0, 8Ψ + 12Ψ/dp at ZeRO-1, 4Ψ + 16Ψ/dp at ZeRO-2, against the
    bf16 section's 16Ψ, 4Ψ + 12Ψ/dp and 2Ψ + 14Ψ/dp. Not counted: transients of the optimizer step (the fp32 flat
    gradient partition of ZeRO-1/2, FP16_Optimizer's flattened fp32 gradients: activations are freed by then) and
    the reduce buckets (`overhead_bytes`; under torch_autocast one per communication dtype)."""
    if precision not in BYTES_PER_PARAM:
        raise ValueError(f"precision: fp32, bf16 or fp16, got {precision!r}")
    if autocast and precision != "bf16":
        raise ValueError(f"torch_autocast trains bf16 only, got precision {precision!r}")
    w = 4 if autocast else BYTES_PER_PARAM[precision]
    if zero_stage == 0:
        if w == 4:
            return StateBytes(4, 4, 8, False, False, False)
        if precision == "bf16" and pp > 1:
            return StateBytes(2, 4, 12, False, False, True)
        return StateBytes(2, 2, 12, False, False, False)
    return StateBytes(w, w, 8 if zero_stage == 3 and w == 4 else 12, zero_stage >= 3, zero_stage >= 2, True)


def model_config(model: ModelSpec | ModelConfig, vocab_size: int, seq_len: int) -> ModelConfig:
    """The architecture a run of `model` trains: its shape keys, or with `model.init.kind: hf` the checkpoint's
    config.json as pretraining reads it (hf_import.hf_model_config: its vocabulary, layers, widths, heads, tied
    embeddings; no weights are opened), as the shape keys are refused beside a checkpoint. A ModelConfig is
    returned as it is (the planner reads the checkpoint once per search, not once per recipe)."""
    if isinstance(model, ModelConfig):
        return model
    if model.init.kind == "hf":
        from tasks.train.hf.hf_import import hf_model_config  # torch: only when a checkpoint is planned

        return hf_model_config(Path(model.init.path), seq_len=seq_len)
    return ModelConfig.from_spec(model, vocab_size, seq_len)


def block_activation_bytes(seq_len: int, micro_batch: int, d_model: int, n_heads: int, tp: int,
                           act_bytes: int, fused_attention: bool, sequence_parallel: bool = False,
                           stream_bytes: int | None = None, wide_linear_inputs: bool = False) -> int:
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
    `stream_bytes`: bytes per element of the residual stream when it is wider than `act_bytes` — under
    torch_autocast the stream stays fp32 (an fp32 embedding, fp32 + bf16 residual adds) while the matmuls' saved
    inputs are bf16, so the two norms' inputs take 2·sbh·(4 − 2) bytes more than the count above.
    `wide_linear_inputs`: the q/k/v and gate/up linears save their input (the norms' outputs) in the stream's
    width too, not a bf16 cast: 2·sbh·(4 − 2) more again (`linear_inputs_stay_wide` says when).
    """
    s, b, h, a = seq_len, micro_batch, d_model, n_heads
    split_all = sequence_parallel and tp > 1
    whole, split = (0, 34) if split_all else (10, 24)
    per_sbh = whole + split / tp + (0.0 if fused_attention else 5 * a * s / (h * tp))
    widened = 4 if wide_linear_inputs else 2  # sbh-sized tensors kept in the stream's width, not act_bytes
    wider = widened * s * b * h * max(0, (stream_bytes or act_bytes) - act_bytes) // (tp if split_all else 1)
    return int(s * b * h * per_sbh * act_bytes / 2) + wider


def linear_inputs_stay_wide(autocast: bool, zero_stage: int, sequence_parallel: bool, tp: int,
                            compiled: bool = True) -> bool:
    """Whether the q/k/v and gate/up linears save their input — the norms' outputs, fp32 under torch_autocast —
    as it is rather than autocast's bf16 cast (`block_activation_bytes`'s `wide_linear_inputs`). Torch's
    F.linear casts the input and its matmul saves the cast. ZeRO-3's `zero3_linear_wrap` (deepspeed 0.19.8
    runtime/zero/linear.py: no custom_fwd, the cast happens inside the Function's forward, setup_context
    `ctx.save_for_backward(input, weight, bias)`) saves the fp32 input in eager blocks (measured in
    tests/test_plan_fp32_inputs.py on the project's Block); a compiled block (one graph: `stage3_fetch: block`
    puts no hook inside it) is partitioned by AOT autograd, which keeps no fp32 norm output (measured on CPU:
    it saved less than with torch's linear), so `compiled` blocks are priced as before. Sequence parallelism's
    `_GatherLinears` (tasks/train/parallel/sequence_parallel.py: `ctx.save_for_backward(x_local, *weights)`,
    x_local the norm's fp32 output) saves it fp32 compiled or not: it runs eagerly (`autocast_weight_copy_bytes`
    says why). The attention and MLP outputs' linears get bf16 inputs (outputs of bf16 matmuls) either way."""
    return autocast and ((zero_stage >= 3 and not compiled) or (sequence_parallel and tp > 1))


def autocast_weight_copy_bytes(block_copy: int, layers: int, recomputed: int, in_flight: int,
                               saved_copy: int | None = None, compiled: bool = True) -> int:
    """Bytes of the bf16 weight copies torch_autocast holds on a stage of `layers` blocks, `recomputed` of them
    recomputed in backward, with `in_flight` micro-batches between forward and backward; `block_copy`: one
    block's matrices and biases per tp rank in bf16 (2 bytes each).

    autocast casts each fp32 weight for its matmul and the matmul saves the cast for backward, so a block run
    without recomputation keeps a copy per micro-batch in flight (measured 1×–4× for 1–4 in flight, eager and
    compiled). A recomputed block saves none; its recompute in backward makes its copies again, one block at a
    time. Compiled blocks (what the engine runs on GPUs, speed.compile auto) keep no more; eager ones also keep
    autocast's cast cache (`compiled` below; compiled blocks' casts are graph ops outside it: measured 4
    blocks' copies alive at the end of an eager forward of 4 recomputed blocks, none compiled).
    tests/test_plan_weight_copies.py measures these on the project's Block.

    ZeRO 0–2 only (`estimate_memory` passes 0 at ZeRO-3): ZeRO-3 replaces torch.nn.functional.linear for the
    whole process (zero.Init, partition_parameters.py `_enable_mem_efficient_linear`) with
    zero/linear.py's `zero3_linear_wrap` (DeepSpeed 0.19.8), which every block linear reaches (nn.Linear, and
    tp_model's Column/RowParallelLinear, call F.linear). Autocast casts inside its autograd Function's forward,
    where nothing is recorded, and of `weight.t()`, a view, which autocast's cast cache skips; setup_context
    saves (input, weight, bias) — `weight` the ZeRO-3 parameter itself, not a copy — so no bf16 copy outlives
    the matmul (measured: 0 bytes with and without recomputation, eager; in backward it casts one matrix at a
    time, never kept). The saved parameter costs nothing either: after the module's forward DeepSpeed frees its
    gathered data (partition_parameters.py free_param: `param.data = torch.empty(0)`), so the reference sees
    an empty tensor, and backward all-gathers it again (`weight.all_gather()` when NOT_AVAILABLE) and
    re-partitions it after — only the 1/dp partition stays, which `state_bytes` counts.

    `saved_copy`: the part of `block_copy` a block's matmuls save (default: all of it). Under sequence
    parallelism the q/k/v and gate/up matrices go through `_GatherLinears`, whose forward runs without autograd
    recording and saves the fp32 weights themselves, so only the output linears' (wo, w2) casts are saved.
    Autocast's cast cache keeps every cast of an fp32 leaf that requires grad (whatever the grad mode) until
    the forward leaves autocast: one forward's worth, at the end of each forward. Eager blocks (`compiled`
    False: speed.compile off, or auto on CPU ranks) cache every block's casts; what a block saved is that same
    tensor, so the cache adds the rest. Compiled blocks cache none of theirs, but `_GatherLinears` runs eagerly
    inside them (dynamo cannot trace its `async_op=True` all-gather: a graph break), so its casts,
    `block_copy − saved_copy` per block, recomputed or not, are cached all the same. Measured in
    tests/test_plan_weight_copies.py (eager, recomputed) and tests/test_plan_sp_copies.py (tp 2 SP block)."""
    saved = block_copy if saved_copy is None else saved_copy
    held = saved * (in_flight * (layers - recomputed) + (1 if recomputed else 0))
    cached = (block_copy - saved) * layers if compiled else block_copy * layers - saved * (layers - recomputed)
    return held + cached


def output_linear_params(cfg: ModelConfig) -> int:
    """Parameters of one block's output linears: attention's wo (n_heads·head_dim → d) and the MLP's w2
    (ffn_hidden → d), neither with a bias; the rest of the block's linears make q/k/v and gate/up."""
    return cfg.n_heads * cfg.head_dim * cfg.d_model + cfg.ffn_hidden * cfg.d_model


def tied_gradient_bytes(cfg: ModelConfig, precision: str, autocast: bool, zero_stage: int, tp: int,
                        pp: int) -> int:
    """Bytes of the tied embedding's gradient one rank of the first (and last) pipeline stage all-reduces with
    its partner each step: 0 without tied embeddings or a pipeline. DeepSpeed's PipelineModule keeps a copy of
    the table on both stages (TiedLayerSpec) and pipe/engine.py `_exec_reduce_tied_grads` all-reduces
    `weight._hp_grad` under BF16_Optimizer (fp32), else `weight.grad` in the weights' dtype: what
    `state_bytes` counts as gradients at the ZeRO ≤ 1 a pipeline allows. The table splits by vocabulary rows
    over tp as `estimate_memory` splits it."""
    if not cfg.tie_embeddings or pp == 1:
        return 0
    vocab_split = tp if cfg.vocab_size % tp == 0 else 1
    return ceil_div(cfg.vocab_size * cfg.d_model, vocab_split) * state_bytes(precision, autocast, zero_stage,
                                                                            pp).gradients


def loss_implementation(pp: int, vocab_split: int) -> str:
    """Which training loss the engine runs for a layout, as its memory differs by orders of magnitude at large
    vocabularies. "chunked": the plain head (pp = 1, vocabulary not split over tp) computes the loss straight
    from the hidden states (model.LMHead.loss_from_hidden → tasks/train/modeling/loss.py, issue #29's fused linear cross
    entropy). "materialised": the pipeline's loss_fn and the vocabulary-parallel head take logits
    (tp_model.head_loss / VocabParallelLMHead: this rank's V/tp columns). Change this when those paths change."""
    return "chunked" if pp == 1 and vocab_split == 1 else "materialised"


def loss_activation_bytes(tokens: int, vocab_columns: int, d_model: int, act_bytes: int, implementation: str,
                          stream_bytes: int | None = None) -> int:
    """Memory of the logits and the loss for `tokens` tokens of one micro-batch over `vocab_columns` columns
    (V, or V/tp under a vocabulary-parallel head), at the end of forward, when it adds to every block's stored
    activations; `implementation` as `loss_implementation` says.

    materialised: compute-precision logits + the fp32 copy cross entropy works on (Korthikanti §4.3 counts
    4·sbv for the fp32 logits alone). chunked (tasks/train/modeling/loss.py): one chunk of LOSS_CHUNK_ELEMENTS fp32
    logits with its compute-precision copy, the hidden states' gradient [tokens, d] made in forward and kept for
    backward, and the head weight's fp32 gradient [V, d] accumulated in forward — nothing of size tokens × V.
    `stream_bytes` wider than `act_bytes` (torch_autocast: fp32 hidden states and head weight): the hidden states'
    gradient takes the hidden states' dtype, and the head weight's compute-precision copy [V, d] (loss.py's
    `weight.to(dtype)`, autocast's cast before the logits' matmul) lives through the loss."""
    stream = stream_bytes or act_bytes
    cast = vocab_columns * d_model * act_bytes if stream > act_bytes else 0
    if implementation == "materialised":
        return tokens * vocab_columns * (act_bytes + 4) + cast
    if implementation == "chunked":
        chunk = min(LOSS_CHUNK_ELEMENTS, tokens * vocab_columns)
        return chunk * (4 + act_bytes) + tokens * d_model * stream + vocab_columns * d_model * 4 + cast
    raise ValueError(f"loss implementation: materialised or chunked, got {implementation!r}")


def estimate_memory(model: ModelSpec | ModelConfig, vocab_size: int, seq_len: int, micro_batch: int, precision: str,
                    dp: int, tp: int, pp: int, zero_stage: int, activation_checkpointing: bool | str,
                    grad_accum: int = 1, overhead_bytes: int = 0, fused_attention: bool = True,
                    sequence_parallel: bool = False, autocast: bool = False, compiled: bool = True) -> MemoryEstimate:
    """Memory per device of the fullest pipeline stage (the first holds the embedding and the most micro-batches
    in flight, the last the output head and logits); `sequence_parallel` as `block_activation_bytes`;
    `activation_checkpointing` a plan_cost.CHECKPOINTING mode or the params' bool; `autocast`: bf16 through
    DeepSpeed's torch_autocast mode (fp32 weights and residual stream, bf16 matmuls), else `precision`'s
    section (`state_bytes` counts weights, gradients and optimizer states per mode); `compiled`: whether the
    blocks run compiled (`autocast_weight_copy_bytes`). `model` as `model_config` reads it: a checkpoint's
    vocabulary replaces `vocab_size`."""
    cfg = model_config(model, vocab_size, seq_len)
    counts, vocab_size = param_counts(cfg), cfg.vocab_size
    r = {"n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads}
    # Rajbhandari et al. 2020 (ZeRO), §3.1 and §5, as DeepSpeed implements it: `state_bytes`.
    states = state_bytes(precision, autocast, zero_stage, pp)
    act_bytes = BYTES_PER_PARAM[precision]  # the matmuls' inputs: bf16 under torch_autocast too
    stream_bytes = 4 if autocast else act_bytes
    mode = checkpoint_mode(activation_checkpointing)
    blocks = stage_blocks(r["n_layers"], pp)
    block = ceil_div(counts.block_matrices + counts.block_biases, tp) + counts.block_norms  # norms replicated
    wide_inputs = linear_inputs_stay_wide(autocast, zero_stage, sequence_parallel, tp, compiled)
    per_block_act = block_activation_bytes(seq_len, micro_batch, r["d_model"], r["n_heads"], tp, act_bytes,
                                           fused_attention, sequence_parallel, stream_bytes, wide_inputs)
    token_split = tp if sequence_parallel else 1  # the residual stream between blocks: T/tp tokens per rank
    block_input = ceil_div(seq_len * micro_batch * r["d_model"] * stream_bytes, token_split)
    # torch_autocast's bf16 copies of the fp32 block weights (the bf16/fp16 sections' weights are 2 bytes already);
    # none at ZeRO-3, whose linear saves the parameter, not its cast (`autocast_weight_copy_bytes`)
    saves_copies = autocast and zero_stage < 3
    block_copy = 2 * ceil_div(counts.block_matrices + counts.block_biases, tp) if saves_copies else 0
    # Sequence parallelism: only the output linears (wo, w2) save their cast (`autocast_weight_copy_bytes`)
    saved_copy = 2 * ceil_div(output_linear_params(cfg), tp) if saves_copies and sequence_parallel and tp > 1 \
        else block_copy

    def stage_act(layers: int, in_flight: int) -> int:
        # A recomputed block keeps only its input (2·sbh bytes in 16-bit, Korthikanti §4.1); while it is
        # recomputed in backward, one block's full working set exists on top.
        again = recomputed_blocks(mode, layers)
        kept = in_flight * (again * block_input + (layers - again) * per_block_act)
        copies = autocast_weight_copy_bytes(block_copy, layers, again, in_flight, saved_copy, compiled) \
            if block_copy else 0
        return kept + (per_block_act if again else 0) + copies

    estimates = []
    stages = [("only", True, True)] if pp == 1 else [("first", True, False), ("last", False, True)]
    # The table and the head split by vocabulary rows over tp when tp divides the vocabulary (tp_model's
    # split_vocab), else every TP rank holds them whole.
    vocab_split = tp if vocab_size % tp == 0 else 1
    table, head = ceil_div(counts.embedding, vocab_split), ceil_div(counts.head, vocab_split)
    logits = loss_activation_bytes(seq_len * micro_batch, ceil_div(vocab_size, vocab_split), r["d_model"],
                                   act_bytes, loss_implementation(pp, vocab_split), stream_bytes)
    for name, first, last in stages:
        layers = blocks[0] if first else blocks[-1]
        n = layers * block + (table if first else 0)
        if last:
            # Untied: the head lives on the last stage. Tied with a pipeline: the last stage holds its own copy
            # of the table (DeepSpeed TiedLayerSpec all-reduces the two copies' grads).
            n += counts.final_norm + (table if cfg.tie_embeddings and pp > 1 else head)
        # 1F1B (Narayanan et al. 2021, PipeDream-Flush): stage i keeps up to pp − i micro-batches in flight.
        in_flight = min(pp, grad_accum) if first else 1
        estimates.append(MemoryEstimate(
            parameters=ceil_div(n * states.weights, dp if states.shard_weights else 1),
            gradients=ceil_div(n * states.gradients, dp if states.shard_gradients else 1),
            optimizer=ceil_div(n * states.optimizer, dp if states.shard_optimizer else 1),
            activations=stage_act(layers, in_flight) + (logits if last else 0),
            overhead=overhead_bytes, stage=name, params_on_device=n))
    return max(estimates, key=lambda e: e.total)
