"""LoRA (Hu et al. 2021) on the decoder's linears, tensor-parallel aware; PEFT's format is written by export.

Each targeted linear keeps its frozen weight W under its own name (so the plain model's keys, the per-rank
weight loader and checkpoints are unchanged) and gains a child `lora` with A [r, in] and B [out, r]; a forward
hook adds scale · B(A(dropout(x))) to the linear's output, scale = alpha / r. B starts at zero, so step 0 is the
base model; A starts from a seeded normal (std 1/r, each tensor from its own generator as the model's weights).

With tensor parallelism the update follows the base's split, adding one small collective of width r:

    column-parallel (W rows split):  h = A x (A replicated) ─copy_to_tp─► B_local h  → the local output slice
    row-parallel (W columns split):  h = Σ_tp A_local x_local ─reduce_from_tp─► B h (B replicated)
                                     → added after the base's own all-reduce

`copy_to_tp` all-reduces dh backward, so the replicated A gets the full gradient on every TP rank; the split
tensor (B_local or A_local) carries `partition_dim` like the base weights, and `tasks/train/checkpointing/weights.py` joins it.
Under sequence parallelism the r-wide h is gathered (column) or reduce-scattered (row) by tokens instead, and the
replicated factor's gradient is summed over the group (`LoRAUpdate._sequence_parallel`). A column-parallel
linear there is not called as a module (its region's `gather_linears` reads its weight), so the sequence-parallel
attention / MLP add `lora` themselves (tp_model); a row-parallel one still runs the hook.

Only the adapters train: every other parameter is frozen, and the client optimizer is built over trainable
parameters only (`dsconfig.param_groups`), so optimizer states exist for the adapters alone. At the end the
update is merged into each rank's own slice (ΔW = scale · B A needs no communication: A or B is whole wherever
the other is split) for the model export and evaluation use, and the adapter is written beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tasks.train.modeling.model import init_normal
from tasks.train.parallel.sequence_parallel import gather_sequence, scatter_sequence
from tasks.train.parallel.tensor_parallel import RowParallelLinear, copy_to_tp, reduce_from_tp
from tasks.train.parallel.tp_context import TPContext

if TYPE_CHECKING:  # SFT's adapter section (a type for readers: importing specs/sft.py would widen pretrain's deps)
    from specs.train import AdapterSpec

# forgeline's linear names for the targets PEFT users name after Hugging Face's modules
TARGETS = {"q": "attn.wq", "k": "attn.wk", "v": "attn.wv", "o": "attn.wo", "gate": "mlp.w1", "up": "mlp.w3",
           "down": "mlp.w2"}
HF_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
              "down": "down_proj"}


class LoRAUpdate(nn.Module):
    """The low-rank pair of one linear (this rank's share of it)."""

    def __init__(self, linear: nn.Module, r: int, alpha: float, dropout: float, seed: int, name: str,
                 tp: TPContext):
        super().__init__()
        out_local, in_local = linear.weight.shape
        self.row = isinstance(linear, RowParallelLinear) and tp.active
        self.col = tp.active and not self.row
        self.tp, self.scale, self.drop = tp, alpha / r, nn.Dropout(dropout)
        in_full = in_local * tp.size if self.row else in_local
        a = init_normal((r, in_full), 1.0 / r, seed, f"{name}.lora.A")       # [r, in]
        self.A = nn.Parameter(a.chunk(tp.size, dim=1)[tp.rank].clone() if self.row else a)
        self.B = nn.Parameter(torch.zeros(out_local, r))                     # [out(/tp), r]
        split = (self.A, 1) if self.row else (self.B, 0) if self.col else (None, None)
        if split[0] is not None:
            split[0].partition_dim = split[1]  # type: ignore[attr-defined]
            split[0].tensor_model_parallel = True  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.sequence_parallel:
            return self._sequence_parallel(x)
        h = self.drop(x) @ self.A.t()                                        # [..., r] (partial when row-split)
        if self.row:
            h = reduce_from_tp(h, self.tp)
        elif self.col:
            h = copy_to_tp(h, self.tp)
        return (h @ self.B.t()) * self.scale                                 # [..., out(/tp)]

    def _sequence_parallel(self, x: torch.Tensor) -> torch.Tensor:
        """The update under sequence parallelism, where the base's input or output holds T/tp tokens: the r-wide
        activation is what crosses the TP group (all-gathered, or reduce-scattered, by tokens), and the whole
        factor, which then sees only this rank's tokens, sums its gradient over the group (`copy_to_tp`)."""
        if self.col:  # x: this rank's tokens [B, T/tp, in] (the base gathers inside gather_linears)
            h = self.drop(x) @ copy_to_tp(self.A, self.tp).t()               # [B, T/tp, r]
            h = gather_sequence(h, self.tp)                                  # [B, T, r]; dh reduce-scattered
            return (h @ self.B.t()) * self.scale                             # [B, T, out/tp]
        h = self.drop(x) @ self.A.t()                                        # [B, T, r] partial (in split)
        h = scatter_sequence(h, self.tp)                                     # [B, T/tp, r] summed
        return (h @ copy_to_tp(self.B, self.tp).t()) * self.scale            # [B, T/tp, out]

    def delta(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """ΔW of this rank's slice from (possibly gathered) values of A and B: scale · B A."""
        return (b.double() @ a.double() * self.scale).float()


def _add_update(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    return output + module.lora(inputs[0])


def apply_lora(module: nn.Module, layers: list[tuple[int, nn.Module]], adapter: AdapterSpec, seed: int,
               tp: TPContext) -> list[str]:
    """Freeze `module` and add adapters to the targeted linears of its Blocks (`layers`: (global index, layer)
    pairs of this rank, so a pipeline stage names and seeds them as the plain model does); returns the plain
    names of the adapted linears (`layers.<i>.attn.wq`, ...)."""
    for p in module.parameters():
        p.requires_grad_(False)
    names = []
    for idx, block in layers:
        if type(block).__name__ != "Block":
            continue
        for target in adapter.targets:
            linear = block.get_submodule(TARGETS[target])
            name = f"layers.{idx}.{TARGETS[target]}"
            linear.lora = LoRAUpdate(linear, adapter.r, adapter.alpha, adapter.dropout, seed, name, tp)
            linear.register_forward_hook(_add_update)
            names.append(name)
    if not names:
        raise ValueError("sft.adapter: no linear was targeted (no Block on this rank?)")
    return names


def merge_lora(values: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Merge each adapter of `values` (key → this rank's value, as `Engine` collects them) into its linear's
    weight, in place, and move the adapter tensors out; returns them. Local slices suffice: where B is split
    (column-parallel) A is whole, and where A is split (row-parallel) B is whole, so B A is this rank's ΔW."""
    adapters = {k: values.pop(k) for k in [k for k in values if is_adapter_key(k)]}
    for key in adapters:
        if key.endswith(".lora.A"):
            linear = key[: -len(".lora.A")]
            a, b = adapters[key], adapters[f"{linear}.lora.B"]
            values[f"{linear}.weight"] = values[f"{linear}.weight"] + (b.double() @ a.double() * scale).float()
    return adapters


def is_adapter_key(key: str) -> bool:
    """`layers.<i>.<linear>.lora.A` / `.B`: adapter tensors, kept out of the model's own weights."""
    return ".lora." in key
