"""A LoRA run's adapter in PEFT's format, beside the Hugging Face export of the base it applies to.

SFT writes the merged model (base + scale·B·A, what evaluation and `data/export/hf` use) and the adapter tensors
(`data/sft/adapter/`). The adapter's base is the merged weights minus each ΔW (the frozen pretrained weights, up to
one fp32 rounding); it is exported as its own HF folder, and PEFT itself builds the adapter over it
(`get_peft_model` with the same r, alpha, dropout and target modules, our A and B loaded into its `lora_A` /
`lora_B`) and writes `adapter_config.json` + `adapter_model.safetensors` with `save_pretrained`. The check that
matters to a user: `PeftModel.from_pretrained(base, adapter)` gives the merged model's logits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from specs.architecture import ModelConfig
from tasks.train.hf.hf_export import ExportMismatch, key_map
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


def write_adapter(base_dir: Path, lora: dict[str, torch.Tensor], adapter: dict[str, Any], cfg: ModelConfig,
                  dest: Path) -> None:
    """PEFT's adapter folder for `lora` over the HF model in `base_dir` (written by PEFT's `save_pretrained`)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True, dtype=torch.float32)
    config = LoraConfig(r=adapter["r"], lora_alpha=adapter["alpha"], lora_dropout=adapter["dropout"],
                        target_modules=sorted(HF_MODULES[t] for t in adapter["targets"]), bias="none",
                        task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    names = key_map(cfg)
    ours: dict[str, torch.Tensor] = {}
    for key, value in lora.items():
        hf_linear = names[f"{linear_of(key)}.weight"][: -len(".weight")]
        side = "lora_A" if key.endswith(".A") else "lora_B"
        ours[f"base_model.model.{hf_linear}.{side}.default.weight"] = value
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
