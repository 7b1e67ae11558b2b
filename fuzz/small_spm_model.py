#!/usr/bin/env python3
"""Shrinks a SentencePiece model file (spm.model) into a small fuzz seed: the normalizer's
precompiled character map (about 240 KB of NFKC tables, most of a small model's bytes) is dropped
and the normalizer renamed "identity", which needs no map. Everything else (the pieces, their
scores and types, the trainer spec) stays, so the seed is still a model gradflow loads.

    python3 fuzz/small_spm_model.py RUN/spm.model fuzz/corpus/subwords/NAME

Works on the protobuf wire format directly (ModelProto field 3 is the NormalizerSpec, whose field 1
is its name and field 2 the precompiled map), so it needs no protobuf or sentencepiece package.
"""
import sys


def varint(b, i):
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if c < 0x80:
            return value, i
        shift += 7


def put_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        out.append(c | (0x80 if v else 0))
        if not v:
            return bytes(out)


def fields(b):
    """(field number, wire type, raw bytes of the whole field) for each field of a message."""
    i = 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(b, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            n, i = varint(b, i)
            i += n
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire} at byte {start}")
        yield number, wire, b[start:i]


def payload(raw):
    _, i = varint(raw, 0)
    _, i = varint(raw, i)
    return raw[i:]


def delimited(number, data):
    return put_varint((number << 3) | 2) + put_varint(len(data)) + data


def main():
    model = open(sys.argv[1], "rb").read()
    out = bytearray()
    for number, wire, raw in fields(model):
        if number == 3 and wire == 2:  # NormalizerSpec
            spec = bytearray(delimited(1, b"identity"))
            for n, _, r in fields(payload(raw)):
                if n not in (1, 2):  # not the name, not the precompiled map
                    spec += r
            out += delimited(3, bytes(spec))
        else:
            out += raw
    open(sys.argv[2], "wb").write(out)
    print(f"{sys.argv[1]}: {len(model)} bytes -> {sys.argv[2]}: {len(out)} bytes")


if __name__ == "__main__":
    main()
