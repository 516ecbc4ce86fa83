"""The one training loop: the Trainer, the step (step.py: train_step), the stability guard, the engine (engine.py:
Engine over DeepSpeed; seam.py: StepEngine, what the loop and objectives ask of it), telemetry and the run log."""
