"""The model as training builds it: the plain decoder and its parts (RoPE, masks, fused projections, the chunked loss, the KV cache, LoRA)."""
