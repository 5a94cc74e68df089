#!/usr/bin/env python3
"""Writes setorder.json: the order in which CPython iterates a set of ints added in
increasing order, as torch.distributed.checkpoint's dedup_save_plans builds the sets of plan
indices (ranks) holding each duplicated item; its min() breaks ties in that order.

Usage (in the oracle chroot): python3 testdata/dcp/planner/gen_setorder.py testdata/dcp/planner
"""

import hashlib
import json
import os
import random
import sys


def order(vals):
    s = set()
    for v in vals:
        s.add(v)
    return list(s)


def main():
    random.seed(1)
    cases = [[0, 1, 2, 3], [1, 8], [0, 8, 16], [3, 11, 19, 27], [0, 64, 128, 192], list(range(8)),
             list(range(100)), list(range(5, 100, 8)), [0, 1, 2, 3, 4, 5, 6, 7, 8, 1024]]
    for _ in range(40):
        cases.append(sorted(random.sample(range(2000), random.randint(1, 60))))
    small = [{"in": c, "order": order(c)} for c in cases]
    # Sets of more than 50000 entries grow by 2x instead of 4x: only a digest of the order.
    big = []
    for start, step, n in [(0, 9, 50010), (3, 1, 60000)]:
        o = order(range(start, start + step * n, step))
        big.append({"start": start, "step": step, "n": n,
                    "sha256": hashlib.sha256(json.dumps(o).encode()).hexdigest()})
    with open(os.path.join(sys.argv[1], "setorder.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "small": small, "big": big}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
