"""The one training loop: the Trainer, the step (step.py: train_step), the stability guard, the engine API the loop asks of DeepSpeed, telemetry and the run log."""
