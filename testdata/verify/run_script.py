"""Run the verify_tpu.py that ckpt verify --emit-torch wrote several times in one interpreter
(torch and transformers are imported once), for tests.

Usage (in the oracle chroot): python3 testdata/verify/run_script.py SCRIPT ARGS [--- ARGS ...]

Each ARGS (separated by ---) is a command line for SCRIPT. Prints a JSON list with, for
each run, its exit status and what it printed.
"""

import contextlib
import importlib.util
import io
import json
import sys


def main():
    script, rest = sys.argv[1], sys.argv[2:]
    spec = importlib.util.spec_from_file_location("verify_tpu", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs, cur = [], []
    for a in rest + ["---"]:
        if a == "---":
            runs.append(cur)
            cur = []
        else:
            cur.append(a)
    results = []
    for args in runs:
        sys.argv = [script] + args
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                status = mod.main()
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
                print(e.code)
        results.append({"args": args, "status": status, "output": out.getvalue()})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
