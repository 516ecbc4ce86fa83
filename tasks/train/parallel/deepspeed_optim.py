"""Adam's state under DeepSpeed's optimizer wrappers, read and written whole for elastic resume
(tasks/train/checkpointing/elastic.py): the second half of forgeline's DeepSpeed adapter
(tasks/train/parallel/deepspeed_adapter.py holds the rest), under the same rule — each function says what of
DeepSpeed's it relies on, and tests/test_deepspeed_adapter.py pins it.

    adam_step, training_state, prime_adam_state, link_adam_state, set_training_state
        the wrapped optimizer's `.optimizer`, ZeRO-3's `fp32_partitioned_groups_flat`, `_hp_mapping` fragments,
        `ds_tensor`, the safe_*_full API (exercised through real engines by tests/test_elastic_resume.py)
"""

from __future__ import annotations

from typing import Any

import torch


ADAM_MOMENTS = ("exp_avg", "exp_avg_sq")


def _base_optimizer(ds: Any) -> Any:
    """torch's AdamW under DeepSpeed's wrapper (ZeRO 1–3, bf16/fp16), or the client AdamW itself (fp32, no ZeRO).

    Relies on: DeepSpeed's optimizer wrappers keep the client optimizer as `.optimizer`; without ZeRO and in fp32
    `ds.optimizer` is the client optimizer, whose state is keyed by the model's own parameters."""
    return getattr(ds.optimizer, "optimizer", ds.optimizer)


def adam_step(ds: Any) -> float | None:
    """Adam's step count (None before the first update: no state yet). Every state entry holds the same count
    (every parameter is updated or none is: a skipped step skips the optimizer entirely)."""
    steps = {float(s["step"]) for s in _base_optimizer(ds).state.values() if "step" in s}
    if len(steps) > 1:
        raise RuntimeError(f"optimizer state holds different step counts {sorted(steps)}")
    return steps.pop() if steps else None


def training_state(ds: Any, p: torch.Tensor, has_state: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(fp32 master, [exp_avg, exp_avg_sq]) of parameter `p`, whole (a collective over dp under ZeRO); zero
    moments before the first update.

    Relies on: `deepspeed.utils.safe_get_full_fp32_param` / `safe_get_full_optimizer_state` (ZeRO 1–3, bf16),
    which answer None when DeepSpeed keeps no master (fp32 without ZeRO: the parameter and torch's state)."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    full = safe_get_full_fp32_param(p)
    if full is None:
        state = _base_optimizer(ds).state.get(p, {})
        return p.detach(), [state[k].detach() if k in state else torch.zeros_like(p) for k in ADAM_MOMENTS]
    return full, [safe_get_full_optimizer_state(p, k) if has_state else torch.zeros_like(full) for k in ADAM_MOMENTS]


def _adam_entry(like: torch.Tensor, step: float, on_device: bool) -> dict[str, torch.Tensor]:
    """torch AdamW's per-tensor state as its `_init_group` creates it: step a float32 scalar tensor, on the CPU
    unless the group is fused or capturable (`on_device`), whose kernels read it on the parameter's device
    (torch's own `load_state_dict` moves it there; a CPU step handed to the CUDA fused kernel is read as a
    device pointer)."""
    return {"step": torch.tensor(float(step), dtype=torch.float32, device=like.device if on_device else "cpu"),
            "exp_avg": torch.zeros_like(like), "exp_avg_sq": torch.zeros_like(like)}


def _steps_on_device(optimizer: Any) -> bool:
    return any(g.get("fused") or g.get("capturable") for g in optimizer.param_groups)


def prime_adam_state(ds: Any, step: float) -> None:
    """Create Adam's state (zero moments, step count `step`) before any update, so the safe_set_* calls have
    somewhere to write: torch AdamW creates it lazily at the first `step()`, and DeepSpeed links each
    parameter's fragment of it only after that.

    Relies on: ZeRO-3's base optimizer state is keyed by `fp32_partitioned_groups_flat[i]`; ZeRO 1–2's and the
    bf16 optimizer's by each base param group's one flat fp32 partition; a parameter's `_hp_mapping`
    (`tensor_fragment`) has `param_group_index` and `set_optim_state_fragment(flat, state)`, what DeepSpeed's
    own `lazy_init_hp_params_optimizer_state` calls after the first step (it relinks the same tensors then)."""
    base = _base_optimizer(ds)
    if base is ds.optimizer:
        return  # fp32 without ZeRO: entries are made per parameter by set_training_state
    flats = getattr(ds.optimizer, "fp32_partitioned_groups_flat", None)
    if flats is None:
        flats = [p for group in base.param_groups for p in group["params"]]
    for flat in flats:
        base.state[flat] = _adam_entry(flat, step, _steps_on_device(base))
    link_adam_state(ds)


def link_adam_state(ds: Any) -> None:
    """Point every ZeRO 1–2 / bf16 parameter's fragment at its part of Adam's state, as it stands now.

    DeepSpeed 0.19 links them once, right after the *first* param group's first update, when the other groups
    (ours: decay and no-decay) have no state yet — their fragments stay empty, and
    `safe_get_full_optimizer_state` then fails with "exp_avg not found in optimizer state fragment". Relinking
    to the same tensors is what DeepSpeed's `lazy_init_hp_params_optimizer_state` does; it changes no value.
    Relies on: as `prime_adam_state`."""
    base = _base_optimizer(ds)
    for p in ds.module.parameters():
        mapping = getattr(p, "_hp_mapping", None)
        if mapping is not None:
            flat = base.param_groups[mapping.param_group_index]["params"][0]
            if flat in base.state:
                mapping.set_optim_state_fragment(flat, base.state[flat])


def set_training_state(ds: Any, p: torch.Tensor, fp32: torch.Tensor, moments: list[torch.Tensor],
                       step: float) -> None:
    """Set parameter `p`'s fp32 master, Adam moments and the model's copy from whole values (after
    `prime_adam_state`); every dp rank sets its own part, nothing is communicated except under ZeRO-3.

    Relies on: `safe_set_full_fp32_param` / `safe_set_full_optimizer_state` write only the optimizer's fp32
    partition; the model's copy is the full `p` under ZeRO 1–2 and bf16 (every dp rank holds it), and the flat
    partition `p.ds_tensor` under ZeRO-3 (read back with `safe_get_local_fp32_param`)."""
    from deepspeed.utils import safe_get_local_fp32_param, safe_set_full_fp32_param, safe_set_full_optimizer_state

    if hasattr(p, "ds_id") or hasattr(p, "_hp_mapping"):
        safe_set_full_fp32_param(p, fp32)
        for key, value in zip(ADAM_MOMENTS, moments):
            safe_set_full_optimizer_state(p, value, key)
        if hasattr(p, "ds_id"):
            local = safe_get_local_fp32_param(p).reshape(-1)
            n = min(local.numel(), p.ds_tensor.numel())
            p.ds_tensor.data.view(-1)[:n].copy_(local[:n])
        else:
            p.data.copy_(fp32.reshape(p.shape))
        return
    p.data.copy_(fp32.reshape(p.shape))
    entry = _adam_entry(p, step, _steps_on_device(_base_optimizer(ds)))
    for key, value in zip(ADAM_MOMENTS, moments):
        entry[key].copy_(value.reshape(p.shape))
    _base_optimizer(ds).state[p] = entry
