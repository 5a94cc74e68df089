#!/usr/bin/env python3
"""Write the hostile fixtures of testdata/hostile/ (issue 14) with real torch.

    scripts/oracle python testdata/hostile/gen.py OUTDIR          # payloads and small bombs
    scripts/oracle python testdata/hostile/gen.py OUTDIR --big    # also the large ones

Every payload runs `touch /tmp/ckpt-marker` when loaded the way its producer loads it;
check.py loads each one and reports whether the marker appeared, so the tests can prove
that torch really executes what `ckpt scan` must refuse. NEVER load these files outside
the oracle chroot.

Payload fixtures (scan must exit 3 on each, torch must execute each):
  bare_p0.pkl, bare_p1.pkl       a bare protocol-0/1 pickle `cposix\\nsystem\\n...` (torch.load
                                 reads a non-zip file as a legacy stream: pickle.load first)
  legacy_frame.pt                legacy stream whose magic-number pickle is protocol 4 with FRAME
  legacy_textlong.pt             legacy stream whose magic number is a protocol-0 text LONG
  dotted_serialization_os.pkl    STACK_GLOBAL torch.serialization + os.system (protocol 4)
  dotted_tempfile_os.pkl         STACK_GLOBAL tempfile + _os.system
  dotted_torch_os.pkl            STACK_GLOBAL torch + os.system
  pickle_loads.pkl               pickle.loads of an inner payload pickle
  osx_support.pkl                _osx_support._read_output("touch ...")
  collect_env.pkl                torch.utils.collect_env.run("touch ...")
  deflated.pt                    a torch.save zip whose data.pkl is deflated (torch reads it)
  dcp_meta_p0/                   a DCP folder whose .metadata is a protocol-0 payload
  dcp_bytes_p0/                  a DCP folder whose bytes item is a protocol-0 payload pickle
  dcp_hidden/                    a DCP folder whose tensor bytes hold an end-of-central-
                                 directory signature, before a bytes item that is a payload
Clean (scan exits 0, ckpt reads it):
  legacy_p4_clean.pt             torch's legacy writer with pickle_protocol=4: a FRAME'd magic number
Refused by torch (scan exits 1, ckpt refuses to read it):
  escaped.pt                     a torch.save zip with a record ../../escaped.txt
Resource bombs (torch loads them; ckpt must fail cleanly in bounded memory and time):
  bomb_tuple.pt, bomb_list.pt, bomb_tensor.pt   T(i+1) = (Ti, Ti), 48 levels, shared by memo
  bomb_module.pt                 48 levels of nn.Sequential(m, m) sharing one module
  deep_from_type.pt              _rebuild_from_type_v2 nested 3 000 000 deep (hand-built pickle)
  deep_from_type_1m.pt           the same, 1 000 000 deep
  expand.pt                      torch.zeros(1).expand(2**36): 256 GiB logical, 4 bytes stored
  deflated_bomb.pt (--big)       a 4-element tensor whose deflated data/0 inflates to 2 GiB
  many_tensors.safetensors (--big)  300 000 empty tensors and one of 4 elements (a 20 MB header)
"""

import io
import os
import pickle
import struct
import sys
import zipfile

import torch

MARKER = "/tmp/ckpt-marker"
CMD = "touch " + MARKER
MAGIC = 0x1950A86A20F9469CFC6C


class Pwn:
    def __reduce__(self):
        return (os.system, (CMD,))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def op_str(s):
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE


def stack_global_call(module, name, arg):
    """Protocol 4: module name STACK_GLOBAL, (arg,) REDUCE."""
    return b"\x80\x04" + op_str(module) + op_str(name) + b"\x93" + op_str(arg) + b"\x85R."


