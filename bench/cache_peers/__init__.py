"""Trainers that bench/run_cache.py runs as baselines beside stoker (each a standalone script)."""
