"""Fused projections: several linears that read the same input, stacked by output rows into one weight, so one
GEMM replaces three (attention's q, k, v: `attn.wqkv`) or two (SwiGLU's gate and up: `mlp.w13`).

The fused weight is the model's own parameter while it trains; everywhere outside the training module the plain
model's separate tensors remain the currency — consolidated weights, the layout-free checkpoint copy, Hugging
Face import/export, the random init's per-name generators, LoRA's targets. The conversion happens at those
boundaries only, through the helpers here, driven by one attribute the fused parameter carries:

    p.fused_parts = (("wq", 768), ("wk", 256), ("wv", 256))    # part name, rows of the WHOLE (unsplit) part

Row order is part after part. Under tensor parallelism every part is split over the TP ranks on its own
(Megatron's column split of q, of k and of v), so TP rank r holds [q_r; k_r; v_r]: its local rows per part are
the part's rows / tp, in the same order. Plain key of a part: the fused module's name replaced by the part's,
`layers.3.attn.wqkv.weight` -> `layers.3.attn.wq.weight` (biases alike).
"""

from __future__ import annotations

from typing import Callable

import torch

ATTR = "fused_parts"
Parts = tuple[tuple[str, int], ...]


def mark(p: torch.Tensor, parts: Parts) -> torch.Tensor:
    """Record on `p` that its rows are `parts` stacked (returns `p`)."""
    setattr(p, ATTR, tuple((str(name), int(rows)) for name, rows in parts))
    return p


def parts_of(p: torch.Tensor) -> Parts | None:
    return getattr(p, ATTR, None)


def rows_of(p: torch.Tensor) -> int:
    """Rows `p` holds on this rank (a ZeRO-3 partitioned parameter is empty; its shape is `ds_shape`)."""
    return int(getattr(p, "ds_shape", p.shape)[0])


def local_sizes(p: torch.Tensor, rows: int | None = None) -> list[int]:
    """Rows of each part in this rank's `p` (`rows`: the local total, default `p`'s own): the whole parts'
    rows scaled by the share of the fused tensor this rank holds (1/tp under tensor parallelism)."""
    parts = parts_of(p)
    assert parts is not None, "not a fused parameter"
    total = sum(r for _, r in parts)
    local = rows_of(p) if rows is None else rows
    if any(r * local % total for _, r in parts):
        raise ValueError(f"fused parameter of {local} rows does not hold equal shares of parts {parts}")
    return [r * local // total for _, r in parts]


def plain_key(key: str, part: str) -> str:
    """`layers.3.attn.wqkv.weight`, "wq" -> `layers.3.attn.wq.weight`."""
    owner, leaf = key.rsplit(".", 1)
    return f"{owner.rsplit('.', 1)[0]}.{part}.{leaf}"


def plain_keys(key: str, p: torch.Tensor) -> list[str]:
    """The plain model's keys `p` (named `key`) stands for: itself, or one per fused part."""
    parts = parts_of(p)
    return [key] if parts is None else [plain_key(key, name) for name, _ in parts]


def split_values(key: str, p: torch.Tensor, value: torch.Tensor) -> dict[str, torch.Tensor]:
    """`value` (this rank's rows of `p`, or a tensor shaped like them: an Adam moment) as plain key -> rows."""
    parts = parts_of(p)
    if parts is None:
        return {key: value}
    pieces = value.split(local_sizes(p, value.size(0)), dim=0)
    return {plain_key(key, name): piece for (name, _), piece in zip(parts, pieces)}


def join_values(key: str, p: torch.Tensor, read: Callable[[str], torch.Tensor]) -> torch.Tensor:
    """This rank's value of `p` from the plain tensors `read(plain key)` returns (each this rank's rows), read
    one part at a time into the stacked tensor: the transient is one part, not all of them plus their copy."""
    if parts_of(p) is None:
        return read(key)
    sizes, out, row = local_sizes(p), None, 0
    for plain, rows in zip(plain_keys(key, p), sizes):
        piece = read(plain)
        if piece.size(0) != rows:
            raise ValueError(f"`{plain}` has {piece.size(0)} rows here, the fused `{key}` expects {rows}")
        if out is None:
            out = piece.new_empty((sum(sizes), *piece.shape[1:]))
        out[row:row + rows] = piece
        row += rows
    return out


def shard_rows(full: torch.Tensor, parts: Parts, size: int, rank: int) -> torch.Tensor:
    """TP rank `rank`'s rows of a whole fused tensor made of `parts`: each part split on its own, the slices
    stacked."""
    pieces = full.split([r for _, r in parts], dim=0)
    return torch.cat([piece.chunk(size, dim=0)[rank] for piece in pieces], dim=0)


def split_output(y: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor]:
    """A fused linear's output [..., Σ rows] as one view per part (the projections' separate outputs)."""
    return list(y.split(local_sizes(weight, y.size(-1)), dim=-1))


def plain_state(named: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A module's tensors (`dict(model.named_parameters())`, a state dict of parameters) under plain keys."""
    out: dict[str, torch.Tensor] = {}
    for key, p in named.items():
        out.update(split_values(key, p, p))
    return out


def fused_state(plain: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A plain-keyed state dict joined into `model`'s own keys (its fused parameters stacked), for
    `load_state_dict`; tensors of non-parameter keys pass through."""
    out = dict(plain)
    for key, p in model.named_parameters():
        if parts_of(p) is not None:
            pieces = [out.pop(k) for k in plain_keys(key, p)]
            out[key] = torch.cat(pieces, dim=0)
    return out
