#!/usr/bin/env python3
"""Generate pickle fixtures for the formats/pickle Go tests.

Every fixture is written by CPython's own pickle module (except the few
hand-written malicious byte strings marked below), so the Go decoder is
tested against real producer bytes. Nothing here is ever unpickled with
real globals: scan expectations come from an Unpickler whose find_class
returns a harmless stand-in.

Run from this directory with python3 (stdlib only):  python3 gen.py
Outputs: *.pkl and expected.json: {"values": {name: canonical form},
"fixtures": {file: entry}}, each entry holding
  "canon":  the key in "values" of the decoded value, in the canonical JSON
            form of canon() here and canonValue in fixtures_test.go, or null
            when there is no single value to compare;
  "error":  true when the Go decoder must reject the pickle;
  "globals": [[module.name, offset, opcode], ...] as a Python unpickler
            resolves them (what Scan must report);
  "dangerous": the subset of those globals Scan must classify Unsafe.
"""
import _compat_pickle
import argparse
import collections
import copyreg
import io
import json
import math
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))

# Set iteration order (and so the pickled bytes) depends on str hashing.
if os.environ.get("PYTHONHASHSEED") != "0":
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, "PYTHONHASHSEED": "0"})

# A plain-data class living in a module the Go side knows nothing about.
_mylab = types.ModuleType("mylab")
_cfgmod = types.ModuleType("mylab.config")


class TrainConfig:
    pass


class KwOnly:
    """Pickled with NEWOBJ_EX at protocol >= 4."""

    def __new__(cls, a, *, k):
        self = object.__new__(cls)
        self.a, self.k = a, k
        return self

    def __getnewargs_ex__(self):
        return (self.a,), {"k": self.k}


for _c in (TrainConfig, KwOnly):
    _c.__module__ = "mylab.config"
    setattr(_cfgmod, _c.__name__, _c)
sys.modules["mylab"] = _mylab
sys.modules["mylab.config"] = _cfgmod


def rich():
    shared = [1, 2, 3]
    selfref = ["head"]
    selfref.append(selfref)
    rec_t = ([],)
    rec_t[0].append(rec_t)
    od = collections.OrderedDict([("w", 1.5), ("b", -2)])
    od._metadata = collections.OrderedDict([("", {"version": 1}), ("lin", {"version": 2})])
    dd = collections.defaultdict(list)
    dd["a"].append(1)
    cfg = TrainConfig()
    cfg.layers = [64, 64]
    cfg.dropout = 0.1
    cfg.tags = ("a", "b")
    many = [[i] for i in range(260)]
    return {
        "none": None, "t": True, "f": False,
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -129, 2**31 - 1, -2**31, 2**31,
                 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 2**70, -2**70, 10**40, 2**2100],
        "floats": [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, float("inf"), float("-inf"),
                   float("nan"), 0.1],
        "str": ["", "ascii", "ünïcödé", "日本語", "emoji 😀", "back\\slash", "new\nline",
                "nul\x00", "quote'\"", "\r\x1a", "\\u0041 not an escape", "x" * 300],
        "bytes": [b"", b"abc", bytes(range(256))],
        "bytearray": bytearray(b"\x00\xffba"),
        "tuples": [(), (1,), (1, "two"), (1, "two", 3.0), (1, 2, 3, 4, 5)],
        "nested": {"a": [{"b": (1, [2, {"c": None}])}]},
        "set": {1, 2, 3}, "frozenset": frozenset({"x", "y"}), "emptyset": set(),
        "od": od, "counter": collections.Counter({"a": 3, "b": 1}), "dd": dd,
        "complex": 1.5 - 2j,
        "shared_a": shared, "shared_b": shared,
        "selfref": selfref, "rectuple": rec_t,
        "ns": argparse.Namespace(lr=0.001, epochs=3, name="run"),
        "cfg": cfg,
        "many": many, "many_last": many[-1],
        "batch": list(range(1001)),
        1: "int key", 2.5: "float key", (1, "t"): "tuple key", None: "none key",
        False: "bool key", b"bk": "bytes key",
    }


def fhex(f):
    if math.isnan(f):
        return "nan"
    return "0x%016x" % struct.unpack(">Q", struct.pack(">d", f))[0]


def qualname(t):
    return "%s.%s" % (t.__module__, t.__qualname__)


