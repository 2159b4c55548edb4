"""Stage 9, pictures: ``heatmap`` (a sweep over two axes), ``pareto`` (``plan
size``'s cost against tail latency) and ``validate`` (``plan validate``'s
predicted against measured), each written by ``files.save_figure``. matplotlib
only; no printing.
"""
