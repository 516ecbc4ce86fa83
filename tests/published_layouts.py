"""Published training layouts, encoded for the planner's tests and the README table
(`python -m tests.published_layouts` prints the table).

Each run names its source and says how far its figures were checked. Two features of the published runs have no
counterpart in the planner and make their layouts look worse to it than they were: sequence parallelism (splits
the 10·sbh replicated activations over tp, Korthikanti et al. 2022) and the interleaved pipeline schedule
(virtual stages shrink the bubble, Narayanan et al. 2021 §2.2.2). Pipeline stages need not divide the layers
(BLOOM's 12 stages over 70): DeepSpeed balances the blocks and the fullest stage paces the pipe.
"""

from __future__ import annotations

from dataclasses import dataclass

from specs.pretrain import ModelSpec
from tasks.train.planner import ClusterSpec, Plan, PlanRow, plan


@dataclass(frozen=True)
class PublishedRun:
    name: str
    source: str
    model: ModelSpec
    vocab_size: int
    seq_len: int
    micro_batch: int
    global_batch: int | None        # sequences per optimizer step, fixed across layouts as in the run
    activation_checkpointing: bool
    cluster: ClusterSpec
    published: tuple[int, int, int, int] | None  # (dp, tp, pp, ZeRO stage); None: not expressible here
    published_text: str
    grad_accum: int = 1             # used only without a global batch: every layout keeps it

    def plan(self) -> Plan:
        return plan(self.model, self.cluster, vocab_size=self.vocab_size, seq_len=self.seq_len,
                    micro_batch=self.micro_batch, global_batch=self.global_batch, grad_accum=self.grad_accum,
                    activation_checkpointing=self.activation_checkpointing)


def row_of(p: Plan, layout: tuple[int, int, int, int]) -> PlanRow | None:
    return next((r for r in p.rows if (r.dp, r.tp, r.pp, r.zero_stage) == layout), None)


A100_IB = dict(gpus_per_node=8, memory_gb=80, device="a100", intra_node="nvlink", inter_node="infiniband")
GPT3_175B_SHAPE = dict(flavor="1b", n_layers=96, d_model=12288, n_heads=96, n_kv_heads=96)  # SwiGLU 32768 wide
LLAMA_7B_SHAPE = dict(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_multiple_of=256,
                      tie_embeddings=False)                                                 # SwiGLU 11008 wide
LLAMA2_70B = ModelSpec(flavor="1b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, ffn_hidden=28672,
                       tie_embeddings=False)
LLAMA3_405B = ModelSpec(flavor="1b", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8, ffn_hidden=53248,
                        tie_embeddings=False)

