"""Checkpoints: the store and the resume choice, async saves, the layout-free (elastic) copy, consolidated weights, starting weights and each rank's RNG state."""
