"""The `model`, `parallel` and `pretrain` sections: what to train, how to lay it out, and how to train it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from specs.base import StrictModel
from specs.init import ModelInitSpec, checkpoint_conflicts
from specs.mix import AdaptiveMixSpec
from specs.train import TrainLoopSpec
from specs.architecture import ffn_hidden_size  # pure Python: the one owner of the shape numbers

# Named shapes; any field set explicitly in `model` overrides the flavor's value.
FLAVORS: dict[str, dict[str, int]] = {
    "tiny": {"n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "d_model": 128},
    "gpt2-124m": {"n_layers": 12, "n_heads": 12, "n_kv_heads": 12, "d_model": 768},
    "350m": {"n_layers": 24, "n_heads": 16, "n_kv_heads": 16, "d_model": 1024},
    "1b": {"n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "d_model": 2048},
}


# Keys of other trainers' layouts that forgeline has no feature for. A Megatron-LM, NeMo or torchtitan config
# translated key by key brings `context_parallel_size` or `virtual_pipeline_model_parallel_size`; plain unknown-key
# handling would suggest the nearest spelling (context_parallel → "did you mean 'sequence_parallel'?", a different
# feature). These name what is missing and what to write instead; `-` reads as `_`, case-insensitive.
CONTEXT_PARALLEL = ("context parallelism (each sequence's attention split over ranks) is not implemented: fold "
                    "those ranks into parallel.dp (dp × cp), and keep long sequences in memory with "
                    "parallel.sequence_parallel at tp > 1 and pretrain.activation_checkpointing")
VIRTUAL_PIPELINE = ("interleaved (virtual) pipeline stages are not implemented — DeepSpeed's pipeline runs one "
                    "contiguous chunk per stage on the 1F1B schedule: drop the key (the same parallel.pp runs "
                    "with a larger bubble) or shorten the pipeline (`python -m tasks plan` prices each pp)")
PIPELINE_SCHEDULE = ("the pipeline schedule is not configurable: DeepSpeed's 1F1B is the only one (no "
                     "interleaved, zero-bubble or GPipe schedules): drop the key")
EXPERT_PARALLEL = ("expert parallelism needs mixture-of-experts layers, which are not implemented (dense "
                   "SwiGLU blocks only): drop the key and lay the dense model out with parallel.dp/tp/pp")
HYBRID_SHARD = ("hybrid sharding (FSDP HYBRID_SHARD / HSDP: ZeRO-3 inside a group, replicas across groups) is "
                "not implemented: ZeRO shards over all of parallel.dp; use parallel.zero_stage 3 (sharded over "
                "every replica) or 1 (optimizer states only)")
MIXTURE_OF_EXPERTS = ("mixture-of-experts layers are not implemented (dense SwiGLU blocks only): drop the key, "
                      "and train a dense model (model.ffn_hidden sets the MLP width)")

PARALLEL_KEYS: dict[str, str] = {
    **dict.fromkeys(("cp", "context_parallel", "context_parallel_size", "context_parallel_degree"),
                    CONTEXT_PARALLEL),
    **dict.fromkeys(("vp", "vpp", "virtual_pipeline", "virtual_pipeline_model_parallel_size",
                     "virtual_pipeline_parallel", "virtual_stages", "interleaved", "num_layers_per_virtual_"
                     "pipeline_stage", "pipeline_parallel_layers_per_stage"), VIRTUAL_PIPELINE),
    **dict.fromkeys(("pipeline_schedule", "pipeline_parallel_schedule"), PIPELINE_SCHEDULE),
    **dict.fromkeys(("ep", "expert_parallel", "expert_model_parallel_size", "expert_parallel_degree"),
                    EXPERT_PARALLEL),
    **dict.fromkeys(("hsdp", "hybrid_shard", "sharding_strategy", "data_parallel_replicate_degree",
                     "data_parallel_shard_degree"), HYBRID_SHARD),
}
MODEL_KEYS: dict[str, str] = dict.fromkeys(
    ("moe", "num_experts", "n_experts", "num_moe_experts", "moe_router_topk", "num_experts_per_tok",
     "n_routed_experts"), MIXTURE_OF_EXPERTS)


def refuse_foreign_keys(data: Any, table: dict[str, str], section: str) -> Any:
    """`data` unchanged, or a ValueError naming each key of `table` it holds (`section.key: why`)."""
    if isinstance(data, dict):
        found = [f"{section}.{key}: {table[norm]}" for key in data
                 if (norm := str(key).strip().lower().replace("-", "_")) in table]
        if found:
            raise ValueError("; ".join(found))
    return data


# What a checkpoint's config.json decides: setting one of these beside `init.kind: hf` is a conflict, not an override.
CHECKPOINT_KEYS = frozenset({"flavor", "n_layers", "n_heads", "n_kv_heads", "d_model", "ffn_multiple_of",
                             "ffn_hidden", "tie_embeddings", "rope_theta", "norm_eps", "init_std"})


class ModelSpec(StrictModel):
    """A Llama-style decoder (RMSNorm, RoPE, SwiGLU, optional GQA), shared by pretrain, SFT and export."""

    flavor: Literal["tiny", "gpt2-124m", "350m", "1b"] = Field(
        "tiny", description="Named shape; fields below left null take the flavor's value."
    )
    n_layers: int | None = Field(None, ge=1, le=256, description="Transformer blocks.")
    n_heads: int | None = Field(None, ge=1, le=256, description="Attention (query) heads.")
    n_kv_heads: int | None = Field(
        None, ge=1, le=256, description="Key/value heads (GQA); equal to n_heads for plain multi-head attention."
    )
    d_model: int | None = Field(None, ge=8, le=65_536, description="Residual stream width.")
    ffn_multiple_of: int = Field(
        64, ge=1, le=4096, description="SwiGLU hidden width is ~8/3·d_model rounded up to a multiple of this."
    )
    ffn_hidden: int | None = Field(
        None, ge=8, le=262_144, description="SwiGLU hidden width, set explicitly; null: from d_model and "
        "ffn_multiple_of. For published shapes no multiple gives (Llama 2 70B: 28672, Llama 3 405B: 53248).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on attention and MLP outputs (0 for pretraining).")
    tie_embeddings: bool = Field(True, description="Share the input embedding and output projection weights.")
    rope_theta: float = Field(10_000.0, gt=0, description="RoPE base frequency.")
    norm_eps: float = Field(1e-5, gt=0, lt=1, description="RMSNorm epsilon.")
    init_std: float = Field(0.02, gt=0, lt=1, description="Std of the normal weight initialization (with "
                            "init.kind: hf the checkpoint's initializer_range).")
    init: ModelInitSpec = Field(default_factory=ModelInitSpec, description="Where the weights start: a seeded "
                                "random init of this shape, or a Hugging Face checkpoint (its own shape).")

    @model_validator(mode="before")
    @classmethod
    def _no_foreign_features(cls, data):
        return refuse_foreign_keys(data, MODEL_KEYS, "model")

    def resolved(self) -> dict[str, int]:
        """n_layers, n_heads, n_kv_heads, d_model with the flavor's values filled in."""
        base = FLAVORS[self.flavor]
        return {k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in base.items()}

    def ffn_width(self) -> int:
        """The SwiGLU hidden width: `ffn_hidden`, else ~8/3·d_model rounded up to `ffn_multiple_of`."""
        return self.ffn_hidden or ffn_hidden_size(self.resolved()["d_model"], self.ffn_multiple_of)

    @model_validator(mode="after")
    def _shape_fits(self) -> "ModelSpec":
        if self.init.kind == "hf":
            # specs/init.py's rule: a key at its default is no choice (params.yaml lists every key); a changed one
            # cannot be honoured by the checkpoint's weights, so it is an error naming both.
            conflicts = checkpoint_conflicts("model", self, CHECKPOINT_KEYS, self.init, "config.json")
            if conflicts:
                raise ValueError("; ".join(conflicts))
            return self
        r = self.resolved()
        if r["d_model"] % r["n_heads"]:
            raise ValueError(f"d_model ({r['d_model']}) must be divisible by n_heads ({r['n_heads']})")
        if r["n_heads"] % r["n_kv_heads"]:
            raise ValueError(f"n_heads ({r['n_heads']}) must be divisible by n_kv_heads ({r['n_kv_heads']})")
        if (r["d_model"] // r["n_heads"]) % 2:
            raise ValueError("head dimension (d_model / n_heads) must be even for RoPE")
        return self


class ParallelSpec(StrictModel):
    """Layout of the ranks: data × tensor × pipeline parallel, and ZeRO."""

    dp: int = Field(1, ge=1, le=4096, description="Data-parallel replicas.")
    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel ranks (attention heads and MLP split).")
    pp: int = Field(1, ge=1, le=256, description="Pipeline stages (transformer blocks split).")
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (≤ 1 when pp > 1).")
    sequence_parallel: bool = Field(
        False, description="Megatron's sequence parallelism (tp > 1; no effect at tp = 1): outside the attention "
        "and MLP matmuls each TP rank holds seq_len/tp of the tokens (residual stream, norms, dropout), with a "
        "reduce-scatter and an all-gather in place of each TP all-reduce (the same traffic), so those "
        "activations shrink by tp. seq_len must divide by tp. Same weights and losses as without it.")
    collective_timeout_s: int = Field(
        1800, ge=60, le=7 * 86400, description="Seconds a collective may wait before the process group aborts "
        "the run (the default group and forgeline's own: TP groups, the checkpoint writers'). Raise it when one "
        "rank works alone for long while the others wait — rank 0 re-hashing a multi-TB checkpoint at resume, "
        "or writing one on slow storage. DeepSpeed's own subgroups keep torch's default (10 min on NCCL).")
    launcher: Literal["spawn", "deepspeed", "torchrun"] = Field(
        "spawn", description="spawn: forgeline starts local ranks itself (CPU/tests); deepspeed: the DeepSpeed "
        "launcher (hostfile/SLURM); torchrun."
    )
    hostfile: str | None = Field(None, description="DeepSpeed hostfile for multi-node runs (launcher: deepspeed).")
    accelerator: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: CUDA when available, else CPU ranks with gloo."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_foreign_features(cls, data):
        # Other trainers' layout keys (context parallel, virtual pipeline, ...): name the missing feature.
        return refuse_foreign_keys(data, PARALLEL_KEYS, "parallel")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @model_validator(mode="after")
    def _zero_fits_pipeline(self) -> "ParallelSpec":
        if self.pp > 1 and self.zero_stage > 1:
            raise ValueError(f"zero_stage {self.zero_stage} is incompatible with pipeline parallelism "
                             f"(pp = {self.pp}): DeepSpeed allows ZeRO ≤ 1 with a pipeline")
        if self.hostfile and self.launcher != "deepspeed":
            raise ValueError("hostfile needs launcher: deepspeed")
        return self


class PretrainSpec(TrainLoopSpec):
    """Pretraining on mix's packed shards (the shared loop knobs plus its evaluation size)."""

    eval_batches: int = Field(4, ge=1, description="Validation micro-batches per evaluation.")
    z_loss: float = Field(
        0.0, ge=0, lt=1, description="PaLM's auxiliary z-loss: adds z_loss · mean(log Z)² (Z the softmax "
        "normaliser of each trained token's logits) to the training loss, keeping logits from drifting large "
        "(1e-4 in PaLM); 0 is off (pretraining only). Train loss rows and the stability guard see the total; eval losses stay "
        "plain cross entropy.")


class PretrainJob(StrictModel):
    """What the pretrain stage's `run()` receives: the shared `model` and `parallel` sections and its own."""

    model: ModelSpec
    parallel: ParallelSpec
    train: PretrainSpec
    adaptive: AdaptiveMixSpec = Field(
        default_factory=AdaptiveMixSpec, description="mix.adaptive: source weights following the per-source val "
        "loss (read by the training loop).")

    @model_validator(mode="after")
    def _layout_fits_model(self) -> "PretrainJob":
        problems = layout_problems(self.model, self.parallel)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def layout_problems(model: ModelSpec, parallel: ParallelSpec) -> list[str]:
    """Why this rank layout cannot hold this model (empty when it can), each naming the params key. A
    checkpoint's shape is known only once its config.json is read: pretrain checks it then (`shape_problems`)."""
    if model.init.kind == "hf":
        return []
    r = model.resolved()
    return shape_problems(r["n_heads"], r["n_kv_heads"], model.ffn_width(), r["n_layers"], parallel,
                          "model.ffn_hidden" if model.ffn_hidden else "model.d_model and model.ffn_multiple_of")


def shape_problems(n_heads: int, n_kv_heads: int, ffn_hidden: int, n_layers: int, parallel: ParallelSpec,
                   ffn_from: str = "model.d_model and model.ffn_multiple_of") -> list[str]:
    """Why `parallel` cannot split a model of this shape (empty when it can), each naming the params key."""
    p, problems = parallel, []
    if n_heads % p.tp or n_kv_heads % p.tp:
        # Each tensor rank owns whole query heads and whole kv heads: a kv head is never replicated, so GQA with
        # fewer kv heads than tp cannot run. Megatron-core has the same rule (divide(num_query_groups, tp) in its
        # attention); only the BigCode fork replicated StarCoder's one MQA head. Name the tp that can.
        fits = [t for t in range(1, n_kv_heads + 1) if n_heads % t == 0 and n_kv_heads % t == 0]
        why = (f": kv heads are split over the tensor ranks, not replicated, so at most {n_kv_heads}"
               if p.tp > n_kv_heads else "")
        problems.append(f"parallel.tp: must divide model n_heads ({n_heads}) and n_kv_heads ({n_kv_heads}), "
                        f"got {p.tp}{why} (tp that fits: {', '.join(map(str, fits))})")
    if ffn_hidden % p.tp:
        problems.append(f"parallel.tp: must divide the SwiGLU width {ffn_hidden} (from {ffn_from}), got {p.tp}")
    if p.pp > n_layers:  # stages need not hold equal counts (DeepSpeed balances them), but one block at least
        problems.append(f"parallel.pp: at most model n_layers ({n_layers}) stages, got {p.pp}")
    return problems
