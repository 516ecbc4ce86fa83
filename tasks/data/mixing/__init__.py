"""From clean text to training shards: the tokenizer, the mix decisions, per-shard token files and packing."""
