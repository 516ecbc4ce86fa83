"""Final weights without gathers (tasks/train/checkpointing/weights.py): rank shards joined by a streaming merge on CPU.

The shards are cut here the way ranks cut them (TP slices along their split dimension, replicated tensors on TP
rank 0 only, one file per (stage, TP rank)); the merged result must equal the whole state dict exactly, in model
order, whichever way it was cut and however small the output files are.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tasks.train.checkpointing.weights import (INDEX, SINGLE, load_weights, merge_shards, save_weights, shard_path, weight_files,
                                 weights_fingerprint, write_shard)


def whole_state(layers: int = 4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    state = {}
    for i in range(layers):
        state[f"layers.{i}.attn.wq.weight"] = torch.randn(8, 6, generator=g)    # column-parallel: split dim 0
        state[f"layers.{i}.attn.wo.weight"] = torch.randn(6, 8, generator=g)    # row-parallel: split dim 1
        state[f"layers.{i}.norm.weight"] = torch.randn(6, generator=g)          # replicated
    return state


SPLIT = {"wq": 0, "wo": 1}


def cut(out, state, pp: int, tp: int, record_pp: bool = True) -> None:
    """Write `state` as pp × tp ranks of dp rank 0 would: stage s holds a contiguous run of layers
    (`record_pp` False: as shards written before they carried the stage count)."""
    layers = sorted({int(k.split(".")[1]) for k in state})
    per = len(layers) // pp
    for stage in range(pp):
        mine = {k: v for k, v in state.items() if stage * per <= int(k.split(".")[1]) < (stage + 1) * per}
        for r in range(tp):
            tensors, split = {}, {}
            for k, v in mine.items():
                dim = SPLIT.get(k.split(".")[-2])
                if dim is None:
                    if r == 0:
                        tensors[k] = v
                    continue
                tensors[k] = v.chunk(tp, dim=dim)[r].clone()
                split[k] = dim
            write_shard(shard_path(out, stage, r), tensors, split, tp=tp, tp_rank=r, pp=pp if record_pp else None)


@pytest.mark.parametrize("pp,tp", [(1, 1), (1, 2), (2, 1), (2, 2), (4, 2)])
def test_merge_reassembles_the_whole_model(tmp_path, pp, tp):
    state = whole_state()
    cut(tmp_path, state, pp, tp)
    files = merge_shards(tmp_path)
    assert files == [tmp_path / SINGLE] and not (tmp_path / "shards").exists()
    merged = load_weights(tmp_path)
    assert list(merged) == sorted(state, key=lambda k: (int(k.split(".")[1]), k))
    for k, v in state.items():
        assert torch.equal(merged[k], v), k


@pytest.mark.parametrize("lost", ["pp001-tp000.safetensors", "pp001-tp001.safetensors"])
def test_a_missing_stage_shard_is_refused_not_merged_into_a_smaller_model(tmp_path, lost):
    """A pipeline stage's whole file missing (its node wrote to a disk the merging rank cannot see) leaves
    every remaining tensor complete, so only the stage count the shards carry can tell: the merge names the
    missing file instead of writing a model without those layers."""
    cut(tmp_path, whole_state(), 2, 2)
    (tmp_path / "shards" / lost).unlink()
    with pytest.raises(FileNotFoundError, match=rf"1 of 4 weight shards missing \({lost}"):
        merge_shards(tmp_path)
    assert not (tmp_path / SINGLE).exists()


def test_small_file_cap_writes_hf_sharded_layout_with_the_same_weights(tmp_path):
    state = whole_state(layers=6)
    cut(tmp_path / "a", state, 2, 2)
    cut(tmp_path / "b", state, 1, 1)
    # each layer is 8*6*4*2 + 6*4 = 408 bytes: a 1000-byte cap puts two layers in a file
    files = merge_shards(tmp_path / "a", max_file_bytes=1000)
    index = json.loads((tmp_path / "a" / INDEX).read_text())
    names = sorted(set(index["weight_map"].values()))
    assert len(names) == 3 and names[0] == "model-00001-of-00003.safetensors" and files[-1].name == INDEX
    assert index["metadata"]["total_size"] == sum(v.numel() * 4 for v in state.values())
    assert weight_files(tmp_path / "a") == [tmp_path / "a" / n for n in names]
    merge_shards(tmp_path / "b")
    a, b = load_weights(tmp_path / "a"), load_weights(tmp_path / "b")
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_merge_is_deterministic_and_fingerprinted(tmp_path):
    state = whole_state()
    for name in ("x", "y"):
        cut(tmp_path / name, state, 2, 2)
        merge_shards(tmp_path / name)
    assert (tmp_path / "x" / SINGLE).read_bytes() == (tmp_path / "y" / SINGLE).read_bytes()
    assert weights_fingerprint(tmp_path / "x") == weights_fingerprint(tmp_path / "y")
    save_weights(tmp_path / "z", {**state, "layers.0.norm.weight": state["layers.0.norm.weight"] + 1})
    assert weights_fingerprint(tmp_path / "z") != weights_fingerprint(tmp_path / "x")


def test_a_missing_tp_slice_is_refused_by_name(tmp_path):
    """Shards without the stage count (older runs): each split tensor's slices are still checked."""
    cut(tmp_path, whole_state(), 1, 2, record_pp=False)
    (shard_path(tmp_path, 0, 1)).unlink()
    with pytest.raises(ValueError, match=r"`layers.0.attn.wo.weight`: slices of TP ranks \[0\] found, expected 0..1"):
        merge_shards(tmp_path)


def test_foreign_files_and_missing_weights_are_refused(tmp_path):
    (tmp_path / "shards").mkdir()
    save_file({"x": torch.zeros(1)}, str(tmp_path / "shards" / "evil.safetensors"))
    with pytest.raises(ValueError, match="not a weight shard name"):
        merge_shards(tmp_path)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        weight_files(tmp_path / "nothing")
    (tmp_path / "p").mkdir()
    torch.save({"layers.0.w": torch.zeros(1)}, tmp_path / "p" / "model.pt")  # an old pickle is never read
    with pytest.raises(FileNotFoundError):
        load_weights(tmp_path / "p")


@pytest.mark.parametrize("tied", [False, True])
def test_model_from_state_equals_the_initialised_then_loaded_model_without_drawing(tied, monkeypatch):
    """Evaluate and SFT's comparisons build their models this way: the same logits as a randomly initialised
    model loaded with the state, every parameter real fp32 (none left on the meta device, a tied head reading the
    loaded table), and no random value drawn (a 7B model's init is minutes of CPU RNG and a second copy)."""
    from specs.architecture import ModelConfig
    from tasks.train.modeling.model import Transformer
    from tasks.train.checkpointing.weights import model_from_state

    cfg = ModelConfig.from_dict({"vocab_size": 64, "seq_len": 16, "n_layers": 2, "d_model": 32, "n_heads": 4,
                                 "n_kv_heads": 2, "ffn_hidden": 48, "tie_embeddings": tied})
    source = Transformer(cfg, seed=3)
    state = {k: v.detach().to(torch.bfloat16).float().clone() for k, v in source.state_dict().items()}
    reference = Transformer(cfg, seed=0)
    reference.load_state_dict(state, strict=True)
    drawn = []
    for name in ("normal_", "uniform_"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda t, *a, _r=real, **k: (drawn.append(t.device.type), _r(t, *a, **k))[1])
    model = model_from_state(cfg, {k: v.to(torch.bfloat16) for k, v in state.items()})
    assert "cpu" not in drawn  # nothing materialised was drawn
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())
    assert not model.training
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids), reference.eval()(ids))
