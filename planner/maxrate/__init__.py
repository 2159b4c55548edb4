"""Stage 6, the highest sustainable rate: a search over rate scales run for
all configurations in lockstep (``search``) and its range (``search_range``,
which sweep specs validate without running anything).
"""
