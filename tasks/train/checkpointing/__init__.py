"""Checkpoints, owned here: manager.py (CheckpointManager, the one object the loop talks to: resume choice, saves
sync or async with the layout-free copy, loads at the same layout or resharded, the guard's saved state, close),
seam.py (CheckpointEngine: what it needs of the engine, DeepSpeed's own files only), checkpoint.py (the on-disk
format: CheckpointStore, manifests, `latest`, rotation, verification, choose_resume), async_save.py (the writer) and
snapshot.py (host snapshots), elastic.py (the layout-free copy) and resume_rules.py (which layouts may resume),
rng.py (each rank's RNG states); weights.py (final weights) and init_weights.py (starting weights per rank)."""
