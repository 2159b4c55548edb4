"""Stage 9, pictures: ``heatmap`` (a sweep over two axes) and ``pareto`` (``plan
size``'s cost against tail latency). matplotlib only; no printing.
"""
