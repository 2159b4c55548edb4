"""Stage 1, workload: the request arrays every simulation reads.

``arrays`` (``Workload`` and the synthetic generator), ``traces`` (Azure, CSV,
JSONL and Mooncake readers), ``block_hashes`` (prefix-chained block ids).
Imports only the foundation modules (``planner.bounds``, ``planner.text``).
"""