def canon(v, ids):
    """The canonical JSON form the Go test derives from a decoded Value."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": fhex(v)}
    if isinstance(v, complex):
        return {"complex": [fhex(v.real), fhex(v.imag)]}
    if isinstance(v, str):
        return {"str": v}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": v.hex()}
    if isinstance(v, tuple):
        return {"tuple": [canon(x, ids) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"set": [canon(x, ids) for x in v], "frozen": isinstance(v, frozenset)}
    if isinstance(v, type):
        return {"global": qualname(v)}
    if id(v) in ids:
        return {"ref": ids[id(v)]}
    n = ids[id(v)] = len(ids) + 1
    if isinstance(v, list):
        return {"id": n, "list": [canon(x, ids) for x in v]}
    if isinstance(v, dict):
        out = {"id": n, "dict": [[canon(k, ids), canon(x, ids)] for k, x in v.items()]}
        if type(v) is not dict:
            out["class"] = qualname(type(v))
        st = getattr(v, "__dict__", None)
        if st:
            out["state"] = canon(st, ids)
        if isinstance(v, collections.defaultdict):
            out["default"] = canon(v.default_factory, ids)
        return out
    # A plain object: NEWOBJ (protocol >= 2) or copyreg._reconstructor
    # (protocols 0, 1) both decode to NEWOBJ with no args.
    out = {"id": n, "object": qualname(type(v)), "kind": "NEWOBJ", "args": []}
    if isinstance(v, KwOnly):
        out["kind"], out["args"] = "NEWOBJ_EX", [canon(v.a, ids)]
        out["kwargs"] = canon({"k": v.k}, ids)
    out["state"] = canon(vars(v), ids)
    return out


class _Stand:
    """Stand-in for every global while recording: callable, settable, inert."""

    def __new__(cls, *a, **k):
        return object.__new__(cls)

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Stand()

    def __setstate__(self, state):
        pass

    def __setitem__(self, k, v):
        pass

    def append(self, x):
        pass

    def extend(self, xs):
        pass


class _Recorder(pickle._Unpickler):
    """Pure-Python unpickler that records find_class calls and resolves nothing."""

    def __init__(self, f):
        super().__init__(f)
        self.seen = []

    def find_class(self, module, name):
        self.seen.append((module, name))
        return _Stand

    def persistent_load(self, pid):
        return _Stand()


def expected_globals(data):
    """[[module.name, offset, opcode]] as CPython resolves them, with the Go
    decoder's renaming rule (text GLOBAL/INST always, STACK_GLOBAL below
    protocol 3; our fixtures never mix)."""
    ops = [(op.name, pos) for op, arg, pos in pickletools.genops(data)
           if op.name in ("GLOBAL", "STACK_GLOBAL", "INST")]
    names = []
    f = io.BytesIO(data)
    while f.tell() < len(data):
        r = _Recorder(f)
        r.load()
        names += r.seen
    assert len(names) == len(ops), (names, ops)
    out = []
    for (opname, pos), (m, n) in zip(ops, names):
        if opname != "STACK_GLOBAL":
            if (m, n) in _compat_pickle.NAME_MAPPING:
                m, n = _compat_pickle.NAME_MAPPING[(m, n)]
            elif m in _compat_pickle.IMPORT_MAPPING:
                m = _compat_pickle.IMPORT_MAPPING[m]
        out.append(["%s.%s" % (m, n), pos, opname])
    return out


class _Evil:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def evil_canon(name, args):
    return {"id": 1, "object": name, "kind": "REDUCE", "args": [{"str": a} for a in args]}


class _PidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, TrainConfig):
            return obj.pid
        return None


def main():
    expected = {}
    values = {}

    def write(name, data, canon_value=None, error=False, dangerous=(), scan=None, key=None):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
        if scan is None:
            scan = expected_globals(data)
        if canon_value is not None:
            key = key or name
            values[key] = canon_value
        expected[name] = {"canon": key, "error": error,
                          "globals": scan, "dangerous": list(dangerous)}

    for proto in range(6):
        obj = rich()
        write("rich_p%d.pkl" % proto, pickle.dumps(obj, protocol=proto), canon(obj, {}), key="rich")

    for proto in (4, 5):
        obj = [KwOnly(1, k="v")]
        write("newobjex_p%d.pkl" % proto, pickle.dumps(obj, protocol=proto), canon(obj, {}),
              key="newobjex")

    # Persistent ids: a str pid at protocol 0 (PERSID), a tuple at 2 (BINPERSID).
    for proto, pid in ((0, "storage-0"), (2, ("storage", "k0", 3))):
        stor = TrainConfig()
        stor.pid = pid
        buf = io.BytesIO()
        _PidPickler(buf, protocol=proto).dump({"w": stor, "again": stor})
        pc = {"persid": canon(pid, {})}
        write("persid_p%d.pkl" % proto, buf.getvalue(),
              {"id": 1, "dict": [[{"str": "w"}, pc], [{"str": "again"}, pc]]})

    # Legacy torch layout: several pickles back to back.
    multi = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950A86A20F9469CFC6C, 1001, {"a": 1}))
    write("multi_p2.pkl", multi, None)

    # Extension registry (EXT1): the Go decoder refuses it.
    copyreg.add_extension("mylab.config", "TrainConfig", 240)
    try:
        # EXT1 resolves through the registry, not a GLOBAL: Scan lists nothing.
        write("ext1_p2.pkl", pickle.dumps(TrainConfig(), protocol=2), None, error=True, scan=[])
    finally:
        copyreg.remove_extension("mylab.config", "TrainConfig", 240)

    # Malicious pickles. Decoding must stay inert; Scan must flag them.
    evil = [
        ("evil_posix_system_p0.pkl", 0, os.system, ("echo pwned",), "posix.system"),
        ("evil_posix_system_p2.pkl", 2, os.system, ("echo pwned",), "posix.system"),
        ("evil_posix_system_p4.pkl", 4, os.system, ("echo pwned",), "posix.system"),
        ("evil_eval_p2.pkl", 2, eval, ("1+1",), "builtins.eval"),
        ("evil_popen_p4.pkl", 4, subprocess.Popen, ("id",), "subprocess.Popen"),
        ("evil_getattr_p3.pkl", 3, getattr, ("abc", "upper"), "builtins.getattr"),
    ]
    for name, proto, fn, args, gname in evil:
        write(name, pickle.dumps(_Evil(fn, args), protocol=proto), evil_canon(gname, args),
              dangerous=[gname])
    # Hand-written: the os.system spelling (Python itself writes posix.system).
    write("evil_os_system_p0.pkl", b"cos\nsystem\n(S'echo pwned'\ntR.",
          evil_canon("os.system", ["echo pwned"]), dangerous=["os.system"])
    # Hand-written: getattr(__import__('os'), 'system')('echo pwned'). The Go
    # decoder refuses to call the result of a call; Scan flags both globals.
    write("evil_chain_p0.pkl",
          b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(S'os'\ntRS'system'\ntR(S'echo pwned'\ntR.",
          None, error=True, dangerous=["builtins.getattr", "builtins.__import__"])

    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"values": values, "fixtures": expected}, f, sort_keys=True,
                  separators=(",", ":"), ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
