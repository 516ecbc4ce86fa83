"""forgeline stages: one module per stage (`run(spec, paths) -> StageResult`) plus shared libraries."""
