"""Near and exact deduplication: MinHash signatures (numba loops, word hashes), LSH banding and the keep/remove decision, the out-of-core global pass and its audit."""
