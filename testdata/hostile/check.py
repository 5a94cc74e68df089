#!/usr/bin/env python3
"""Load each hostile fixture the way its producer loads it and report, as JSON, whether
the payload ran (the marker file appeared) and what error the load ended with:

    scripts/oracle python testdata/hostile/check.py PATH...

Files go through torch.load(weights_only=False); folders through DCP's loader
(dcp_to_torch_save, whose planner loads every item: bytes items with
torch.load(weights_only=False)). Run only inside the oracle chroot."""

import json
import os
import sys
import tempfile

import torch

MARKER = "/tmp/ckpt-marker"


def load(path):
    if os.path.isdir(path):
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        with tempfile.TemporaryDirectory() as d:
            dcp_to_torch_save(path, os.path.join(d, "out.pt"))
    else:
        torch.load(path, weights_only=False)


def main():
    report = {}
    for path in sys.argv[1:]:
        if os.path.exists(MARKER):
            os.remove(MARKER)
        err = ""
        try:
            load(path)
        except BaseException as e:  # RecursionError, RuntimeError, ...: the load failed
            err = f"{type(e).__name__}: {e}"[:500]
        report[path] = {"executed": os.path.exists(MARKER), "error": err}
    json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
