#!/usr/bin/env python3
"""Writes the C1 input tensors (raw little-endian float32) into DIR:
c1_x.f32 ([3, 7, 4096]: row block 0 ~ N(0,1), block 1 ~ N(0,1) scaled so
|x| ~ 300, block 2 constant 1e-6) and c1_tiny.f32 ([3, 5], all 1e-10)."""
import os
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(2026)
x = rng.standard_normal((3, 7, 4096)).astype(np.float32)
x[1] = np.sign(x[1]) * (300.0 + rng.random((7, 4096)).astype(np.float32))
x[2] = 1e-6
x.tofile(os.path.join(out, "c1_x.f32"))
np.full((3, 5), 1e-10, dtype=np.float32).tofile(os.path.join(out, "c1_tiny.f32"))
