"""Hugging Face checkpoints in and out: import, export, the PEFT adapter export and a tiny checkpoint to try them with."""
