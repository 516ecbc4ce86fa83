"""Libraries of the `evaluate` and `review` stages: perplexity, generation, the spot-check sample, the review gate."""
