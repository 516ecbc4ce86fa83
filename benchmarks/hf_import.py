"""Importing a Hugging Face checkpoint: wall time and peak RSS per rank of forgeline's start-up from a random
Llama in bf16, 2 safetensors shards, on 1 and 2 CPU ranks, against transformers' `from_pretrained` of the same
folder in the same run (issues #12, #13).

    python benchmarks/hf_import.py                                 # ~0.5 B parameters (d 1536, 16 layers)
    python benchmarks/hf_import.py --d-model 2048 --layers 16 --ffn 8192   # ~1 B (needs ~12 GB free)

The checkpoint is written by the benchmark into a temporary folder, one shard at a time (a shard's tensors are
drawn in bf16 and saved with `safetensors.torch.save_file`, then freed), with `config.json` from transformers'
`LlamaConfig` and a `model.safetensors.index.json`. Each import runs in fresh processes: forgeline's
`build_module(init=HFSource(...))` (meta device, each rank reading its own safetensors slices) at tp = 1, tp = 2
and dp = 2 with ZeRO-3, in the training dtype fp32 (ZeRO-3: its partitions); transformers with `dtype=float32`.
Peak RSS is the growth of VmHWM (reset just before the import) over the RSS then (the libraries excluded); a rank's
share is the parameter bytes it holds afterwards. Goal (#12): peak ≤ 1.2 × share + 1 GB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GB = 1e9

REFERENCE = """
import sys, time, torch
from transformers import AutoModelForCausalLM
from tests.helpers.init_meta import peak_growth, start_peak
base, t0 = start_peak(), time.perf_counter()
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True, dtype=torch.float32)
print(peak_growth(base), time.perf_counter() - t0)
"""


def write_checkpoint(folder: Path, d: int, layers: int, ffn: int, vocab: int, kv_heads: int) -> int:
    """A random Llama (bf16, untied) in two shards split by layer; returns the weight bytes written."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    heads, hd = d // 128, 128
    LlamaConfig(hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv_heads, vocab_size=vocab, tie_word_embeddings=False,
                max_position_embeddings=4096, torch_dtype="bfloat16").save_pretrained(folder)
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * 0.02).to(torch.bfloat16)

    def block(i: int) -> dict:
        p = f"model.layers.{i}"
        return {f"{p}.self_attn.q_proj.weight": rand(heads * hd, d), f"{p}.self_attn.k_proj.weight": rand(kv_heads * hd, d),
                f"{p}.self_attn.v_proj.weight": rand(kv_heads * hd, d), f"{p}.self_attn.o_proj.weight": rand(d, heads * hd),
                f"{p}.mlp.gate_proj.weight": rand(ffn, d), f"{p}.mlp.up_proj.weight": rand(ffn, d),
                f"{p}.mlp.down_proj.weight": rand(d, ffn), f"{p}.input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
                f"{p}.post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16)}

    weight_map, total, half = {}, 0, layers // 2
    for shard, (first, last) in enumerate([(0, half), (half, layers)]):
        name = f"model-{shard + 1:05d}-of-00002.safetensors"
        tensors = {"model.embed_tokens.weight": rand(vocab, d)} if shard == 0 else {}
        for i in range(first, last):
            tensors.update(block(i))
        if shard == 1:
            tensors.update({"model.norm.weight": torch.ones(d, dtype=torch.bfloat16), "lm_head.weight": rand(vocab, d)})
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        total += sum(t.numel() * 2 for t in tensors.values())
        weight_map.update({k: name for k in tensors})
        del tensors
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    return total


def rank_main(rank: int, world: int, folder: str, parallel: dict) -> dict:
    import torch

    from specs.pretrain import ParallelSpec, PretrainSpec
    from tasks.train.parallel.dsconfig import ds_config
    from tasks.train.hf.hf_import import hf_model_config
    from tasks.train.checkpointing.init_weights import HFSource
    from tasks.train.modeling.model import Transformer
    from tasks.train.parallel.parallelize import build_layout, build_module, init_distributed
    from tests.helpers.init_meta import peak_growth, start_peak

    init_distributed()
    par = ParallelSpec(**parallel)
    cfg = hf_model_config(Path(folder), seq_len=256)
    layout = build_layout(par)
    zero3 = ds_config(PretrainSpec(micro_batch_size=1), par) if par.zero_stage == 3 else None
    with torch.device("meta"):  # torch's meta kernels import once (~80 MB): not the model's memory
        Transformer(cfg, 0)
    base, t0 = start_peak(), time.perf_counter()
    module = build_module(cfg, layout, 0, init=HFSource(Path(folder), cfg), zero3=zero3)
    seconds = time.perf_counter() - t0
    held = sum(t.numel() * t.element_size() for t in (getattr(p, "ds_tensor", p) for p in module.parameters()))
    return {"peak": peak_growth(base), "seconds": seconds,
            "share": held}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--kv-heads", type=int, default=4)
    args = ap.parse_args()

    from tests.helpers.train import spawn_gloo

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ckpt"
        folder.mkdir()
        size = write_checkpoint(folder, args.d_model, args.layers, args.ffn, args.vocab, args.kv_heads)
        print(f"checkpoint: {size / 2 / 1e9:.2f} B parameters, {size / GB:.2f} GB bf16 in 2 shards; imported in fp32")
        rows = []
        for label, world, parallel in [("forgeline tp=1", 1, {}), ("forgeline tp=2", 2, {"tp": 2}),
                                       ("forgeline dp=2 ZeRO-3", 2, {"dp": 2, "zero_stage": 3})]:
            for r, out in enumerate(spawn_gloo(rank_main, world, (str(folder), parallel), Path(tmp) / label)):
                rows.append((label, r, out["seconds"], out["peak"], out["share"]))
        proc = subprocess.run([sys.executable, "-c", REFERENCE, str(folder)], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        peak, seconds = proc.stdout.split()[-2:]
        rows.append(("transformers from_pretrained", 0, float(seconds), int(peak), 2 * size))
    print("| import | rank | wall (s) | peak RSS growth (GB) | × checkpoint | share fp32 (GB) | goal 1.2 × share + 1 GB "
          "| met |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r, seconds, peak, share in rows:
        goal = 1.2 * share + GB
        print(f"| {label} | {r} | {seconds:.1f} | {peak / GB:.2f} | {peak / size:.2f} | {share / GB:.2f} | "
              f"{goal / GB:.2f} | {'yes' if peak <= goal else 'no'} |")


if __name__ == "__main__":
    main()
