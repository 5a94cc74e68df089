"""For codec's Float32s test: torch's t.float() of every tensor of a fixture, as the
SHA-256 of the float32 little-endian bytes, one "name sha256" line each. Tensors torch cannot
convert with .float() (complex, quantized, bits, uint1-7) are skipped; float4_e2m1fn_x2 is
unpacked through its nibbles (torch has no float() for it)."""
import hashlib, sys, torch

sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
for name, t in sd.items():
    if not isinstance(t, torch.Tensor):
        continue
    try:
        if t.dtype == torch.float4_e2m1fn_x2:
            b = t.contiguous().view(torch.uint8).flatten().tolist()
            f = torch.tensor([E2M1[v] for x in b for v in (x & 15, x >> 4)], dtype=torch.float32)
        else:
            if t.is_complex() or t.is_quantized:
                continue
            f = t.float().contiguous()
    except (RuntimeError, TypeError, NotImplementedError):
        continue
    print(name, hashlib.sha256(f.numpy().tobytes()).hexdigest())
