"""Data libraries shared by the data stages: record schema, readers, embedded corpora."""
