"""Under DeepSpeed's torch_autocast (the CUDA default) the module keeps fp32 weights and autocast casts each
block matrix to bf16 for its matmul: the copy is saved for backward, one per micro-batch in flight; a block
recomputed in backward saves none, but its recompute makes one block's copies again. The planner's term is
checked against those bytes, measured on the project's Block under torch.autocast("cpu", bfloat16) (a probe
measured 1×–4× for 1–4 micro-batches in flight on GPU shapes; the planner had priced none). Under ZeRO-3,
DeepSpeed's own linear (zero3_linear_wrap) runs instead and saves the fp32 parameter, no copy: measured 0, and
the planner prices none there."""

from __future__ import annotations

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specs.architecture import ModelConfig, param_counts
from specs.pretrain import ModelSpec
from tasks.train.modeling.model import Block
from tasks.train.planning import plan_memory
from tasks.train.planning.plan_memory import autocast_weight_copy_bytes, estimate_memory

D, HEADS, FFN, T, LAYERS = 128, 4, 352, 32, 3
CFG = ModelConfig(vocab_size=256, seq_len=T, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=HEADS, d_model=D,
                  ffn_hidden=FFN)
COPY = 2 * param_counts(CFG).block_matrices   # one block's matrices in bf16


@pytest.fixture(autouse=True)
def torch_linear(monkeypatch):
    # DeepSpeed's zero.Init swaps torch.nn.functional.linear for ZeRO-3's own autograd function (saving the fp32
    # weight, no cast) and an earlier test in the same process left it swapped: 0 copies measured in CI. This
    # measures torch's own linear, what the engine runs outside zero.Init.
    monkeypatch.setattr(torch.nn.functional, "linear", torch._C._nn.linear)


def stack(checkpointing: bool) -> list[Block]:
    torch.manual_seed(0)
    return [Block(CFG, i, 0, checkpointing, fused=True).train() for i in range(LAYERS)]


def bf16_copies(blocks: list[Block], tensors) -> int:
    """Bytes of the distinct bf16 tensors shaped like a block matrix (or its transpose, as a matmul may save
    it) among `tensors`."""
    shapes = {s for b in blocks for p in b.parameters() if p.dim() == 2 for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors
            if t.dtype == torch.bfloat16 and tuple(t.shape) in shapes}
    return sum(seen.values())


def forwards_in_flight(blocks: list[Block], in_flight: int, saved: list) -> list[torch.Tensor]:
    """`in_flight` forwards through `blocks` under bf16 autocast whose backward has not run yet (as 1F1B's first
    stage keeps them), every tensor saved for backward appended to `saved`; their outputs."""
    outputs = []
    for _ in range(in_flight):
        x = torch.randn(1, T, D, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16):
            y = x
            for b in blocks:
                y = b(y)
        outputs.append(y)
    return outputs


@pytest.mark.parametrize("in_flight", [1, 2, 3])
def test_without_recomputation_each_micro_batch_in_flight_saves_a_copy(in_flight):
    blocks, saved = stack(False), []
    outputs = forwards_in_flight(blocks, in_flight, saved)  # noqa: F841 — kept alive: their saved tensors count
    measured = bf16_copies(blocks, saved)
    assert measured == in_flight * LAYERS * COPY
    assert autocast_weight_copy_bytes(COPY, LAYERS, 0, in_flight) == measured


class CastsAlive(TorchDispatchMode):
    """The bf16 casts of the parameters made so far that are still alive (weak references), and the most bytes
    of them alive at once (`peak`)."""

    def __init__(self, blocks):
        super().__init__()
        self.params, self.casts = {p.data_ptr() for b in blocks for p in b.parameters()}, []
        self.blocks, self.peak = blocks, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func is torch.ops.aten._to_copy.default and out.dtype == torch.bfloat16
                and args[0].data_ptr() in self.params):
            self.casts.append(weakref.ref(out))
        self.peak = max(self.peak, bf16_copies(self.blocks, self.alive()))
        return out

    def alive(self) -> list[torch.Tensor]:
        return [t for t in (ref() for ref in self.casts) if t is not None]


def test_with_recomputation_one_block_copy_is_alive_in_backward():
    blocks = stack(True)
    x = torch.randn(1, T, D, requires_grad=True)
    with CastsAlive(blocks) as casts:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x
            for b in blocks:
                y = b(y)
            # Eager only: autocast's cast cache holds every block's copy until the forward leaves autocast.
            # The engine compiles the blocks on GPUs, whose casts are graph ops outside that cache (measured:
            # none alive), so the planner does not price this; it is asserted to show what eager costs more.
            assert bf16_copies(blocks, casts.alive()) == LAYERS * COPY
        assert bf16_copies(blocks, casts.alive()) == 0          # nothing saved: the cache is cleared on exit
        casts.peak = 0
        y.sum().backward()                                      # recomputes block by block
    assert casts.peak == COPY
    for in_flight in (1, 4):   # earlier micro-batches keep only their block inputs
        assert autocast_weight_copy_bytes(COPY, LAYERS, LAYERS, in_flight) == casts.peak


