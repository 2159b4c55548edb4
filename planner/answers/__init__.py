"""Stage 8, answers built on simulations and sweeps: ``safelimit`` (KV-safe
max_num_seqs), ``sizing`` (the cheapest deployment), ``calibrate`` (a step-time
model fitted to a ``vllm bench serve`` result), ``bench`` (``plan bench``).
"""
