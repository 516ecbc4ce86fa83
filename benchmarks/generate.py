"""Generation speed: evaluate's KV-cached batched decoding vs `transformers.generate` on the same exported model.

    python benchmarks/generate.py                   # the default run's shape (4 layers, d 128, vocab 8192), CPU
    python benchmarks/generate.py --prompts 16 --new 128 --layers 8 --d-model 256 --threads 2

One random model (O(1) weights, so greedy continuations are not degenerate) is exported with
tasks/train/hf/hf_export.py and loaded back by transformers; every method continues the same seeded prompts
(lengths 8..40 tokens) greedily by exactly `--new` tokens (no stop token, so all do the same work), in this one
process with a fixed thread count, best of `--repeats` (taken round-robin over the methods). Methods:

    forgeline batched     tasks/eval/generate.generate_batch over all prompts (what evaluate and SFT run)
    forgeline 1-by-1      the same, one prompt at a time
    forgeline no cache    the loop before the cache: the whole context through the model for every token
    hf batched            transformers.generate over all prompts, left-padded with an attention mask
    hf 1-by-1             transformers.generate per prompt (its default DynamicCache)

tokens/s = new tokens / wall seconds; "same tokens" = continuations equal to forgeline 1-by-1's. The ratio
rows compare like with like (batched with batched, 1-by-1 with 1-by-1).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specs.evaluate import SamplingSpec  # noqa: E402  (after the sys.path insert above)
from tasks.data.mixing.tokenizer import save_tokenizer, train_tokenizer  # noqa: E402
from tasks.eval.generate import generate_batch, torch_threads  # noqa: E402
from specs.architecture import ModelConfig, ffn_hidden_size  # noqa: E402
from tasks.train.hf.hf_export import export_hf  # noqa: E402
from tasks.train.modeling.model import Transformer  # noqa: E402


def build(args: argparse.Namespace, folder: Path) -> tuple[Transformer, torch.nn.Module]:
    """Our model with random O(1) weights, and transformers' model loaded from its export."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the export's max_length beside max_new_tokens warns on every call
    hf_logging.disable_progress_bar()

    cfg = ModelConfig(vocab_size=args.vocab, seq_len=args.seq_len, n_layers=args.layers, n_heads=args.heads,
                      n_kv_heads=args.kv_heads, d_model=args.d_model, ffn_hidden=ffn_hidden_size(args.d_model, 64))
    gen = torch.Generator().manual_seed(0)
    model = Transformer(cfg, seed=0).eval()
    with torch.no_grad():  # std 0.02 init gives near-uniform logits: scale to O(1) so argmax is decisive
        for name, p in model.named_parameters():
            p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen) if p.ndim == 1 else
                    torch.randn(p.shape, generator=gen) / (1.0 if name == "layers.0.weight" else p.shape[1] ** 0.5))
    texts = ["The mill by the river grinds grain.", "def add(a, b):\n    return a + b\n"] * 20
    save_tokenizer(train_tokenizer(texts, vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"]),
                   folder / "tokenizer.json")
    export_hf(model.state_dict(), cfg, folder / "tokenizer.json", folder / "hf",
              card={"name": "bench", "description": "generation benchmark"})
    hf = AutoModelForCausalLM.from_pretrained(folder / "hf", local_files_only=True, dtype=torch.float32).eval()
    return model, hf


def hf_generate(hf: torch.nn.Module, prompts: list[list[int]], new: int) -> list[list[int]]:
    """transformers.generate over `prompts` in one left-padded batch (pad id 0, masked)."""
    L = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    mask = torch.zeros(len(prompts), L, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):], mask[b, L - len(p):] = torch.tensor(p), 1
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new, min_new_tokens=new,
                          pad_token_id=0, eos_token_id=None)
    return out[:, L:].tolist()


def no_cache(model: Transformer, prompts: list[list[int]], new: int) -> list[list[int]]:
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = list(p)
            for _ in range(new):
                ids.append(int(model(torch.tensor([ids[-model.cfg.seq_len:]]))[0, -1].argmax()))
            outs.append(ids[len(p):])
    return outs


def timed(methods: dict, repeats: int) -> dict[str, tuple[float, list[list[int]]]]:
    """Best wall time and output of each method; the repeats go round-robin over the methods, so a load spike
    on a shared machine hits all of them alike instead of one method's whole series."""
    best = {name: (float("inf"), []) for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            t = time.perf_counter()
            out = fn()
            best[name] = (min(best[name][0], time.perf_counter() - t), out)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=8, help="prompts (evaluate's default run has 8)")
    ap.add_argument("--new", type=int, default=64, help="new tokens per prompt (evaluate's max_new_tokens)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (evaluate's default is 1)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-no-cache", action="store_true", help="leave out the slow uncached loop")
    args = ap.parse_args()

    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, args.vocab, (int(torch.randint(8, 41, (1,), generator=gen)),),
                             generator=gen).tolist() for _ in range(args.prompts)]
    greedy = SamplingSpec(temperature=0.0, top_k=None, top_p=1.0, max_new_tokens=args.new)
    with tempfile.TemporaryDirectory() as tmp, torch_threads(args.threads):
        model, hf = build(args, Path(tmp))
        gens = lambda n: [torch.Generator() for _ in range(n)]  # noqa: E731  (greedy: never drawn from)
        methods = {
            "forgeline batched": lambda: [n for n, _ in generate_batch(model, prompts, greedy, gens(len(prompts)))],
            "forgeline 1-by-1": lambda: [generate_batch(model, [p], greedy, gens(1))[0][0] for p in prompts],
            "hf batched": lambda: hf_generate(hf, prompts, args.new),
            "hf 1-by-1": lambda: [hf_generate(hf, [p], args.new)[0] for p in prompts],
        }
        if not args.skip_no_cache:
            methods["forgeline no cache"] = lambda: no_cache(model, prompts, args.new)
        results = timed(methods, args.repeats)
    reference = results["forgeline 1-by-1"][1]
    total = args.prompts * args.new
    print(f"{args.prompts} prompts × {args.new} new tokens, {args.layers} layers d {args.d_model} "
          f"vocab {args.vocab}, {args.threads} thread(s), torch {torch.__version__}, best of {args.repeats}\n")
    print("| method | seconds | tokens/s | same tokens |")
    print("|---|---:|---:|---:|")
    for name, (sec, out) in results.items():
        same = sum(a == b for a, b in zip(out, reference))
        print(f"| {name} | {sec:.3f} | {total / sec:,.0f} | {same}/{len(reference)} |")
    rate = {name: total / sec for name, (sec, _) in results.items()}
    print(f"\nforgeline batched / hf batched: {rate['forgeline batched'] / rate['hf batched']:.2f}×")
    print(f"forgeline 1-by-1 / hf 1-by-1: {rate['forgeline 1-by-1'] / rate['hf 1-by-1']:.2f}×")
    if "forgeline no cache" in rate:
        print(f"forgeline batched / no cache: {rate['forgeline batched'] / rate['forgeline no cache']:.2f}×")


if __name__ == "__main__":
    main()
