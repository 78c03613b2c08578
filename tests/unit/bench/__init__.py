"""The benchmarks' pure parts: their reports and their schedules."""
