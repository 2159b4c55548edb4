"""Write docs/calibrate_example.csv: 120 steps of aiconfigurator-core's direct
estimates (``planner.latency.measured.Estimator``, not GPU measurements) for
Llama-3.1-8B on one H100, for the README's ``plan calibrate`` example.
Needs the ``aic`` extra. Usage: python tools/calibrate_example.py"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from planner.latency import measured

OUT = Path(__file__).resolve().parents[1] / "docs" / "calibrate_example.csv"


def main() -> None:
    """Draw 120 steps (seed 16) and write their estimated times."""
    est = measured.Estimator("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", 1, None, "auto")
    rng = np.random.default_rng(16)
    rows = []
    for _ in range(120):
        p = int(rng.choice([0, 0, 0, 128, 512, 2048]))
        d = int(rng.integers(0 if p else 1, 256))
        kv = d * int(rng.integers(200, 4000))
        rows.append((p, d, kv, round(est.ms(p, d, kv, 0), 4)))
    pd.DataFrame(rows, columns=list(measured_columns())).to_csv(OUT, index=False)


def measured_columns() -> tuple[str, ...]:
    """The CSV columns plan calibrate reads."""
    from planner.latency.fit import COLUMNS

    return COLUMNS


if __name__ == "__main__":
    main()
