"""A LoRA run's adapter in PEFT's format, beside the Hugging Face export of the base it applies to.

SFT writes the merged model (base + scale·B·A, what evaluation and `data/export/hf` use) and the adapter tensors
(`data/sft/adapter/`). The adapter's base is the merged weights minus each ΔW (the frozen pretrained weights, up to
one fp32 rounding); it is exported as its own HF folder, and PEFT itself builds the adapter over it
(`get_peft_model` with the same r, alpha, dropout and target modules, our A and B loaded into its `lora_A` /
`lora_B`) and writes `adapter_config.json` + `adapter_model.safetensors` with `save_pretrained`. The check that
matters to a user: `PeftModel.from_pretrained(base, adapter)` gives the merged model's logits.

Phi-3 fuses q/k/v into `qkv_proj` and gate/up into `gate_up_proj`, where forgeline has one adapter per part. One
LoRA on the fused module is exactly their sum: with the n targeted parts' pairs (A_i [r, in], B_i [rows_i, r]),
A' = [A_1; ...; A_n] ([n·r, in]) and B' block-diagonal (B_i in part i's rows and columns i·r..(i+1)·r, zero
rows for an untargeted part), so B'A' stacks the parts' B_i A_i; rank n·r and alpha n·alpha (PEFT's
`rank_pattern` / `alpha_pattern`) keep the scale alpha / r.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from specs.architecture import ModelConfig
from tasks.train.hf.hf_export import ExportMismatch, hf_refs
from tasks.train.hf.hf_families import FUSED
from tasks.train.modeling.lora import HF_MODULES


def linear_of(key: str) -> str:
    """`layers.3.attn.wq.lora.A` -> `layers.3.attn.wq`."""
    return key.rsplit(".lora.", 1)[0]


def base_weights(merged: dict[str, torch.Tensor], lora: dict[str, torch.Tensor], scale: float
                 ) -> dict[str, torch.Tensor]:
    """The weights the adapter was trained on: merged − scale·B·A for every adapted linear."""
    base = dict(merged)
    for linear in sorted({linear_of(k) for k in lora}):
        delta = lora[f"{linear}.lora.B"].double() @ lora[f"{linear}.lora.A"].double() * scale
        base[f"{linear}.weight"] = (merged[f"{linear}.weight"].double() - delta).float()
    return base


def peft_tensors(lora: dict[str, torch.Tensor], cfg: ModelConfig) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """(PEFT's LoRA tensors `<hf module>.lora_A|lora_B.default.weight` for `lora`, parts joined per fused module
    (module docstring); the number of parts joined, per module name such as `qkv_proj`)."""
    refs = hf_refs(cfg)
    groups: dict[str, list[str]] = {}
    for linear in sorted({linear_of(k) for k in lora}):
        groups.setdefault(refs[f"{linear}.weight"].name[: -len(".weight")], []).append(linear)
    out: dict[str, torch.Tensor] = {}
    joined: dict[str, int] = {}
    for module, linears in groups.items():
        first = refs[f"{linears[0]}.weight"]
        if first.stop is None:  # unfused: the pair as it is
            a, b = lora[f"{linears[0]}.lora.A"], lora[f"{linears[0]}.lora.B"]
        else:
            linears.sort(key=lambda lin: refs[f"{lin}.weight"].start)
            a = torch.cat([lora[f"{lin}.lora.A"] for lin in linears])  # [n·r, in]
            r = lora[f"{linears[0]}.lora.A"].shape[0]
            b = a.new_zeros(first.rows, len(linears) * r)  # [fused rows, n·r]
            for i, lin in enumerate(linears):
                ref = refs[f"{lin}.weight"]
                b[ref.start:ref.stop, i * r:(i + 1) * r] = lora[f"{lin}.lora.B"]
            joined[module.rsplit(".", 1)[-1]] = len(linears)
        out[f"base_model.model.{module}.lora_A.default.weight"] = a
        out[f"base_model.model.{module}.lora_B.default.weight"] = b
    return out, joined


def write_adapter(base_dir: Path, lora: dict[str, torch.Tensor], adapter: dict[str, Any], cfg: ModelConfig,
                  dest: Path) -> None:
    """PEFT's adapter folder for `lora` over the HF model in `base_dir` (written by PEFT's `save_pretrained`)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    ours, joined = peft_tensors(lora, cfg)
    fused_in = {part.rsplit(".", 1)[-1]: whole.rsplit(".", 1)[-1]  # e.g. q_proj -> qkv_proj for phi3
                for whole, parts in FUSED.get(cfg.hf_model_type or "", {}).items() for part in parts}
    modules = sorted({fused_in.get(HF_MODULES[t], HF_MODULES[t]) for t in adapter["targets"]})
    model = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True, dtype=torch.float32)
    r, alpha = adapter["r"], adapter["alpha"]
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=adapter["dropout"], target_modules=modules,
                        bias="none", task_type="CAUSAL_LM", rank_pattern={m: n * r for m, n in joined.items()},
                        alpha_pattern={m: n * alpha for m, n in joined.items()})
    peft_model = get_peft_model(model, config)
    wanted = {k for k in peft_model.state_dict() if ".lora_" in k}
    if set(ours) != wanted:
        raise ExportMismatch(f"adapter: PEFT expects {len(wanted)} LoRA tensors, SFT wrote {len(ours)} "
                             f"(e.g. {sorted(wanted ^ set(ours))[:2]})")
    peft_model.load_state_dict(ours, strict=False)
    peft_model.save_pretrained(dest, safe_serialization=True)


def check_adapter(base_dir: Path, adapter_dir: Path, merged_dir: Path, *, tol: float, seq: int, batch: int = 2,
                  seed: int = 0) -> float:
    """Max |logits of PeftModel(base, adapter) − logits of the merged export| on seeded ids; raises
    ExportMismatch above `tol`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    def load(path: Path) -> Any:
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32,
                                                    attn_implementation="eager")

    merged = load(merged_dir).eval()
    adapted = PeftModel.from_pretrained(load(base_dir), adapter_dir).eval()
    ids = torch.randint(0, merged.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        diff = float((adapted(input_ids=ids).logits - merged(input_ids=ids).logits).abs().max())
    if not diff <= tol:
        raise ExportMismatch(f"{adapter_dir}: PEFT's base + adapter differs from the merged model by {diff:.3g} "
                             f"(tolerance {tol:g})")
    return diff