def bare_pickles(out):
    write(os.path.join(out, "bare_p0.pkl"), b"cposix\nsystem\n(S'" + CMD.encode() + b"'\ntR.")
    # Protocol 1: GLOBAL, MARK, BINUNICODE, TUPLE, REDUCE.
    b = CMD.encode()
    write(os.path.join(out, "bare_p1.pkl"), b"cposix\nsystem\n(X" + struct.pack("<I", len(b)) + b + b"tR.")
    write(os.path.join(out, "dotted_serialization_os.pkl"), stack_global_call("torch.serialization", "os.system", CMD))
    write(os.path.join(out, "dotted_tempfile_os.pkl"), stack_global_call("tempfile", "_os.system", CMD))
    write(os.path.join(out, "dotted_torch_os.pkl"), stack_global_call("torch", "os.system", CMD))
    inner = pickle.dumps(Pwn(), protocol=2)
    write(os.path.join(out, "pickle_loads.pkl"), b"\x80\x04" + op_str("pickle") + op_str("loads") + b"\x93"
          + b"C" + bytes([len(inner)]) + inner + b"\x85R.")
    write(os.path.join(out, "osx_support.pkl"), stack_global_call("_osx_support", "_read_output", CMD))
    write(os.path.join(out, "collect_env.pkl"), stack_global_call("torch.utils.collect_env", "run", CMD))


def legacy_stream(magic_pickle):
    """A legacy torch.save stream with the given magic-number pickle and a payload object."""
    return (magic_pickle + pickle.dumps(1001, protocol=2)
            + pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
            + pickle.dumps({"x": Pwn()}, protocol=2) + pickle.dumps([], protocol=2))


def legacy(out):
    # Clean: torch's own legacy writer with pickle protocol 4 (the magic number in a FRAME).
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "step": 3}, os.path.join(out, "legacy_p4_clean.pt"),
               _use_new_zipfile_serialization=False, pickle_protocol=4)
    write(os.path.join(out, "legacy_frame.pt"), legacy_stream(pickle.dumps(MAGIC, protocol=4)))
    write(os.path.join(out, "legacy_textlong.pt"), legacy_stream(b"L" + str(MAGIC).encode() + b"L\n."))