RUNS = [
    # Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
    # Table 1: GPT-3 175B (96 layers, hidden 12288, 96 heads, seq 2048, vocab 51200), tensor 8 × pipeline 16 on
    # 1024 A100 80 GB (Selene: DGX A100, HDR InfiniBand), batch 1536 → dp 8, 192 micro-batches of 1, with
    # activation recomputation. Checked here: Megatron-LM's README (all its GPT scaling models use vocab 51200,
    # seq 2048) and its GPT-3 175B example script (96 × 12288 × 96, tp 8, pp 16, global batch 1536, micro
    # batch 1). The 1024 GPUs are Table 1's, not re-read here (the README shows that table as an image).
    PublishedRun("GPT-3 175B (Megatron-LM)", "Narayanan et al. 2021, Table 1", ModelSpec(**GPT3_175B_SHAPE),
                 51200, 2048, 1, 1536, True, ClusterSpec(nodes=128, **A100_IB), (8, 8, 16, 0), "tp 8, pp 16, dp 8"),
    # NVIDIA NeMo-Framework-Launcher, launcher_scripts/conf/training/llama/llama2_70b.yaml (read): Llama 2 70B (80
    # layers, hidden 8192, 64 heads, 8 query groups, ffn 28672, seq 4096, untied), 128 nodes × 8 H100, tp 4,
    # pp 4 (virtual 20), sequence parallel, distributed_fused_adam (ZeRO-1), micro batch 1, global 2048 →
    # dp 64, 32 micro-batches; no activation checkpointing.
    PublishedRun("Llama 2 70B (NeMo)", "NeMo-Framework-Launcher llama2_70b.yaml",
                 LLAMA2_70B,
                 32000, 4096, 1, 2048, False,
                 ClusterSpec(nodes=128, gpus_per_node=8, memory_gb=80, device="h100-sxm"), (64, 4, 4, 1),
                 "tp 4, pp 4 (virtual 20), dp 64, distributed optimizer"),
    # Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models", §2.4 (text checked): "We trained
    # OPT-175B on 992 80GB A100 GPUs, by utilizing Fully Sharded Data Parallel ... with Megatron-LM Tensor
    # Parallelism", up to 147 TFLOP/s per GPU. The tensor degree 8 is from liguodongiot/llm-action's layout
    # summary (the paper's §2.4 does not state it). Table 1: 96 layers, hidden 12288, 96 heads, seq 2048,
    # 2M-token batches: 124 replicas × 8 sequences × 2048 = 2.03M tokens. The micro-batch
    # is not stated; FSDP without accumulation is modelled (one micro-batch of 8 per replica), with activation
    # checkpointing (metaseq's 175B runs checkpoint activations; an assumption here, not a checked figure).
    PublishedRun("OPT-175B (metaseq)", "Zhang et al. 2022, §2.4", ModelSpec(**GPT3_175B_SHAPE),
                 50272, 2048, 8, 992, True, ClusterSpec(nodes=124, **A100_IB), (124, 8, 1, 3),
                 "tp 8, FSDP (ZeRO-3) over 124"),
    # bigscience-workshop/bigscience, train/tr11-176B-ml/tr11-176B-ml.slurm (read): BLOOM 176B (70 layers, hidden
    # 14336, 112 heads, seq 2048, vocab padded to 250880), 48 nodes × 8 A100 80 GB, TP_SIZE 4, PP_SIZE 12
    # (partitioned by 'type:transformer|embedding': 72 units, 6 per stage, the embedding one of the first and the
    # last stage's; ours cuts blocks only, 6 × 10 then 5 × 2, the embedding on top), micro batch 2, global 2048
    # → dp 8, 128 micro-batches, checkpoint-activations, bf16 with its own ZeRO-1 equivalent. Jean Zay links
    # nodes with 4 × 100 Gb/s Omni-Path (an RDMA fabric, modelled as infiniband: ~4× faster per GPU than real).
    PublishedRun("BLOOM 176B (Megatron-DeepSpeed)", "bigscience tr11-176B-ml.slurm",
                 ModelSpec(flavor="1b", n_layers=70, d_model=14336, n_heads=112, n_kv_heads=112),
                 250880, 2048, 2, 2048, True, ClusterSpec(nodes=48, **A100_IB), (8, 4, 12, 1),
                 "tp 4, pp 12 (uneven: 70 layers), dp 8, ZeRO-1"),
    # Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.2 and Table 4 (from the paper, not re-read here):
    # Llama 3 405B (126 layers, d 16384, 128 heads, 8 kv heads, SwiGLU 53248, vocab 128256, untied) at seq 8192
    # on 16,384 H100 80 GB: TP 8, CP 1, PP 16, DP 128 (FSDP), 16 sequences per DP rank = 2048 per batch (16M
    # tokens); 126 layers over 16 stages is uneven (the paper takes one block off the first and last stages,
    # for the embedding and the head). 400 Gb/s RoCE per GPU, modelled as NDR InfiniBand (the same 50 GB/s).
    # The paper's micro-batch and recomputation are not taken from it: micro-batch 1 and full activation
    # checkpointing here (without sequence parallelism, which our memory model lacks, nothing else fits).
    PublishedRun("Llama 3 405B (Meta)", "Dubey et al. 2024, Table 4", LLAMA3_405B, 128256, 8192, 1, 2048, True,
                 ClusterSpec(nodes=2048, gpus_per_node=8, memory_gb=80, device="h100-sxm"), (128, 8, 16, 1),
                 "tp 8, pp 16 (uneven: 126 layers), dp 128 (FSDP)"),
    # tatsu-lab/stanford_alpaca README, "Fine-tuning" (checked): "fine-tunes LLaMA-7B ... on a machine with 4 A100
    # 80G GPUs in FSDP `full_shard` mode", batch size 128, max length 512 → 4 ranks × micro-batch 4 × 8 steps.
    PublishedRun("LLaMA 7B, one node (Alpaca)", "stanford_alpaca README", ModelSpec(**LLAMA_7B_SHAPE),
                 32000, 512, 4, 128, False, ClusterSpec(nodes=1, gpus_per_node=4, memory_gb=80, device="a100"),
                 (4, 1, 1, 3), "FSDP full_shard (ZeRO-3) dp 4"),
    # Constructed, not published (issue #13): a Llama-2-70B shape on 8 nodes × 8 H100, micro-batch 1 of 4096,
    # 16 micro-batches per replica, no checkpointing (what `python -m tasks plan` does: each layout keeps
    # grad_accum), once on InfiniBand NDR and once on one 100 GbE NIC per node; and a 1B model on 8 single-L4
    # cloud nodes over 100 GbE.
    PublishedRun("70B, 8 × 8 H100, InfiniBand (constructed)", "-", LLAMA2_70B, 32000, 4096, 1, None, False,
                 ClusterSpec(nodes=8, gpus_per_node=8, memory_gb=80, device="h100-sxm"), None, "-", 16),
    PublishedRun("70B, 8 × 8 H100, 100 GbE (constructed)", "-", LLAMA2_70B, 32000, 4096, 1, None, False,
                 ClusterSpec(nodes=8, gpus_per_node=8, memory_gb=80, device="h100-sxm", inter_node="ethernet"),
                 None, "-", 16),
    PublishedRun("1B, 8 × 1 L4, 100 GbE (constructed)", "-", ModelSpec(flavor="1b"), 32000, 2048, 4, 256, False,
                 ClusterSpec(nodes=8, gpus_per_node=1, memory_gb=24, device="l4", inter_node="ethernet"),
                 None, "-"),
]


def layout_text(r: PlanRow | None) -> str:
    return "-" if r is None else f"dp {r.dp}, tp {r.tp}, pp {r.pp}, ZeRO-{r.zero_stage}"


def table() -> str:
    """The README's published-vs-chosen table."""
    lines = ["| run | cluster | published | planner's choice | est. s/step | published layout, est. |",
             "|---|---|---|---|---:|---|"]
    for run in RUNS:
        p, c = run.plan(), run.cluster
        ch = p.chosen
        pub = row_of(p, run.published) if run.published else None
        if pub is None or pub.cost is None:
            pub_est = "-" if run.source == "-" else "not expressible" if run.published is None else "rejected"
        else:
            pub_est = (f"{pub.cost.step_s:,.2f} s/step, {pub.cost.s_per_token / ch.cost.s_per_token - 1:+.0%} "
                       f"per token, {pub.memory.total / (c.memory_gb * 2**30):.0%} memory")
        lines.append(f"| {run.name} | {c.nodes} × {c.gpus_per_node} {c.device}, {c.inter_node} | "
                     f"{run.published_text} | {layout_text(ch)} | {ch.cost.step_s:,.2f} | {pub_est} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
