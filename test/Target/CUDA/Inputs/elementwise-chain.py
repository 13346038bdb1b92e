"""Prints a function that is one chain of N elementwise ops, for the fusion
bound tests (fusion-bounds.mlir).

usage: elementwise-chain.py OP N [--distinct-inputs | --splat-inputs]

OP is an llm elementwise op; binary ops take the previous value and an
argument (%y), with --distinct-inputs a fresh argument per op, with
--splat-inputs a fresh splat constant per op.
"""
import sys

op, n = sys.argv[1], int(sys.argv[2])
distinct = "--distinct-inputs" in sys.argv[3:]
splats = "--splat-inputs" in sys.argv[3:]
binary = op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
t = "tensor<4x4096xbf16>"
args = [f"%x: {t}"]
if binary and not splats:
    args += [f"%y{i}: {t}" for i in range(n)] if distinct else [f"%y: {t}"]
print(f"func.func @chain_of_{n}_{op}({', '.join(args)}) -> {t} {{")
prev = "%x"
for i in range(n):
    if binary and splats:
        print(f"  %c{i} = llm.constant dense<{i + 2}.0> : {t}")
    if binary:
        other = f"%c{i}" if splats else f"%y{i}" if distinct else "%y"
        print(f"  %v{i} = llm.{op} {prev}, {other} : {t}")
    else:
        print(f"  %v{i} = llm.{op} {prev} : {t}")
    prev = f"%v{i}"
print(f"  return {prev} : {t}")
print("}")
