"""The training-loop knobs pretraining and SFT share (`TrainLoopSpec`), and their parts: optimizer and schedule,
stability guard, telemetry. `specs.pretrain.PretrainSpec` and `specs.sft.SFTSpec` extend `TrainLoopSpec` with what
only they have; the one `Trainer` (tasks/train/loop/trainer.py) reads only these fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from specs.base import StrictModel


class OptimSpec(StrictModel):
    """AdamW with linear warmup and cosine decay."""

    lr: float = Field(3e-3, gt=0, lt=1, description="Peak learning rate.")
    min_lr: float = Field(3e-4, ge=0, lt=1, description="Learning rate at the end of the cosine decay.")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    weight_decay: float = Field(0.1, ge=0, lt=1, description="Decoupled weight decay (not on norms/biases).")
    betas: tuple[float, float] = Field((0.9, 0.95), description="Adam betas.")
    grad_clip: float = Field(1.0, ge=0, description="Global gradient-norm clip (0 disables).")


class StabilitySpec(StrictModel):
    """Spike detection and recovery during training (`pretrain.stability`, `sft.stability`)."""

    enabled: bool = Field(True, description="Watch loss and grad norm; off: every step is applied as is.")
    window: int = Field(50, ge=5, le=100_000, description="Accepted steps forming the reference statistics; "
                        "also the span in which spikes are counted toward a rollback.")
    min_history: int = Field(20, ge=3, description="Accepted steps needed before z-scores are judged "
                             "(NaN/Inf is a spike from the first step).")
    z_threshold: float = Field(6.0, gt=0, description="Robust z-score (median/MAD) above which loss or grad "
                               "norm (on a log scale: it varies multiplicatively) is a spike; only upward jumps "
                               "count.")
    min_rel_std: float = Field(0.01, ge=0, lt=1, description="Floor of the robust std as a fraction of the "
                               "median, so a very smooth curve does not turn tiny wiggles into spikes.")
    on_spike: Literal["skip", "downweight"] = Field(
        "skip", description="skip: drop the optimizer update of the step; downweight: scale its loss by "
        "downweight_factor (a NaN/Inf step is always skipped).")
    downweight_factor: float = Field(0.1, gt=0, lt=1, description="Loss (hence gradient) scale of a spiking step.")
    max_spikes: int = Field(3, ge=1, description="Spikes within `window` steps that trigger a rollback.")
    skip_before: int = Field(0, ge=0, description="Also skip this many batches before the first spike of a "
                             "rolled-back episode (PaLM skipped a few hundred around each spike).")
    lr_cool_factor: float = Field(0.5, gt=0, le=1, description="LR multiplier after a rollback.")
    lr_cool_steps: int = Field(100, ge=0, description="Steps after the restored checkpoint that use the cooled LR.")
    max_rollbacks: int = Field(3, ge=0, description="Rollbacks allowed per run; one more escalation aborts.")
    accum_check: Literal["prepass", "after"] = Field(
        "prepass", description="With grad_accum > 1 (no pipeline): prepass: a forward-only pass over the step's "
        "micro-batches (no autograd, eval mode) judges the step's loss and every micro-batch's loss BEFORE any "
        "backward, so a spike or NaN in any micro-batch skips or down-weights the whole step — costs one extra "
        "forward per micro-batch (about +1/3 of the step's compute, +1/4 with activation checkpointing), no extra "
        "memory; after: no extra cost, the step is judged once its update is applied (a spike is only noted and "
        "counted toward a rollback). With a pipeline only `after` is possible (one train_batch call per step).")

    @model_validator(mode="after")
    def _history_fits_window(self) -> "StabilitySpec":
        if self.min_history > self.window:
            raise ValueError(f"min_history ({self.min_history}) must be ≤ window ({self.window})")
        return self


class SpeedSpec(StrictModel):
    """Precision and speed knobs: compilation, the optimizer kernel, DeepSpeed's mixed-precision mode and its
    communication settings (written explicitly into the generated DeepSpeed config, tasks/train/parallel/dsconfig.py)."""

    compile: Literal["auto", "on", "off"] = Field(
        "auto", description="torch.compile the model (what: `compile_scope`) and the loss's per-chunk math; the "
        "first steps pay the compilation. auto = on when the ranks run on CUDA, off on CPU ranks (resolved at "
        "launch; true/false are read as on/off).")
    compile_scope: Literal["blocks", "model"] = Field(
        "blocks", description="What `compile` compiles. blocks = each transformer block's forward (DeepSpeed's "
        "hooks, the pipeline cut and the loss's chunk loop stay eager; any layout). model = the plain model's "
        "whole forward, loss included, as one graph (nanoGPT's way: fuses across block boundaries and the "
        "embedding, final norm and loss; one H200 profile of a plain loop measured 1.35x blocks before the RoPE "
        "and loss fixes, not yet re-measured); only where nothing but the model runs inside its forward (pp = 1, "
        "tp = 1, ZeRO 0-2): elsewhere the blocks are compiled and the log says so.")
    fused_adamw: Literal["auto", "on", "off"] = Field(
        "auto", description="AdamW's fused kernel (torch.optim.AdamW(fused=True)): auto = on when the ranks run "
        "on CUDA, off on CPU ranks (the plain per-tensor loop, as before).")
    mixed_precision: Literal["auto", "sections", "torch_autocast"] = Field(
        "auto", description="How bf16 is done: sections = DeepSpeed's bf16 section (bf16 weights, fp32 "
        "master copy in the optimizer); torch_autocast = DeepSpeed's torch_autocast mode (fp32 weights, matmuls "
        "under torch.autocast in bf16; measured 0.83× of a plain PyTorch loop vs 0.73–0.77× for the bf16 section "
        "on one H200). auto = torch_autocast on CUDA ranks, sections on CPU ranks (resolved at launch and recorded "
        "in checkpoints: one mode cannot resume the other). fp16 always uses the fp16 section (dynamic loss "
        "scaling); fp32 ignores this.")

    @field_validator("compile", mode="before")
    @classmethod
    def _bool_compile(cls, value: Any) -> Any:
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    def compiles(self, cuda: bool) -> bool:
        """Whether blocks are compiled on ranks that run on CUDA (`cuda`) or not."""
        return self.compile == "on" or (self.compile == "auto" and cuda)

    def scope_at(self, pp: int, tp: int, zero_stage: int) -> str:
        """What `compile_scope` compiles at this layout. The whole model only where its forward holds nothing but
        the model: a pipeline cuts it into stages, tensor parallelism puts collectives inside it (a graph break
        per layer at best), and ZeRO-3's gather/release hooks sit on every submodule, so dynamo would trace
        them (the recompiles that per-block compilation avoids); there the blocks are compiled instead."""
        whole_ok = pp == 1 and tp == 1 and zero_stage < 3
        return "model" if self.compile_scope == "model" and whole_ok else "blocks"

    def autocast(self, precision: str, cuda: bool) -> bool:
        """Whether bf16 runs as DeepSpeed's torch_autocast mode (else its bf16 section), for `precision`."""
        mode = self.mixed_precision if self.mixed_precision != "auto" else \
            ("torch_autocast" if cuda else "sections")
        return precision == "bf16" and mode == "torch_autocast"

    def resolved(self, precision: str, cuda: bool) -> "SpeedSpec":
        """This spec with `auto` made concrete for the ranks' devices (what a launch records)."""
        return self.model_copy(update={
            "compile": "on" if self.compiles(cuda) else "off",
            "mixed_precision": "torch_autocast" if self.autocast(precision, cuda) else
            (self.mixed_precision if self.mixed_precision != "auto" else "sections")})

    overlap_comm: bool | None = Field(
        None, description="Overlap gradient reduction with the backward. None (auto): on for ZeRO-3 (DeepSpeed's "
        "default there) and for ZeRO-2 on GPUs, off otherwise.")
    contiguous_gradients: bool = Field(True, description="Copy reduced gradients into one contiguous buffer "
                                       "(ZeRO 2/3): less fragmentation on GPUs.")
    reduce_bucket_size: int = Field(500_000_000, ge=1, description="Elements per gradient reduce bucket (ZeRO).")
    allgather_bucket_size: int = Field(500_000_000, ge=1, description="Elements per parameter all-gather bucket "
                                       "after the ZeRO 1/2 update.")
    stage3_prefetch_bucket_size: int = Field(50_000_000, ge=0, description="ZeRO-3: elements of parameters "
                                             "prefetched ahead of use.")
    stage3_param_persistence_threshold: int | None = Field(
        None, ge=0, description="ZeRO-3: parameters with fewer elements stay unpartitioned (no gather per use). "
        "None (auto): 100000 on GPUs (DeepSpeed's default), 0 on CPU ranks (every parameter partitioned: the "
        "layout the CPU tests check).")
    stage3_fetch: Literal["block", "module"] = Field(
        "block", description="ZeRO-3: what one parameter gather covers. block = a whole transformer block "
        "(DeepSpeed's z3 leaf modules: one gather/release hook pair per block instead of one per submodule with "
        "parameters, fewer host steps per layer, and no hook inside a compiled block, where each was a graph "
        "break); module = every submodule with parameters on its own (DeepSpeed's default: a smaller peak of "
        "gathered parameters, for blocks too large to hold whole on one device; also what LoRA runs get, whose "
        "adapters' backward found their parameters released under whole-block gathers in DeepSpeed 0.19.8). Same "
        "values either way, within fp32 rounding.")
    stage3_sub_group_size: int = Field(
        1_000_000_000, ge=1, description="ZeRO-3: elements per flat fp32 sub-group of a rank's partition "
        "(DeepSpeed's `sub_group_size`, its default 1e9). Start-up converts each sub-group to an fp32 master with "
        "two transient fp32 copies, and the optimizer set-up and each step use an fp32 gradient buffer of the "
        "largest: a smaller value lowers those transients (1e9 keeps a <1e9-element share in one group). The "
        "update is elementwise, so the values trained are the same; ZeRO-3's optimizer files follow the groups.")


