#!/usr/bin/env python3
"""Writes a small copy of a safetensors file for a fuzz seed: its metadata and its smallest tensors
(fewest bytes first, then name order) while they fit in MAX_DATA_BYTES, at least one; offsets are
renumbered and the header padded to 8 bytes as gradflow's writer does.
    python3 fuzz/trim_safetensors.py IN.safetensors OUT.safetensors [MAX_DATA_BYTES=600]"""
import json
import struct
import sys


def main():
    src, dst = sys.argv[1], sys.argv[2]
    budget = int(sys.argv[3]) if len(sys.argv) > 3 else 600
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    by_size = sorted(header.items(), key=lambda kv: (kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0], kv[0]))
    kept, used = [], 0
    for name, e in by_size:
        size = e["data_offsets"][1] - e["data_offsets"][0]
        if kept and used + size > budget:
            break
        kept.append((name, e))
        used += size
    out_header, chunks, offset = {}, [], 0
    if meta is not None:
        out_header["__metadata__"] = meta
    for name, e in sorted(kept):
        b, end = e["data_offsets"]
        out_header[name] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [offset, offset + end - b]}
        chunks.append(data[b:end])
        offset += end - b
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


if __name__ == "__main__":
    main()
