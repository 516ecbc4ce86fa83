"""The clean stage's machinery: per-shard filtering and the corpus-wide pass, its outputs as executor tasks, and text normalization (per document and batched)."""
