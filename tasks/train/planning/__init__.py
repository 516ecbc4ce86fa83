"""Choosing the parallel layout and recipe: the planner, its cost and memory models, rendering, calibration against measurements, and measured layouts."""
