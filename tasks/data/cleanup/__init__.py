"""The clean stage's machinery: the per-shard pass as an ordered list of steps (`steps`, `filter_steps`; each
step owns its name, its work on a batch and its report fields), the two phases that run it and deduplicate
(`cleaning`), the outputs as executor tasks (`clean_outputs`, `clean_output_tasks`), and text normalization (per
document, `normalize`, and batched, `textbatch`)."""
