"""Published training *configs* (framework example scripts and recipes: torchtitan, Megatron-LM, NeMo, BigCode,
BigScience, llm-foundry, OLMo), encoded like tests/published_layouts.py's runs and printed in the same table.

Where the source's recipe uses a feature forgeline lacks (context parallelism, an interleaved pipeline, hybrid
sharding, a replicated multi-query head), `refused` holds the params keys a user translating it would write and
`refusal` the words the spec must answer with; `published` is then the nearest recipe that runs (the feature's
ranks folded into dp, the virtual stages dropped), said in the run's comment. Every figure below was read in the
file named, at the commit given where the index showed one; anything else is said to be assumed.
"""

from __future__ import annotations

from specs.pretrain import ModelSpec
from tasks.train.planning.planner import ClusterSpec
from tests.published_layouts import A100_IB, H100_IB, LLAMA2_70B, LLAMA3_405B, RUNS, PublishedRun, layout

LLAMA3_8B = ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
                      tie_embeddings=False)
LLAMA3_70B = LLAMA2_70B      # the same 80 × 8192 shape (64 heads, 8 kv, SwiGLU 28672); vocabulary 128256
LLAMA3_VOCAB = 128256

CONFIG_RUNS = [
    # pytorch/torchtitan torchtitan/models/llama3/train_configs/llama3_8b.toml (commit 01424cb): "a preset for 64
    # A100 GPUs", flavor 8B, batch_size 1 per rank, seq_len 8192, data_parallel_shard_degree -1 (FSDP over all
    # 64), tp 1, pp 1, cp 1, activation_checkpoint mode 'selective' with selective_ac_option 'op' (save matmul
    # outputs, recompute the rest) → global batch 64, no accumulation. Op-level selective recomputation has no
    # params key (pretrain.activation_checkpointing is off or every block): searched. The A100's memory (80 GB)
    # and the network (InfiniBand) are assumed; the 8B shape is torchtitan's llama3 flavor table (Llama 3's).
    PublishedRun("Llama 3 8B (torchtitan)", "torchtitan llama3_8b.toml", LLAMA3_8B, LLAMA3_VOCAB, 8192, 64,
                 ClusterSpec(nodes=8, **A100_IB), layout(64, 1, 1, 3, micro_batch=1),
                 "FSDP 64, mb 1, selective (op) AC"),
    # torchtitan llama3_70b.toml (commit 038d5fd): 64 A100, local_batch_size 8, seq_len 8192, tensor_parallel
    # 8, FSDP over the rest (8), pp 1, activation_checkpoint 'full' → global 64. torchtitan's TP plan shards the
    # norms' activations over the sequence (SequenceParallel): sequence_parallel on.
    PublishedRun("Llama 3 70B (torchtitan)", "torchtitan llama3_70b.toml", LLAMA3_70B, LLAMA3_VOCAB, 8192, 64,
                 ClusterSpec(nodes=8, **A100_IB),
                 layout(8, 8, 1, 3, micro_batch=8, checkpointing="full", sequence_parallel=True),
                 "tp 8 (SP), FSDP 8, mb 8, full AC"),
    # torchtitan llama3_405b.toml (commit 01424cb): "a preset for 128 H100 GPUs", batch_size 2, seq_len 8192,
    # tp 8 (async TP), FSDP 16, pp 1, full AC, float8 linears (priced as bf16) → global 32.
    PublishedRun("Llama 3 405B (torchtitan)", "torchtitan llama3_405b.toml", LLAMA3_405B, LLAMA3_VOCAB, 8192, 32,
                 ClusterSpec(nodes=16, **H100_IB),
                 layout(16, 8, 1, 3, micro_batch=2, checkpointing="full", sequence_parallel=True),
                 "tp 8 (SP), FSDP 16, mb 2, full AC, fp8"),
    # NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh (commit 157006d): 1 node × 8 (H100 by the
    # name), TP 1, CP 1, PP 1, micro batch 1, global 128, seq 8192, 32 layers, hidden 4096, ffn 14336, 32 heads,
    # 8 query groups, untied, vocab 128256, --use-distributed-optimizer (ZeRO-1), no recompute flag, fp8 (priced
    # as bf16). It passes --sequence-parallel at TP 1, where it does nothing (our spec accepts it the same way).
    PublishedRun("Llama 3 8B (Megatron-LM)", "Megatron-LM train_llama3_8b_h100_fp8.sh", LLAMA3_8B, LLAMA3_VOCAB,
                 8192, 128, ClusterSpec(nodes=1, **H100_IB), layout(8, 1, 1, 1, micro_batch=1, checkpointing="off"),
                 "dp 8, distributed optimizer, mb 1, fp8"),
    # NVIDIA/NeMo nemo/collections/llm/recipes/llama3_8b.py (commit 0061796): 1 node × 8, tp 1, pp 1, context
    # parallel 2, seq 8192, global 512, micro 1, distributed_fused_adam (ZeRO-1), bf16, no recomputation. The
    # GPU is not named (H100 assumed). Refused: context parallelism; runnable: the cp ranks as dp (dp 8).
    PublishedRun("Llama 3 8B (NeMo)", "NeMo recipes/llama3_8b.py", LLAMA3_8B, LLAMA3_VOCAB, 8192, 512,
                 ClusterSpec(nodes=1, **H100_IB), layout(8, 1, 1, 1, micro_batch=1, checkpointing="off"),
                 "dp 4 × cp 2, distributed optimizer, mb 1",
                 refused={"parallel.context_parallel_size": 2}, refusal="context parallelism"),
    # NeMo recipes/llama3_70b.py (commit 0189a3b): 4 nodes × 8, tp 4, pp 4, virtual pipeline 5, context parallel
    # 2, sequence parallel, seq 8192, global 512, micro 1, distributed_fused_adam, no recomputation (H100 assumed:
    # its performance recipe loads userbuffers_bf16_h100_h8192_tp4). Refused: the virtual pipeline and context
    # parallelism; runnable: tp 4 × pp 4 on plain 1F1B with the cp ranks as dp (dp 2): each rank then holds
    # whole 8192-token sequences, twice cp 2's activations, which fit only with recomputation (searched).
    PublishedRun("Llama 3 70B (NeMo)", "NeMo recipes/llama3_70b.py", LLAMA3_70B, LLAMA3_VOCAB, 8192, 512,
                 ClusterSpec(nodes=4, **H100_IB),
                 layout(2, 4, 4, 1, micro_batch=1, sequence_parallel=True),
                 "tp 4, pp 4 (virtual 5), cp 2, dp 1, SP, mb 1",
                 refused={"parallel.virtual_pipeline_model_parallel_size": 5, "parallel.context_parallel_size": 2},
                 refusal="interleaved (virtual) pipeline"),
    # StarCoder (Li et al. 2023, §5.6 as quoted by nl2code.github.io/posts/StarCoder, read): 512 A100 80 GB on
    # 64 nodes, tensor and pipeline parallelism 4 each, 32-way data parallel, micro-batch 1 × 16 accumulation =
    # 512 sequences of 8192 (4M tokens), vocabulary 49152, bf16, BigCode's Megatron-LM fork. Shape (40 layers,
    # 6144 wide, 48 heads, one multi-query kv head, 4h GELU MLP) from the model's config as widely cited, not
    # re-read. The fork replicates the one kv head on every tensor rank; our TP splits kv heads (as Megatron-core
    # does), so tp 4 is refused; runnable: tp 1 with the same pp 4 (dp 128). GELU 4h: SwiGLU 16384 (8h/3 exactly).
    PublishedRun("StarCoder 15.5B (BigCode Megatron-LM)", "Li et al. 2023, §5.6",
                 ModelSpec(flavor="1b", n_layers=40, d_model=6144, n_heads=48, n_kv_heads=1, ffn_hidden=16384,
                           tie_embeddings=False),
                 49152, 8192, 512, ClusterSpec(nodes=64, **A100_IB), layout(128, 1, 4, 1, micro_batch=1),
                 "tp 4, pp 4, dp 32, MQA, mb 1 × 16",
                 refused={"parallel.tp": 4, "parallel.pp": 4, "parallel.dp": 32}, refusal="kv heads are split"),
    # bigscience-workshop/bigscience train/tr11-176B-ml/smaller_models/tr11f-6B3-ml.slurm (commit 08f504f; the
    # model released as BLOOM-7B1): 32 nodes × 4 V100 32 GB, PP 4, TP 4 (→ dp 8), micro batch 1, global 512
    # (after a ramp from 192, not modelled), 30 layers, hidden 4096, 32 heads, seq 2048, vocab padded to 250880,
    # fp16, ZeRO stage 0, checkpoint-activations, ALiBi (no cost difference modelled), tied embeddings (BLOOM's).
    # Jean Zay's V100 nodes: NVLink inside, Omni-Path between (modelled as HDR InfiniBand). GELU 4h MLP: SwiGLU
    # 10920 wide (8h/3 = 10922⅔; 10920 divides by 8).
    PublishedRun("BLOOM-7B1 (Megatron-DeepSpeed)", "bigscience tr11f-6B3-ml.slurm",
                 ModelSpec(flavor="1b", n_layers=30, d_model=4096, n_heads=32, n_kv_heads=32, ffn_hidden=10920),
                 250880, 2048, 512,
                 ClusterSpec(nodes=32, gpus_per_node=4, memory_gb=32, device="v100", precision="fp16"),
                 layout(8, 4, 4, 0, micro_batch=1, checkpointing="full"), "tp 4, pp 4, dp 8, ZeRO-0, mb 1, ckpt"),
    # mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml (commit 15fb4ff): d_model 4096, 32 heads, 32
    # layers, expansion_ratio 4 (GELU), max_seq_len 2048, vocab 50368, global_train_batch_size 1024,
    # device_train_microbatch_size 8, FSDP HYBRID over device_mesh [2, 4] (shards over 4, 2 replicas: 8 GPUs),
    # activation_checkpointing true, amp_bf16. The GPU is not named (one node of 8 A100 80 GB assumed); MPT ties
    # its embeddings. Refused: hybrid sharding; runnable: ZeRO-3 over all 8. GELU 4h: SwiGLU 10920 wide.
    PublishedRun("MPT-7B (llm-foundry)", "llm-foundry mpt-7b.yaml",
                 ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_hidden=10920),
                 50368, 2048, 1024, ClusterSpec(nodes=1, **A100_IB),
                 layout(8, 1, 1, 3, micro_batch=8, checkpointing="full"), "HSDP 2 × 4, mb 8 × 16, full AC",
                 refused={"parallel.sharding_strategy": "HYBRID_SHARD"}, refusal="hybrid sharding"),
    # allenai/OLMo configs/official/OLMo-7B.yaml (commit 0bb7f7d): d_model 4096, 32 heads, 32 layers,
    # mlp_hidden_size 22016 (OLMo's fused gate + up: SwiGLU 11008 wide), untied, seq 2048, embedding_size 50304,
    # global_train_batch_size 2048, device_train_microbatch_size 2, FSDP (full shard, torch's default) in mixed
    # precision, flash attention. The config fixes no cluster: 32 nodes × 8 A100 40 GB are assumed (the OLMo
    # paper's 27 × 8 A100 40 GB, not re-read, would not divide 2048 sequences: OLMo needs global % world == 0).
    PublishedRun("OLMo 7B (AI2 OLMo)", "OLMo configs/official/OLMo-7B.yaml",
                 ModelSpec(flavor="1b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, ffn_hidden=11008,
                           tie_embeddings=False),
                 50304, 2048, 2048, ClusterSpec(nodes=32, **{**A100_IB, "memory_gb": 40}),
                 layout(256, 1, 1, 3, micro_batch=2), "FSDP full_shard 256, mb 2 × 4"),
]


ALL_RUNS = RUNS + CONFIG_RUNS
