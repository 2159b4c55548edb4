"""``plan report``: one self-contained HTML page per result (issue 37).

The stage after the plots: ``results`` reads a result the planner wrote (a
sweep folder, a ``plan size`` folder, a ``plan run --out`` folder) into a
``Result``; ``charts`` draws its pictures with matplotlib as inline PNG;
``page`` lays them out with Jinja2, styles and scripts inline, so the page
needs no network when it is viewed.
"""
