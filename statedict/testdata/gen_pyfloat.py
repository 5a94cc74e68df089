"""Writes pyfloat.json: float64 bit patterns and CPython's repr() of each (statedict.PyFloat's
ground truth). Run with any Python 3: python3 statedict/testdata/gen_pyfloat.py"""
import json
import math
import os
import random
import struct

vals = [0.0, -0.0, 1.0, -2.5, 0.1, 1e-4, 9.999e-5, 1e-5, 1e16, 9999999999999998.0, 1e22, 123456789.0,
        1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 65536.0, 0.000905463412215599,
        math.inf, -math.inf, math.nan, 1e-8, 2.0 ** 70, 0.5, 3.14159]
r = random.Random(7)
vals += [struct.unpack("<d", struct.pack("<Q", r.getrandbits(64)))[0] for _ in range(200)]
out = [{"bits": struct.unpack("<Q", struct.pack("<d", v))[0], "repr": repr(v)} for v in vals if not math.isnan(v) or v is math.nan]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyfloat.json"), "w") as f:
    json.dump(out, f, indent=0)
