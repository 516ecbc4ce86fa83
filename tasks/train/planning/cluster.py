"""The cluster a layout is planned for: `ClusterSpec`, whose fields are also `python -m tasks plan`'s options.

Its own module so the CLI can build every subcommand's options without importing the planner and its cost model
(every stage's process parses the command line: what it imports becomes each stage's code dependency).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from specs.base import StrictModel
from specs.train import SpeedSpec

# The engine's own choice of bf16 mode (`pretrain.speed.mixed_precision`), the same options.
MixedPrecision = SpeedSpec.model_fields["mixed_precision"].annotation


class ClusterSpec(StrictModel):
    """The machines a layout is planned for (not part of params: the same run may be planned for many)."""

    nodes: int = Field(1, ge=1, le=4096, description="Nodes (hosts).")
    gpus_per_node: int = Field(1, ge=1, le=64, description="Devices per node (GPUs, or CPU ranks on CPU).")
    memory_gb: float = Field(80.0, gt=0, le=4096, description="Usable memory per device in GiB. Left out, `plan` takes the size the "
                             "device's name states (a100-40gb) or its product is sold in (l4: 24, h200: 141; "
                             "plan_memory.DEVICE_MEMORY_GB), else 80.")
    device: str = Field("cpu", description="Device name, e.g. h100-sxm, a100, l4, cpu (telemetry's peak table).")
    intra_node: Literal["nvlink", "pcie", "shm"] = Field(
        "nvlink", description="Link between devices of a node (tensor-parallel all-reduces, data-parallel "
        "traffic that stays in a node): NVLink, PCIe gen4, or shared memory for CPU ranks; the step-time "
        "estimate prices it (tasks/train/planning/plan_cost.py).")
    inter_node: Literal["infiniband", "ethernet", "none"] = Field(
        "infiniband", description="Link between nodes (pipeline sends, data-parallel traffic across nodes): "
        "InfiniBand with one HCA per GPU, 100 GbE with one NIC per node, or none.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "bf16", description="Training precision: weights and grads take 4 bytes/param in fp32, 2 in bf16/fp16 "
        "through DeepSpeed's section, 4 in bf16 through torch_autocast (--mixed-precision).")
    mixed_precision: MixedPrecision = Field(
        "auto", description="How bf16 trains, as the engine's pretrain.speed.mixed_precision: auto = "
        "torch_autocast on GPUs (fp32 weights and gradients, bf16 matmuls; what a CUDA run does), sections on "
        "--device cpu; sections = DeepSpeed's bf16 section (bf16 weights, fp32 master copy).")
    peak_tflops: float | None = Field(
        None, gt=0, le=100_000, description="Dense peak TFLOP/s per device in the training precision, for a "
        "device without an entry in telemetry's peak table (a CPU, a new accelerator); given, it replaces the "
        "table's figure in the step-time estimate.")
    compile: Literal["auto", "on", "off"] = Field(
        "auto", description="Whether the blocks run compiled, as the engine's pretrain.speed.compile: auto = on "
        "GPUs, off on --device cpu. Eager blocks under torch_autocast hold more bf16 weight copies "
        "(tasks/train/planning/plan_memory.py autocast_weight_copy_bytes).")
    overhead_gb: float = Field(
        2.0, ge=0, le=1024, description="Fixed reserve per device in GiB: CUDA context, NCCL and DeepSpeed "
        "communication buckets, allocator fragmentation.")

    @field_validator("inter_node")
    @classmethod
    def _a_link_between_nodes(cls, value: str, info: ValidationInfo) -> str:
        nodes = info.data.get("nodes", 1)
        if value == "none" and nodes > 1:
            raise ValueError(f"'none' is for one node, but nodes = {nodes}: name the link between them "
                             "(infiniband or ethernet)")
        return value

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def autocast(self) -> bool:
        """Whether bf16 runs as DeepSpeed's torch_autocast mode on these devices, as the engine resolves it
        (SpeedSpec.autocast; a device other than `cpu` is a CUDA rank)."""
        return SpeedSpec(mixed_precision=self.mixed_precision).autocast(self.precision, self.device != "cpu")

    @property
    def compiled(self) -> bool:
        """Whether the blocks run compiled on these devices, as the engine resolves `compile`
        (SpeedSpec.compiles; a device other than `cpu` is a CUDA rank)."""
        return SpeedSpec(compile=self.compile).compiles(self.device != "cpu")

    @property
    def training_mode(self) -> str:
        """The precision as the memory model prices it: fp32, fp16, bf16 (section) or bf16 torch_autocast."""
        return "bf16 torch_autocast" if self.autocast else self.precision
