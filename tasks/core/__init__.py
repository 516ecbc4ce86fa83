"""Libraries every stage shares: the stage graph, atomic files, the stage runner."""
