"""The validate stage's machinery: Great Expectations glue, corpus-wide tallies from per-batch parts, and the self-contained HTML report."""
