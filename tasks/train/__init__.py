"""Training libraries: model, parallel layout, DeepSpeed engine, the one Trainer and its objectives, stability and
telemetry.

specs/architecture.py  ModelConfig, param_count, flops_per_token, ffn_hidden_size: the architecture numbers' one
                    owner (moved to the ground floor: specs/ imports it without importing tasks/)
model.py            the plain decoder (Transformer, its layers, lm_loss, init_normal): no parallel code
tensor_parallel.py  TPContext, ColumnParallelLinear / RowParallelLinear (from_linear), copy_to_tp / reduce_from_tp,
                    vocab_parallel_cross_entropy, gather_full
sequence_parallel.py  gather_sequence / scatter_sequence, gather_linears (column linears on the gathered
                    sequence, saving only the local T/tp input)
tp_model.py         apply_tensor_parallel (BLOCK_TP_PLAN): the vocab-parallel embedding/head, sequence-parallel
                    norms / attention / SwiGLU, vocab_split / head_loss
parallelize.py      init_distributed, build_layout (topology, groups), pipeline_layers, build_module / build_engine
                    (`deepspeed.initialize`), teardown
deepspeed_adapter.py  every DeepSpeed internal touched (shm op, cached groups, grad-norm marks, weights-only
                    loader, pipeline internals), each with a version-contract test in tests/test_deepspeed_adapter.py
dsconfig.py         ds_config(train, parallel), the client AdamW and LR schedule (lr_at, scheduler_factory)
data.py             BatchPlan / TrainData (which sequences each rank trains on per step), EvalData, loss_sums
engine.py           Engine: what the loop asks of one rank's DeepSpeed engine (step, evaluate, save/load,
                    consolidation)
checkpoint.py       CheckpointStore (manifests, latest, rotation), choose_resume, identity_problems
resume_rules.py     whether a checkpoint of one layout may resume at another (layout_problems, unsupported_reason):
                    pure rules, read by checkpoint.py and by elastic.py (the layout-free copy)
rng.py              each rank's RNG states in a tag (rng_file, rng_state, restore_rng)
trainer.py          run_rank(job) and Trainer: the ONE loop (rank set-up, resume, the step, stability guard and
                    rollback, checkpoints, eval cadence, telemetry, final weights) for every objective
step.py             train_step: one optimizer step of any objective (micro-batches, the guard's judgement before
                    or after the update, accumulation, the grad norm held one step, fp16 overflow)
objectives/         base.py (the Objective protocol), pretrain.py (PretrainObjective), sft.py (SFTObjective);
                    the registry in objectives/__init__.py maps a job's `objective` to its class
launch.py           launch(job) -> TrainResult: in-process / spawn / deepspeed / torchrun; typed markers back
remote_env.py       write_env_file: the variables the DeepSpeed launcher exports to its other hosts (no secrets)
worker.py           `python -m tasks.train.worker --job job.json`, the entry point under external launchers
synthetic.py        synthetic_mix (a mix-shaped folder of random documents) and make_job, for timing runs;
                    the tests' helpers (reference_run, spawn_gloo, ...) live in tests/helpers/train.py
planner.py, stability.py, telemetry.py: layout planning, spike handling, throughput/MFU (see each module)
Heavy imports (torch, deepspeed) happen in those modules, not here.
"""