class TelemetrySpec(StrictModel):
    """Throughput, MFU, device stats and where metrics go."""

    device: str = Field("auto", description="Device name for the peak-FLOPs table (h100-sxm, a100, l4, ...); "
                        "auto: torch.cuda.get_device_name(), or cpu.")
    device_peak_tflops: float | None = Field(None, gt=0, description="Dense peak TFLOP/s per device for the "
                                             "training precision; overrides the table (required for unlisted "
                                             "devices, optional on CPU).")
    throughput_window: int = Field(20, ge=1, description="Steps in the sliding window of tokens/s and MFU.")
    warmup_steps: int = Field(2, ge=0, description="First steps left out of tokens/s (allocator warm-up).")
    nvml: bool = Field(True, description="Read GPU temperature/power/clocks/memory via NVML every log_every "
                       "steps and warn on thermal/power throttling (no-op without a GPU or nvidia-ml-py).")
    wandb: Literal["offline", "disabled", "online"] = Field(
        "offline", description="offline: files under the run folder, `wandb sync` later; online needs "
        "WANDB_API_KEY in the environment, never in params.")
    wandb_project: str = Field("forgeline", min_length=1, description="wandb project name.")


LoRATarget = Literal["q", "k", "v", "o", "gate", "up", "down"]


class AdapterSpec(StrictModel):
    """Parameter-efficient finetuning: `lora` freezes the pretrained weights and trains low-rank pairs beside
    the targeted linears (Hu et al. 2021); only they hold optimizer state. Export writes the merged model and the
    adapter in PEFT's format."""

    kind: Literal["none", "lora"] = Field("none", description="`none`: full finetuning; `lora`: adapters only.")
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha: the update is scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter's input.")
    targets: list[LoRATarget] = Field(
        default_factory=lambda: ["q", "k", "v", "o", "gate", "up", "down"],
        description="Linears that get adapters, by their Hugging Face names without `_proj` (q, k, v, o: "
        "attention; gate, up, down: the SwiGLU MLP). All of them is QLoRA's recommendation.")

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, targets: list[str]) -> list[str]:
        if not targets or len(set(targets)) != len(targets):
            raise ValueError("targets: a non-empty list without repeats")
        return targets


