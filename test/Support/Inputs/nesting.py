"""Writes an MLIR source nesting N levels deep to stdout, for the nesting-limit
tests: python3 nesting.py KIND N.

KIND: modules (nested builtin.module), arrays (nested array attributes),
attr-aliases / type-aliases (a chain of N aliases, each wrapping the
previous one), arrows (nested tuples of function
types, whose '->' closes nothing), integer-sets (nested arrays of
affine_set attributes, whose '>=' closes nothing).
"""
import sys

kind, n = sys.argv[1], int(sys.argv[2])
T = "tensor<4xf32>"
out = []
if kind == "modules":
    out += ["module {"] * n + ["}"] * n
elif kind == "arrays":
    out.append("module attributes {llm.deep = " + "[" * n + "]" * n + "} {}")
elif kind == "attr-aliases":
    out.append("#a0 = [1]")
    out += [f"#a{i} = [#a{i - 1}]" for i in range(1, n)]
    out.append(f"module attributes {{llm.deep = #a{n - 1}}} {{}}")
elif kind == "type-aliases":
    out.append("!t0 = tuple<f32>")
    out += [f"!t{i} = tuple<!t{i - 1}>" for i in range(1, n)]
    out.append(f"func.func private @f(!t{n - 1})")
elif kind == "arrows":
    out.append("func.func private @f(" + "tuple<(i32) -> i32, " * n + "i32" +
               ">" * n + ")")
elif kind == "integer-sets":
    s = "affine_set<(d0) : (d0 >= 0)>"
    out.append("module attributes {llm.deep = " + f"[{s}, " * n + "1" +
               "]" * n + "} {}")
else:
    sys.exit(f"unknown kind {kind!r}")
print("\n".join(out))
