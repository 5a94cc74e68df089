#!/usr/bin/env python3
"""List each tar archive's members as Python's tarfile reads them (mode "r:", as
torch.load's legacy loader and NeMo's restore_from open them), as JSON:

    scripts/oracle python formats/pytar/testdata/members.py FILE...

For each file: "open" is the exception tarfile.open raised (or null); "members" lists
[name (hex of its surrogateescape bytes), linkname (hex), type (hex), offset,
offset_data, size] for each member TarFile.next returned; "end" is the exception the
listing ended with (or null)."""

import json
import sys
import tarfile


def hexname(s):
    return s.encode("utf-8", "surrogateescape").hex()


def main():
    out = {}
    for path in sys.argv[1:]:
        r = {"open": None, "members": [], "end": None}
        try:
            t = tarfile.open(path, "r:")
        except Exception as e:
            r["open"] = type(e).__name__
            out[path] = r
            continue
        try:
            while True:
                m = t.next()
                if m is None:
                    break
                r["members"].append([hexname(m.name), hexname(m.linkname), m.type.hex(), m.offset, m.offset_data, m.size])
                if len(r["members"]) > 10000:
                    r["end"] = "TooMany"
                    break
        except Exception as e:
            r["end"] = type(e).__name__
        out[path] = r
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