def rezip(src, dst, deflate=(), extra=()):
    """Copy a torch.save zip record by record, deflating the named records, adding extras."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            method = zipfile.ZIP_DEFLATED if any(info.filename.endswith(d) for d in deflate) else zipfile.ZIP_STORED
            zout.writestr(zipfile.ZipInfo(info.filename), data, compress_type=method)
        for name, data in extra:
            zout.writestr(zipfile.ZipInfo(name), data)


def zips(out):
    tmp = os.path.join(out, "tmp.pt")
    torch.save({"w": torch.arange(4.0), "x": Pwn()}, tmp)
    rezip(tmp, os.path.join(out, "deflated.pt"), deflate=["data.pkl"])
    torch.save({"w": torch.arange(4.0)}, tmp)
    rezip(tmp, os.path.join(out, "escaped.pt"), extra=[("../../escaped.txt", b"escaped\n")])
    os.remove(tmp)


def dcp_save(path, state):
    import torch.distributed.checkpoint as dcp
    dcp.save(state, storage_writer=dcp.FileSystemWriter(path), no_dist=True)


def relayout(path, replace):
    """Rewrite a DCP folder's data files item by item, replacing the bytes of items for
    which replace(fqn, bytes) returns new bytes, and the storage entries to match."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    with open(os.path.join(path, ".metadata"), "rb") as f:
        md = pickle.load(f)
    by_file = {}
    for idx, info in md.storage_data.items():
        by_file.setdefault(info.relative_path, []).append((info.offset, idx, info))
    for rel, entries in by_file.items():
        with open(os.path.join(path, rel), "rb") as f:
            data = f.read()
        outb = bytearray()
        for off, idx, info in sorted(entries, key=lambda e: e[0]):
            b = data[info.offset:info.offset + info.length]
            b = replace(idx.fqn, b) or b
            md.storage_data[idx] = _StorageInfo(rel, len(outb), len(b), info.transform_descriptors)
            outb += b
        write(os.path.join(path, rel), bytes(outb))
    with open(os.path.join(path, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def dcps(out):
    p0 = b"cposix\nsystem\n(S'" + CMD.encode() + b"'\ntR."
    path = os.path.join(out, "dcp_meta_p0")
    dcp_save(path, {"w": torch.arange(4.0), "step": 3})
    write(os.path.join(path, ".metadata"), p0)

    path = os.path.join(out, "dcp_bytes_p0")
    dcp_save(path, {"w": torch.arange(4.0), "step": 3})
    relayout(path, lambda fqn, b: p0 if fqn == "step" else None)

    # A tensor whose bytes hold an end-of-central-directory record, then a bytes item that
    # is a payload archive: locating archives by the first end signature misses it.
    path = os.path.join(out, "dcp_hidden")
    eocd = b"PK\x05\x06" + bytes(16) + b"\x00\x00"
    dcp_save(path, {"a": torch.frombuffer(bytearray(eocd * 4), dtype=torch.uint8), "z": "placeholder"})
    buf = io.BytesIO()
    torch.save(Pwn(), buf)
    relayout(path, lambda fqn, b: buf.getvalue() if fqn == "z" else None)


def bombs(out):
    t = ()
    for _ in range(48):
        t = (t, t)
    torch.save({"bomb": t}, os.path.join(out, "bomb_tuple.pt"))
    l = []
    for _ in range(48):
        l = [l, l]
    torch.save({"bomb": l}, os.path.join(out, "bomb_list.pt"))
    x = torch.zeros(2)
    for _ in range(48):
        x = (x, x)
    torch.save({"bomb": x}, os.path.join(out, "bomb_tensor.pt"))
    m = torch.nn.Linear(2, 2)
    for _ in range(48):
        m = torch.nn.Sequential(m, m)
    torch.save(m, os.path.join(out, "bomb_module.pt"))
    torch.save({"x": torch.zeros(1).expand(2**36)}, os.path.join(out, "expand.pt"))
    deep_from_type(os.path.join(out, "deep_from_type.pt"), 3_000_000)
    deep_from_type(os.path.join(out, "deep_from_type_1m.pt"), 1_000_000)


def torch_zip(path, pkl, records=()):
    """A zip written by torch's own archive writer with the given data.pkl."""
    w = torch._C.PyTorchFileWriter(path)
    w.write_record("data.pkl", pkl, len(pkl))
    for name, data in records:
        w.write_record(name, data, len(data))
    w.write_record("byteorder", b"little", 6)
    w.write_end_of_file()


def deep_from_type(path, depth):
    """_rebuild_from_type_v2(_rebuild_from_type_v2, Tensor, (… depth times …), None).

    The argument tuples are built innermost first through the memo, so the pickle never
    nests MARKs: args(i+1) = (fn, cls, args(i), None); one REDUCE calls fn(*args(depth)),
    which torch unwinds by recursion (RecursionError) and a naive reader by recursion too."""
    body = bytearray(b"\x80\x04")
    body += op_str("torch._tensor") + op_str("_rebuild_from_type_v2") + b"\x93\x940"  # memo 0
    body += op_str("torch") + op_str("Tensor") + b"\x93\x940"  # memo 1
    body += b")q\x020"  # memo 2: ()
    body += b"(h\x00h\x01h\x02Ntq\x020" * depth  # memo 2: (fn, cls, memo 2, None)
    body += b"h\x00h\x02R."
    torch_zip(path, bytes(body))


def big(out):
    # A 4-element tensor whose deflated data/0 inflates to 2 GiB.
    tmp = os.path.join(out, "tmp.pt")
    torch.save({"w": torch.arange(4.0)}, tmp)
    dst = os.path.join(out, "deflated_bomb.pt")
    with zipfile.ZipFile(tmp) as zin, zipfile.ZipFile(dst, "w", allowZip64=True) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data/0"):
                zi = zipfile.ZipInfo(info.filename)
                zi.compress_type = zipfile.ZIP_DEFLATED
                with zout.open(zi, "w", force_zip64=True) as w:
                    w.write(data)
                    chunk = bytes(1 << 24)
                    for _ in range((2 << 30) // len(chunk)):
                        w.write(chunk)
            else:
                zout.writestr(zipfile.ZipInfo(info.filename), data)
    os.remove(tmp)
    from safetensors.torch import save_file
    # One real weight beside them: a checkpoint of placeholders only is refused by convert.
    many = {f"model.layers.{i}.w": torch.empty(0) for i in range(300_000)}
    many["model.norm.w"] = torch.ones(4)
    save_file(many, os.path.join(out, "many_tensors.safetensors"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    bare_pickles(out)
    legacy(out)
    zips(out)
    dcps(out)
    bombs(out)
    if "--big" in sys.argv:
        big(out)


if __name__ == "__main__":
    main()
