"""Worker of ``newest_peers.py``, run by a Python >= 3.12 with shapiq >= 1.6 (and numpy).

Reads value tables (``tables[e]``: the game's values at every coalition, bit
``i`` of the index set when feature ``i`` is in) from an ``.npz``, runs
shapiq's newest Shapley approximators on table-lookup games at each budget
and seed, and writes their estimates to another ``.npz``. No torch needed.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from shapiq.approximator import LeverageSHAP, OddSHAP, PolySHAP

PEERS = {
    "shapiq OddSHAP": lambda n, seed: OddSHAP(n, random_state=seed),
    "shapiq LeverageSHAP": lambda n, seed: LeverageSHAP(n, random_state=seed),
    "shapiq PolySHAP": lambda n, seed: PolySHAP(n, max_order=2, random_state=seed),
}


def main() -> None:
    source, target = sys.argv[1], sys.argv[2]
    data = np.load(source)
    tables, budgets, seeds = data["tables"], data["budgets"].tolist(), int(data["seeds"])
    d = round(np.log2(tables.shape[1]))
    powers = 1 << np.arange(d)
    out: dict[str, np.ndarray] = {}
    for name, build in PEERS.items():
        estimates = np.full((len(budgets), seeds, len(tables), d), np.nan)
        seconds = np.zeros(len(budgets))
        for b, budget in enumerate(budgets):
            for seed in range(seeds):
                for e, table in enumerate(tables):

                    def game(coalitions: np.ndarray, table: np.ndarray = table) -> np.ndarray:
                        return table[np.asarray(coalitions, dtype=bool).astype(np.int64) @ powers]

                    start = time.perf_counter()
                    try:
                        values = build(d, seed).approximate(int(budget), game)
                        estimates[b, seed, e] = [values[(i,)] for i in range(d)]
                    except Exception as error:  # a peer refusing a budget: left NaN
                        print(f"{name} at {budget}: {type(error).__name__}: {error}", flush=True)
                    seconds[b] += time.perf_counter() - start
        out[name] = estimates
        out[name + " seconds"] = seconds / (seeds * len(tables))
    np.savez(target, **out)


if __name__ == "__main__":
    main()
