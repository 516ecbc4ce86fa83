"""Published training runs, encoded for the planner's tests and the README table
(`python benchmarks/planner_published.py` or `python -m tests.published_layouts` prints it).

The planner gets only what a published run fixed: the model's shape, the cluster (nodes, devices, memory, links)
and the global batch in sequences; it searches the whole recipe (layout, ZeRO, micro-batch, accumulation,
checkpointing, sequence parallelism). The published recipe is priced by the same model with the keys the source
states kept (`published`, in planner.RECIPE_KEYS' field names) and the rest searched. bf16 is priced as our
engine trains it on GPUs by default (DeepSpeed's torch_autocast: fp32 weights and gradients;
`ClusterSpec.mixed_precision` auto), not as the source's framework held it; `in_mode("sections")` prices
DeepSpeed's bf16 section. Each run names its source and says how far its figures were checked. Features of the
published runs the planner does not model: the interleaved pipeline schedule (virtual stages shrink the bubble,
Narayanan et al. 2021 §2.2.2), fp16 vs bf16, GEMM efficiency by micro-batch size. Our block is SwiGLU: a GELU 4h MLP is given the SwiGLU width 8h/3 with the
same parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from specs.pretrain import ModelSpec
from tasks.train.planning.planner import ClusterSpec, Plan, PlanRow, search


@dataclass(frozen=True)
class PublishedRun:
    """A run as its source describes it; `published` holds the recipe fields the source states."""

    name: str
    source: str
    model: ModelSpec
    vocab_size: int
    seq_len: int
    global_batch: int               # sequences per optimizer step
    cluster: ClusterSpec
    published: dict[str, Any] | None = field(default=None)  # None: a constructed case, nothing published
    published_text: str = "-"
    # A source recipe using a feature we lack: the params keys a user would write for it, and words the spec's
    # refusal must contain; `published` is then the nearest recipe that runs (tests/published_configs.py).
    refused: dict[str, Any] | None = field(default=None)
    refusal: str = ""

    def plan(self) -> Plan:
        """The planner's answer from the shape, the cluster and the global batch alone."""
        return search(self.model, self.cluster, vocab_size=self.vocab_size, seq_len=self.seq_len,
                      global_batch=self.global_batch)

    def published_row(self) -> PlanRow | None:
        """The published recipe priced (unstated keys: the planner's best for them; where none fits, its
        least-memory variant, with `fits` false), or None."""
        if self.published is None:
            return None
        p = search(self.model, self.cluster, vocab_size=self.vocab_size, seq_len=self.seq_len,
                   global_batch=self.global_batch, fixed=self.published)
        priced = [r for r in p.rows if r.memory is not None]
        return p.chosen or (min(priced, key=lambda r: r.memory.total) if priced else None)

    def in_mode(self, mixed_precision: str) -> "PublishedRun":
        """This run with bf16 priced as `mixed_precision` (the cluster's default `auto`: torch_autocast on GPUs,
        what the engine runs there)."""
        return replace(self, cluster=self.cluster.model_copy(update={"mixed_precision": mixed_precision}))


A100_IB = dict(gpus_per_node=8, memory_gb=80, device="a100", intra_node="nvlink", inter_node="infiniband")
H100_IB = dict(gpus_per_node=8, memory_gb=80, device="h100-sxm", intra_node="nvlink", inter_node="infiniband")
GPT3_175B = ModelSpec(flavor="1b", n_layers=96, d_model=12288, n_heads=96, n_kv_heads=96)  # SwiGLU 32768 wide
LLAMA_7B = ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_multiple_of=256,
                     tie_embeddings=False)                                                 # SwiGLU 11008 wide
