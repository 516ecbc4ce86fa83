"""Filters with a reason (datatrove's shape): the protocol, quality, toxicity (with its bundled word lists), language identification and decontamination against evaluation prompts."""
