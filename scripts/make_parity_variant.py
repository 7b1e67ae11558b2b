#!/usr/bin/env python3
"""Writes a second set of PyTorch parity cases with other shapes and settings than the standard
set (odd sizes, 3 heads, GELU, 3 layers, a length-1 source, tgt != src lengths), so that the
parity runner is checked on more than the shapes it was first written for.

Uses make_cases() from the shared generator (../shared/parity/make_parity.py by default); needs
Debian's python3-torch:  /usr/bin/python3 scripts/make_parity_variant.py tests/parity/variant
"""
import os, sys

import parity_generator  # scripts/parity_generator.py (the script's folder is on sys.path)

make_parity = parity_generator.load()

VARIANT = dict(B=2, L=6, S=3, D=24, H=3, out=5, vocab=17, ff=40, layers=3, activation="gelu",
               src_lengths=[3, 1], tgt_lengths=[6, 2])

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/variant"
    os.makedirs(out, exist_ok=True)
    make_parity.make_cases(out, 4321, VARIANT)