LLAMA2_70B = ModelSpec(flavor="1b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                       tie_embeddings=False)
LLAMA3_405B = ModelSpec(flavor="1b", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, ffn_hidden=53248,
                        tie_embeddings=False)


def layout(dp: int, tp: int, pp: int, zero: int, **recipe: Any) -> dict[str, Any]:
    return {"dp": dp, "tp": tp, "pp": pp, "zero_stage": zero, **recipe}


RUNS = [
    # EleutherAI/gpt-neox configs/20B.yml (read; "the configuration file for the GPT-NeoX-20B model as it was
    # trained on 96x 40GB A100"): pipe-parallel-size 4, model-parallel-size 2, 44 layers, hidden 6144, 64 heads,
    # seq 2048, untied, ZeRO stage 1, train_micro_batch_size_per_gpu 4, gradient_accumulation_steps 32 (→ dp 12,
    # 1536 sequences), checkpoint-activations true, fp16. Vocabulary 50432 (the 50277-token tokenizer padded;
    # Black et al. 2022, not re-read here). 12 nodes of 8 A100 40 GB with HDR InfiniBand (the paper's §3; not
    # re-read). GELU 4h MLP: SwiGLU 16384 wide.
    PublishedRun("GPT-NeoX-20B (EleutherAI)", "gpt-neox configs/20B.yml",
                 ModelSpec(flavor="1b", n_layers=44, d_model=6144, n_heads=64, n_kv_heads=64, tie_embeddings=False),
                 50432, 2048, 1536, ClusterSpec(nodes=12, **{**A100_IB, "memory_gb": 40}),
                 layout(12, 2, 4, 1, micro_batch=4, checkpointing="full"), "tp 2, pp 4, dp 12, ZeRO-1, mb 4, ckpt"),
    # Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
    # Table 1: GPT-3 175B (96 layers, hidden 12288, 96 heads, seq 2048, vocab 51200), tensor 8 × pipeline 16 on
    # 1024 A100 80 GB (Selene: DGX A100, HDR InfiniBand), batch 1536 → dp 8, 192 micro-batches of 1, with
    # activation recomputation. Checked here: Megatron-LM's README (all its GPT scaling models use vocab 51200,
    # seq 2048) and its GPT-3 175B example script (96 × 12288 × 96, tp 8, pp 16, global batch 1536, micro
    # batch 1). The 1024 GPUs are Table 1's, not re-read here (the README shows that table as an image).
    PublishedRun("GPT-3 175B (Megatron-LM)", "Narayanan et al. 2021, Table 1", GPT3_175B, 51200, 2048, 1536,
                 ClusterSpec(nodes=128, **A100_IB), layout(8, 8, 16, 0, micro_batch=1, checkpointing="full"),
                 "tp 8, pp 16 (interleaved), dp 8, mb 1, ckpt"),
    # NVIDIA NeMo-Framework-Launcher, launcher_scripts/conf/training/llama/llama2_70b.yaml (read): Llama 2 70B (80
    # layers, hidden 8192, 64 heads, 8 query groups, ffn 28672, seq 4096, untied), 128 nodes × 8 H100, tp 4,
    # pp 4 (virtual 20), sequence parallel, distributed_fused_adam (ZeRO-1), micro batch 1, global 2048 →
    # dp 64, 32 micro-batches; no activation checkpointing.
    PublishedRun("Llama 2 70B (NeMo)", "NeMo-Framework-Launcher llama2_70b.yaml", LLAMA2_70B, 32000, 4096, 2048,
                 ClusterSpec(nodes=128, **H100_IB),
                 layout(64, 4, 4, 1, micro_batch=1, checkpointing="off", sequence_parallel=True),
                 "tp 4, pp 4 (virtual 20), dp 64, SP, distributed optimizer, mb 1"),
    # Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models", §2.4 (text checked): "We trained
    # OPT-175B on 992 80GB A100 GPUs, by utilizing Fully Sharded Data Parallel ... with Megatron-LM Tensor
    # Parallelism". The tensor degree 8 is from liguodongiot/llm-action's layout summary (the paper's §2.4 does
    # not state it). Table 1: 96 layers, hidden 12288, 96 heads, seq 2048, 2M-token batches: 992 sequences
    # (124 replicas × 8). Micro-batch and recomputation are not stated: searched.
    PublishedRun("OPT-175B (metaseq)", "Zhang et al. 2022, §2.4", GPT3_175B, 50272, 2048, 992,
                 ClusterSpec(nodes=124, **A100_IB), layout(124, 8, 1, 3), "tp 8, FSDP (ZeRO-3) over 124"),
    # bigscience-workshop/bigscience, train/tr11-176B-ml/tr11-176B-ml.slurm (read): BLOOM 176B (70 layers, hidden
    # 14336, 112 heads, seq 2048, vocab padded to 250880), 48 nodes × 8 A100 80 GB, TP_SIZE 4, PP_SIZE 12
    # (uneven: DeepSpeed balances 70 blocks as 6 × 10 + 5 × 2), micro batch 2, global 2048 → dp 8, 128
    # micro-batches, checkpoint-activations, bf16 with its own ZeRO-1. Jean Zay links nodes with 4 × 100 Gb/s
    # Omni-Path (an RDMA fabric, modelled as HDR InfiniBand).
    PublishedRun("BLOOM 176B (Megatron-DeepSpeed)", "bigscience tr11-176B-ml.slurm",
                 ModelSpec(flavor="1b", n_layers=70, d_model=14336, n_heads=112, n_kv_heads=112),
                 250880, 2048, 2048, ClusterSpec(nodes=48, **A100_IB),
                 layout(8, 4, 12, 1, micro_batch=2, checkpointing="full"), "tp 4, pp 12, dp 8, ZeRO-1, mb 2, ckpt"),
    # Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.2 and Table 4; the same table as presented at SC'24
    # (glennklockwood.com/garden/llama-3.1, read: 16,384 GPUs, TP 8, CP 1, PP 16, 16M tokens per batch, 400
    # TFLOP/s per GPU): Llama 3 405B (126 layers, d 16384, 128 heads, 8 kv heads, SwiGLU 53248, vocab 128256,
    # untied) at seq 8192 → 2048 sequences, DP 128 (FSDP, modelled as ZeRO-1: DeepSpeed allows no more with a
    # pipeline). 400 Gb/s RoCE per GPU, modelled as NDR InfiniBand (the same 50 GB/s). Micro-batch and
    # recomputation are not stated: searched.
    PublishedRun("Llama 3 405B (Meta)", "Dubey et al. 2024, Table 4", LLAMA3_405B, 128256, 8192, 2048,
                 ClusterSpec(nodes=2048, **H100_IB), layout(128, 8, 16, 1), "tp 8, pp 16, dp 128 (FSDP)"),
    # tatsu-lab/stanford_alpaca README, "Fine-tuning" (checked): "fine-tunes LLaMA-7B ... on a machine with 4 A100
    # 80G GPUs in FSDP `full_shard` mode", batch size 128, max length 512 → 4 ranks × micro-batch 4 × 8 steps.
    PublishedRun("LLaMA 7B, one node (Alpaca)", "stanford_alpaca README", LLAMA_7B, 32000, 512, 128,
                 ClusterSpec(nodes=1, gpus_per_node=4, memory_gb=80, device="a100"),
                 layout(4, 1, 1, 3, micro_batch=4), "FSDP full_shard (ZeRO-3) dp 4, mb 4"),
    # Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B": §3 as quoted in a
    # reading note (the paper itself not re-read): "The number of layers, hidden dimensions, attention heads are
    # 105, 20480, and 128, respectively. The sequence length is 2048 and global batch size is 1920. We used 8-way
    # tensor and 35-way pipeline parallelism"; §2.2 as quoted: "Each 530 billion parameter model replica spans
    # 280 NVIDIA A100 GPUs, with 8-way tensor-slicing within a node and 35-way pipeline parallelism across
    # nodes". Selene: 560 DGX A100 (8 × A100 80 GB, NVLink/NVSwitch) on HDR InfiniBand (Microsoft's blog as
    # quoted by two pages) → 4480 GPUs, dp 16. Vocabulary: GPT-2's BPE padded by Megatron to 51200 (not stated
    # in the quotes). Micro-batch, recomputation and the ZeRO stage are not stated there: searched (a Megatron-LM
    # gpt3-530b benchmark script, repository not identified, runs the same shape at micro-batch 1 with
    # --checkpoint-activations). The batch ramp (32 → 1920) is not modelled: the full batch is priced. GELU 4h
    # MLP: SwiGLU 54608 wide (8h/3 = 54613⅓ has no integer width; 54608 divides by 8).
    PublishedRun("MT-NLG 530B (DeepSpeed + Megatron)", "Smith et al. 2022, §2.2, §3",
                 ModelSpec(flavor="1b", n_layers=105, d_model=20480, n_heads=128, n_kv_heads=128,
                           ffn_hidden=54608),
                 51200, 2048, 1920, ClusterSpec(nodes=560, **A100_IB), {"dp": 16, "tp": 8, "pp": 35},
                 "tp 8, pp 35, dp 16"),
    # NVIDIA NeMo-Framework-Launcher, launcher_scripts/conf/training/nemotron/nemotron_340b.yaml (read):
    # Nemotron-4 340B (96 layers, hidden 18432, 96 heads, 8 query groups, ffn 4h squared-ReLU, seq 4096, untied,
    # 256k SentencePiece vocabulary: 256000, a multiple of make_vocab_size_divisible_by 128), 768 nodes × 8,
    # tp 8, pp 8 (virtual 12), sequence parallel, micro batch 1, global 2304 → dp 96, 24 micro-batches,
    # mcore_distributed_optim (ZeRO-1), no activation checkpointing, bf16. The technical report (Nemotron-4 340B,
    # 2024; not re-read) trains on 768 DGX H100 with a batch ramp to 2304; its table's pp is not checked here.
    # Squared-ReLU 4h MLP (two matrices, 73728 wide): SwiGLU 49152 wide, the same parameters.
    PublishedRun("Nemotron-4 340B (NeMo)", "NeMo-Framework-Launcher nemotron_340b.yaml",
                 ModelSpec(flavor="1b", n_layers=96, d_model=18432, n_heads=96, n_kv_heads=8, ffn_hidden=49152,
                           tie_embeddings=False),
                 256000, 4096, 2304, ClusterSpec(nodes=768, **H100_IB),
                 layout(96, 8, 8, 1, micro_batch=1, checkpointing="off", sequence_parallel=True),
                 "tp 8, pp 8 (virtual 12), dp 96, SP, distributed optimizer, mb 1"),
    # tiiuae/falcon-180B model card (read): 80 layers, d_model 14848, head_dim 64 (→ 232 heads), "multigroup"
    # attention with "independent key and values per tensor parallel degree" (→ 8 kv heads at tp 8), vocabulary
    # 65024, seq 2048, batch 2048 (after a 100B-token ramp, not modelled), bf16, "up to 4,096 A100 40GB GPUs,
    # using a 3D parallelism strategy (TP=8, PP=8, DP=64) combined with ZeRO" on AWS P4d. Not stated in the card:
    # the ZeRO stage, micro-batch and recomputation (searched; the Falcon paper, Almazrouei et al. 2023, not
    # re-read), embedding tying (ModelSpec's default, tied), the interconnect (P4d's EFA, 400 Gb/s per node,
    # modelled as InfiniBand: the model is optimistic about cross-node traffic). GELU 4h MLP with a parallel
    # block: SwiGLU 39592 wide (8h/3 = 39594⅔; 39592 divides by 8).
    PublishedRun("Falcon-180B (TII)", "tiiuae/falcon-180B model card",
                 ModelSpec(flavor="1b", n_layers=80, d_model=14848, n_heads=232, n_kv_heads=8, ffn_hidden=39592),
                 65024, 2048, 2048, ClusterSpec(nodes=512, **{**A100_IB, "memory_gb": 40}),
                 {"dp": 64, "tp": 8, "pp": 8}, "tp 8, pp 8, dp 64, ZeRO"),
    # jzhang38/TinyLlama README "Training Details" (read via its Hugging Face copy): 22 layers, 32 heads, 4 query
    # groups, embedding 2048, SwiGLU 5632, seq 2048, batch 2M tokens (2048 × 1024), Llama 2's tokenizer (32000),
    # "16 A100-40G GPUs". pretrain/tinyllama.py (read): num_of_devices 8 per node (2 nodes), global_batch_size
    # 512 per node, micro_batch_size 8 → 8 accumulation steps; Lightning's FSDPStrategy with its default
    # sharding (FULL_SHARD: ZeRO-3), activation_checkpointing_policy None. The node interconnect is not stated:
    # modelled as InfiniBand. Untied head (lit-gpt's Llama).
    PublishedRun("TinyLlama 1.1B (lit-gpt FSDP)", "TinyLlama README, pretrain/tinyllama.py",
                 ModelSpec(flavor="1b", n_layers=22, d_model=2048, n_heads=32, n_kv_heads=4, ffn_hidden=5632,
                           tie_embeddings=False),
                 32000, 2048, 1024, ClusterSpec(nodes=2, **{**A100_IB, "memory_gb": 40}),
                 layout(16, 1, 1, 3, micro_batch=8, checkpointing="off"), "FSDP full_shard dp 16, mb 8"),
    # EleutherAI/pythia models/12B/pythia-12b.yml (read; "batch size (trained on 256 gpus)"): 36 layers, hidden
    # 5120, 40 heads, seq 2048, untied, model-parallel-size 4, pipe-parallel-size 1, ZeRO stage 1,
    # train_micro_batch_size_per_gpu 8, gradient_accumulation_steps 2 (→ dp 64, 1024 sequences),
    # checkpoint-activations, fp16, flash attention. The A100 SXM4 40 GB is Epoch AI's record of the Pythia paper
    # (aiportalx.com, read; the paper not re-read); the interconnect is not stated: modelled as InfiniBand.
    # Vocabulary: the 50277-token 20B tokenizer padded by GPT-NeoX to a multiple of 128 × tp 4 = 50688 (the
    # rule, not a number read). GELU 4h MLP with a parallel (GPT-J) residual: SwiGLU 13652 wide (8h/3 =
    # 13653⅓; 13652 divides by 4).
    PublishedRun("Pythia 12B (GPT-NeoX)", "EleutherAI/pythia models/12B/pythia-12b.yml",
                 ModelSpec(flavor="1b", n_layers=36, d_model=5120, n_heads=40, n_kv_heads=40, ffn_hidden=13652,
                           tie_embeddings=False),
                 50688, 2048, 1024, ClusterSpec(nodes=32, **{**A100_IB, "memory_gb": 40}),
                 layout(64, 4, 1, 1, micro_batch=8, checkpointing="full"), "tp 4, dp 64, ZeRO-1, mb 8, ckpt"),
    # Constructed, not published (issues #13, #32): a Llama-2-70B shape on 8 nodes × 8 H100 at Llama 2's 4M-token
    # batch (1024 × 4096), once on InfiniBand NDR and once on one 100 GbE NIC per node; a 1B model on 8 single-L4
    # cloud nodes over 100 GbE.
    PublishedRun("70B, 8 × 8 H100, InfiniBand (constructed)", "-", LLAMA2_70B, 32000, 4096, 1024,
                 ClusterSpec(nodes=8, **H100_IB)),
    PublishedRun("70B, 8 × 8 H100, 100 GbE (constructed)", "-", LLAMA2_70B, 32000, 4096, 1024,
                 ClusterSpec(nodes=8, **{**H100_IB, "inter_node": "ethernet"})),
    PublishedRun("1B, 8 × 1 L4, 100 GbE (constructed)", "-", ModelSpec(flavor="1b"), 32000, 2048, 256,
                 ClusterSpec(nodes=8, gpus_per_node=1, memory_gb=24, device="l4", inter_node="ethernet")),
]


def recipe_text(r: PlanRow | None) -> str:
    if r is None:
        return "-"
    sp = ", SP" if r.sequence_parallel else ""
    return (f"dp {r.dp}, tp {r.tp}, pp {r.pp}, ZeRO-{r.zero_stage}, mb {r.micro_batch} × {r.grad_accum}, "
            f"ckpt {r.checkpointing}{sp}")


def section_reason(run: PublishedRun) -> str:
    """Why the published recipe is priced in the bf16 section (the planner's fallback, planner.search)."""
    auto = run.in_mode("torch_autocast").published_row()
    if auto is not None and auto.within_margin:
        return "faster than torch_autocast, which fits only by recomputing"
    return "torch_autocast is over the margin"


def table(runs: list[PublishedRun] | None = None) -> str:
    """The README's planner-vs-published table (default: these runs and tests/published_configs.py's)."""
    if runs is None:
        from tests.published_configs import ALL_RUNS
        runs = ALL_RUNS
    lines = ["| run | cluster | global batch | published | planner's recipe | est. s/step | bubble | "
             "memory | published recipe, est. |",
             "|---|---|---:|---|---|---:|---:|---:|---|"]
    for run in runs:
        p, c = run.plan(), run.cluster
        ch, pub = p.chosen, run.published_row()
        if run.published is None:
            pub_est = "-"
        elif pub is None or pub.cost is None:
            pub_est = "not priced"
        else:
            fit = "" if pub.within_margin else " — over the margin" if pub.fits else " — does not fit"
            fit += f" (bf16 section: {section_reason(run)})" if pub.mixed_precision else ""
            pub_est = (f"{recipe_text(pub)}: {pub.cost.step_s:,.2f} s/step "
                       f"({pub.cost.s_per_token / ch.cost.s_per_token - 1:+.0%} per token), "
                       f"{pub.memory.total / (c.memory_gb * 2**30):.0%} memory{fit}")
        mem = f"{ch.memory.total / (c.memory_gb * 2**30):.0%}" if ch else "-"
        est = f"{ch.cost.step_s:,.2f} | {ch.bubble_share:.0%}" if ch and ch.cost else "- | -"
        shown = run.published_text + (" — refused, runs as:" if run.refused else "")
        mode = " (bf16 section)" if ch and ch.mixed_precision else ""
        lines.append(f"| {run.name} | {c.nodes} × {c.gpus_per_node} {c.device} {c.memory_gb:g} GiB, "
                     f"{c.inter_node} | {run.global_batch} | {shown} | {recipe_text(ch)}{mode} | {est} | "
                     f"{mem} | {pub_est} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
