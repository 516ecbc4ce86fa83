"""Training: the model, its parallel layout, the one loop and its objectives, checkpoints, inputs, Hugging Face
checkpoints in and out, and layout planning — one subpackage per concept (torchtitan's separation of model,
parallelize and one trainer). The architecture numbers live on the ground floor (specs/architecture.py), the batch
geometry too (specs/batch.py).

modeling/        model.py: the plain decoder (Transformer, its layers, lm_loss), no parallel code; fused.py (fused
                 q/k/v and gate/up, converted at the boundaries), rope.py, masks.py, loss.py (the chunked linear +
                 cross entropy), kv_cache.py (generation), lora.py
parallel/        parallelize.py: process groups, build_layout, pipeline_layers, build_module / build_engine
                 (`deepspeed.initialize`), compile_model; tp_model.py: apply_tensor_parallel (vocab-parallel
                 embedding/head, sequence-parallel norms / attention / SwiGLU); tensor_parallel.py,
                 sequence_parallel.py: the collectives as autograd functions; dsconfig.py: ds_config, the client
                 AdamW and LR schedule; tp_context.py: TPContext, a rank's place in its TP group;
                 deepspeed_adapter.py (+ deepspeed_optim.py, Adam's state for elastic resume): every
                 DeepSpeed internal touched, each with a version-contract test (tests/test_deepspeed_adapter.py)
loop/            trainer.py: run_rank(job) and the ONE loop (rank set-up, resume, rollback, checkpoints, eval
                 cadence, telemetry, final weights) for every objective; step.py: train_step, one optimizer step
                 (micro-batches, the guard's judgement before or after the update, accumulation, the grad norm held
                 one step, fp16 overflow); stability.py: the guard; engine.py: Engine, one rank's DeepSpeed engine
                 (step API, evaluation, DeepSpeed's own checkpoint files); seam.py: StepEngine, the protocol the loop,
                 step and objectives type the engine with; telemetry.py, nvml.py, monitor.py, runlog.py
objectives/      base.py (the Objective protocol), pretrain.py, sft.py, dpo.py (+ dpo_loss.py); the registry in
                 objectives/__init__.py maps a job's `objective` to its class
checkpointing/   manager.py: CheckpointManager, the one object the loop talks to (resume choice, save sync/async
                 with the layout-free copy, load at the same layout or resharded, publish/prune through the writer,
                 close); seam.py (CheckpointEngine: what it needs of the engine); checkpoint.py (the format:
                 CheckpointStore, manifests, verification, choose_resume, identity_problems), resume_rules.py (may a
                 checkpoint of one layout resume at another: pure rules), async_save.py and snapshot.py, elastic.py
                 (the layout-free copy), weights.py (final weights, sharded and merged), init_weights.py (starting
                 weights read per rank as its slices), rng.py (each rank's RNG states)
inputs/          data.py (BatchPlan / TrainData: which sequences each rank trains on per step, EvalData),
                 adaptive.py (the adaptive mixer), sft_data.py, pref_data.py, chat.py and chat_template.py,
                 synthetic.py (synthetic mixes for timing runs; the tests' helpers live in tests/helpers/train.py)
hf/              hf_import.py, hf_export.py, hf_card.py, peft_export.py, tiny_checkpoint.py
planning/        planner.py (the search), plan_result.py (its answer as data), plan_cost.py, plan_memory.py,
                 plan_render.py, plan_calibrate.py, measure.py, cluster.py
launch.py        launch(job) -> TrainResult: in-process / spawn / deepspeed / torchrun; typed markers back
worker.py        `python -m tasks.train.worker --job job.json`, the entry point under external launchers
remote_env.py    write_env_file: the variables the DeepSpeed launcher exports to its other hosts (no secrets)
Heavy imports (torch, deepspeed) happen in those modules, not here.
"""
