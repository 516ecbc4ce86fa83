"""Pretraining libraries: model, parallel layout, DeepSpeed engine, training loop, stability and telemetry.

model.py            ModelConfig, Transformer (plain pp = 1 model), pipeline layers, param_count, flops_per_token
tensor_parallel.py  TPContext, ColumnParallelLinear / RowParallelLinear, copy_to_tp / reduce_from_tp, gather_full
dsconfig.py         ds_config(train, parallel), the client AdamW and LR schedule (lr_at, scheduler_factory)
data.py             BatchPlan / TrainData (which sequences each rank trains on per step), EvalData, loss_sums
engine.py           init_distributed (no shm op build), build_layout (topology, groups), Engine, teardown
checkpoint.py       CheckpointStore (manifests, latest, rotation, resume choice), identity_problems
loop.py             Job, run_rank: one rank's whole run (resume, train, eval, checkpoint, consolidate, report)
launch.py           launch(job): in-process / torch.multiprocessing.spawn / deepspeed / torchrun; build_command
worker.py           `python -m tasks.train.worker --job job.json`, the entry point under external launchers
testing.py          synthetic_mix, reference_run (plain-PyTorch yardstick), spawn_gloo, make_job
planner.py, stability.py, telemetry.py: layout planning, spike handling, throughput/MFU (see each module)
Heavy imports (torch, deepspeed) happen in those modules, not here.
"""