def test_estimate_memory_adds_the_copies_under_torch_autocast_only(monkeypatch):
    seven_b = ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_multiple_of=256,
                        tie_embeddings=False)
    args = dict(vocab_size=32000, seq_len=2048, micro_batch=1, precision="bf16", dp=8, zero_stage=1)
    counts = param_counts(ModelConfig.from_spec(seven_b, 32000, 2048))
    cases = [(1, 1, 1, False, 32), (2, 4, 8, False, 4 * 8), (2, 1, 1, True, 1), (1, 2, 16, True, 1)]
    for tp, pp, ga, ckpt, copies in cases:   # copies: blocks' worth held (stage layers × in flight, or 1)
        kw = dict(args, tp=tp, pp=pp, grad_accum=ga, activation_checkpointing=ckpt)
        with_copies, section = (estimate_memory(seven_b, autocast=x, **kw) for x in (True, False))
        monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", lambda *a: 0)
        without, section_without = (estimate_memory(seven_b, autocast=x, **kw) for x in (True, False))
        monkeypatch.undo()
        assert with_copies.activations - without.activations == 2 * (counts.block_matrices // tp) * copies
        assert section.activations == section_without.activations   # the bf16 section's weights are bf16


@pytest.mark.parametrize("checkpointing", [False, True])
def test_zero3_linear_saves_no_copy_and_the_planner_prices_none(monkeypatch, checkpointing):
    # ZeRO-3's zero.Init swaps torch.nn.functional.linear for this for the whole process (nn.Linear and
    # tp_model's Column/RowParallelLinear call F.linear); monkeypatch undoes it after the test.
    from deepspeed.runtime.zero.linear import zero3_linear_wrap

    monkeypatch.setattr(torch.nn.functional, "linear", zero3_linear_wrap)
    blocks, saved, in_flight = stack(checkpointing), [], 2
    with CastsAlive(blocks) as casts:
        outputs = forwards_in_flight(blocks, in_flight, saved)
        measured = bf16_copies(blocks, saved)                   # saved for backward: none, either way
        assert measured == 0
        assert bf16_copies(blocks, casts.alive()) == 0          # the casts died with their matmuls (no cache)
        casts.peak = 0
        outputs[0].sum().backward()
    # Backward (and a recompute's forward) cast one matrix at a time, freed after its matmul: the largest, w13.
    assert casts.peak == max(2 * p.numel() for b in blocks for p in b.parameters())
    mem = dict(vocab_size=256, seq_len=T, micro_batch=1, precision="bf16", dp=1, tp=1, pp=1,
               activation_checkpointing=checkpointing, autocast=True)
    # The planner's term per micro-batch in flight (pp 1: one): ZeRO-3 as measured here, ZeRO-2 as torch's
    # linear measures above (every block's copy; one block's while it is recomputed).
    for zero_stage, copies in ((3, measured // in_flight), (2, COPY if checkpointing else LAYERS * COPY)):
        priced = estimate_memory(CFG, zero_stage=zero_stage, **mem).activations
        monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", lambda *a: 0)
        assert priced - estimate_memory(CFG, zero_stage=zero_stage, **mem).activations == copies
        monkeypatch.setattr(plan_memory, "autocast_weight_copy_bytes", autocast_weight_copy_bytes)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_eager_blocks_keep_the_cast_cache_until_the_forward_ends(checkpointing):
    """speed.compile off (or auto on CPU ranks): autocast's cache holds every block weight's cast until the
    forward leaves autocast. Without recomputation those are the very tensors the matmuls saved (nothing more);
    recomputed blocks saved none, so their copies are extra, measured at the forward's end, and priced so."""
    blocks, saved = stack(checkpointing), []
    with CastsAlive(blocks) as casts:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = forwards_in_flight(blocks, 1, saved)[0]
            cached = bf16_copies(blocks, casts.alive())
        y.sum().backward()
    extra = cached - bf16_copies(blocks, saved)   # alive at the forward's end beyond what backward keeps
    assert extra == (LAYERS * COPY if checkpointing else 0)
    mem = dict(vocab_size=256, seq_len=T, micro_batch=1, precision="bf16", dp=1, tp=1, pp=1, zero_stage=1,
               activation_checkpointing=checkpointing, autocast=True)
    eager, compiled = (estimate_memory(CFG, compiled=c, **mem).activations for c in (False, True))
    assert eager - compiled == extra


def test_the_planner_reads_compile_from_the_cluster():
    from tasks.train.planning.cluster import ClusterSpec

    assert ClusterSpec(device="h100-sxm").compiled and not ClusterSpec(device="h100-sxm", compile="off").compiled
    assert not ClusterSpec(device="cpu").compiled and ClusterSpec(device="cpu", compile="on").compiled
    from tasks.train.planning.planner import search

    model = ModelSpec(flavor="1b", n_layers=8, d_model=1024, n_heads=16, n_kv_heads=16, ffn_multiple_of=256)
    fixed = {"dp": 8, "tp": 1, "pp": 1, "zero_stage": 1, "micro_batch": 1, "checkpointing": "full"}
    rows = [search(model, ClusterSpec(gpus_per_node=8, device="h100-sxm", compile=c), vocab_size=32000,
                   seq_len=2048, global_batch=8, fixed=fixed).chosen for c in ("on", "off")]
    copy = 2 * param_counts(ModelConfig.from_spec(model, 32000, 2048)).block_matrices
    assert rows[1].memory.activations - rows[0].memory.activations == 8 * copy   # every recomputed block's
