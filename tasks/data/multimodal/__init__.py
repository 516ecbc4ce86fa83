"""Multimodal records (image–text, audio–transcript) and the checks that align them in time and meaning.

records.py: the typed media reference and record; readers.py + subtitles.py: jsonl/parquet pairs, WebDataset
tar shards, audio with SRT/VTT/JSON transcripts; decode.py: Pillow/soundfile decoding (a truncated file is a
reason, not a crash); checks.py: the per-record filters; phash.py: perceptual-hash dedup; semantic.py: CLIP/CLAP
similarity from a local folder; embedded.py: the built-at-run-time default source with planted misalignments;
shards.py: WebDataset output and the spot-check sample.
"""
