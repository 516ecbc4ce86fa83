"""Pretraining libraries: model, parallel layout, DeepSpeed engine, training loop, stability and telemetry."""
