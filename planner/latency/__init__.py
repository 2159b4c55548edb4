"""Stage 3, latency: step-time models and their fitting.

``step_time`` (linear alpha/beta, roofline, measured tables; the jitted step
time in integer ns), ``measured`` (aiconfigurator-core tables), ``fit`` (fit a
model to measured step times, ``plan calibrate STEPS.csv``).
"""
