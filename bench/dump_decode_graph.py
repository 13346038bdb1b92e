#!/usr/bin/env python3
"""Dumps the llmc decode graph of a gpt-fast-style model (test/python/gpt_fast.py)
on the CPU, with the llmc-run input files that make it a real decode step,
so a GPU round can time it launch by launch without PyTorch:

    python3 bench/dump_decode_graph.py OUT_DIR [--layers 2 --dim 4096 --heads 32 --ffn 11008 --pos 150]
    llmc-run OUT_DIR/decode.mlir --bench $(cat OUT_DIR/inputs.args)    # on the GPU machine

torch.compile(backend="llmc") compiles the prefill and decode graphs on the
CPU (the subgraphs then run in PyTorch); the decode graph's IR goes to
OUT_DIR/decode.mlir. inputs.args names the causal-mask buffer (tril.bin,
one byte per element), the position (pos.i64) and the token (tok.i64)
arguments; weights and KV caches stay llmc-run's random inputs.
"""
import argparse
import glob
import os
import re
import shutil
import sys
import tempfile
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "python"))
from gpt_fast import GptFast, generate  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-seq", type=int, default=2048)
    ap.add_argument("--pos", type=int, default=150, help="position of the decoded token")
    args = ap.parse_args()
    import llmc.backend  # noqa: F401  (registers the backend)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    model = GptFast(vocab=args.vocab, dim=args.dim, heads=args.heads, ffn=args.ffn,
                    layers=args.layers, max_seq=args.max_seq, dtype=torch.bfloat16)
    dump = tempfile.mkdtemp()
    cm = torch.compile(model, backend="llmc", dynamic=False, options={"dump_dir": dump})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        generate(cm, torch.randint(0, 1000, (1, 8)), 2)
    graphs = sorted(glob.glob(os.path.join(dump, "g*_inference.llmc_0.mlir")),
                    key=lambda p: int(os.path.basename(p)[1:].split("_")[0]))
    if len(graphs) != 2:
        sys.exit(f"expected a prefill and a decode graph in {dump}, found {graphs}")
    decode = os.path.join(args.out, "decode.mlir")
    shutil.copy(graphs[1], decode)
    text = open(decode).read()

    def arg_of(ty):
        m = re.findall(r"%arg(\d+): tensor<" + re.escape(ty) + ">", text)
        if len(m) != 1:
            sys.exit(f"expected one argument of type tensor<{ty}> in {decode}, found {m}")
        return m[0]

    s = args.max_seq
    np.tril(np.ones((s, s), dtype=np.uint8)).tofile(os.path.join(args.out, "tril.bin"))
    np.array([args.pos], dtype=np.int64).tofile(os.path.join(args.out, "pos.i64"))
    np.array([[123]], dtype=np.int64).tofile(os.path.join(args.out, "tok.i64"))
    out = os.path.abspath(args.out)
    with open(os.path.join(args.out, "inputs.args"), "w") as f:
        f.write(f"--input=arg{arg_of(f'{s}x{s}xi1')}={out}/tril.bin "
                f"--input=arg{arg_of('1xi64')}={out}/pos.i64 "
                f"--input=arg{arg_of('1x1xi64')}={out}/tok.i64\n")
    print(f"wrote {decode} and its inputs ({open(os.path.join(args.out, 'inputs.args')).read().strip()})")


if __name__ == "__main__":
    main()