class TrainLoopSpec(StrictModel):
    """What every training objective's loop is driven by: steps, batches, precision, optimizer, cadences of
    logging / evaluation / checkpoints, the stability guard, telemetry and the sanity mode."""

    steps: int = Field(200, ge=0, description="Optimizer steps; 0 trains nothing and writes the starting weights "
                       "(with `model.init.kind: hf`, a conversion-only run: HF → forgeline, evaluated downstream).")
    micro_batch_size: int = Field(8, ge=1, description="Sequences (packed rows) per rank per micro-batch.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step (per pipeline: micro-batches).")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="`auto`: bf16 on GPUs that support it (fp16 with dynamic loss scaling on older ones), "
        "fp32 on CPU — resolved once per launch, and the resolved value is what checkpoints record. Or set one.")
    optim: OptimSpec = Field(default_factory=OptimSpec, description="Optimizer and schedule.")
    activation_checkpointing: bool = Field(False, description="Recompute block activations in backward.")
    eval_every: int = Field(50, ge=1, description="Steps between evaluations (and one at the end).")
    checkpoint_every: int = Field(50, ge=1, description="Steps between checkpoints (and one at the end).")
    keep_checkpoints: int = Field(2, ge=1, description="Newest checkpoints kept on disk.")
    checkpoint_async: bool = Field(
        False, description="Save checkpoints in the background: training waits only while each rank copies its "
        "state to host memory (one extra host copy of it is kept); a thread per rank writes and hashes the files, "
        "and the tag is published (manifest, then `latest`) once every rank's files are written — a crash before "
        "that leaves it unpublished, so resume uses the previous one (a kill can then lose one more checkpoint "
        "interval). false: write and hash before training goes on. Same bytes either way.")
    checkpoint_elastic: bool = Field(
        True, description="Every checkpoint also holds the layout-free copy of the training state (`<tag>/elastic/`:"
        " fp32 masters and Adam moments, ~12 bytes per trainable parameter, ~1.75x the checkpoint's bytes) that "
        "lets a run resume at another dp/tp/pp/ZeRO layout. false: not written, so saves are smaller and faster, "
        "and such a checkpoint resumes only at the layout that wrote it (another layout is refused).")
    log_every: int = Field(10, ge=1, description="Steps between progress lines / metric rows.")
    cpu_threads: int = Field(
        2, ge=1, le=1024, description="torch CPU threads of the run on one machine, split evenly over its local "
        "ranks (at least 1 each). A param, not the machine's core count: float sums depend on how work is split "
        "over threads, so the same params give the same weights on a 1-core and a 64-core machine.")
    stability: StabilitySpec = Field(
        default_factory=StabilitySpec, description="Loss/grad-norm spike detection, skip/down-weight, rollback "
        "with a retry cap.")
    telemetry: TelemetrySpec = Field(
        default_factory=TelemetrySpec, description="Throughput, MFU, device stats and metric sinks.")
    speed: SpeedSpec = Field(default_factory=SpeedSpec, description="torch.compile, fused AdamW, DeepSpeed's "
                             "mixed-precision mode and communication buckets.")
    sanity_overfit: bool = Field(
        False, description="Sanity mode (\"overfit a tiny set first\"): train `steps` times on the first global "
        "batch only and fail the stage unless its loss falls to sanity_target_loss.")
    sanity_target_loss: float = Field(0.2, gt=0, description="Sanity mode: the train loss the repeated batch must "
                                      "reach by the last step.")
