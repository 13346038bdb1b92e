"""Checks an installed llmc wheel from outside the checkout (scripts/test-wheel.sh
runs it with a fresh virtual environment's Python, in an empty directory).

* the package and libllmc.so are the wheel's, not a checkout's;
* libllmc.so exports only the C API (llmc_*) and the C++ API (llmc::Compiler,
  llmc::JitFunction, llmc::rt::*, the tools' entry points), per nm;
* libllmc.so's shared-library needs are the C/C++ runtime and what the wheel
  itself holds (the Abseil libraries auditwheel vendored), nothing else;
* torch.compile(backend="llmc") finds the library (no fallback warning) and
  compiles a tiny model: the report counts a compile, and on a CPU the
  subgraph runs in PyTorch with eager's results;
* the console scripts run the packaged tools.

Exits non-zero with the failed check's message.
"""

import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

import llmc
import llmc.backend
from llmc import _capi

PREFIX = Path(sys.prefix).resolve()


def check(cond, message):
    if not cond:
        sys.exit(f"check_installed: FAILED: {message}")
    print(f"check_installed: ok: {message}")


pkg = Path(llmc.__file__).resolve().parent
check(PREFIX in pkg.parents, f"llmc imported from the environment ({pkg})")
ok, where = _capi.available()
check(ok, f"libllmc.so loads: {where}")
lib = Path(where).resolve()
check(lib == pkg / "lib" / "libllmc.so", f"libllmc.so is the wheel's ({lib})")
check(_capi.library_version() == llmc.__version__,
      f"library version {_capi.library_version()} == package version {llmc.__version__}")

# --- exports ---------------------------------------------------------------
nm = subprocess.run(["nm", "-D", "--defined-only", "-C", str(lib)],
                    capture_output=True, text=True, check=True).stdout.splitlines()
symbols = [line.split(" ", 2)[2] for line in nm if line.count(" ") >= 2]
allowed = re.compile(
    r"^(llmc_\w+"
    r"|(typeinfo for |typeinfo name for |vtable for |guard variable for )?"
    r"llmc::(Compiler|JitFunction|ServingStepFactory|optMain|runMain|compileMain|serveMain|rt::)\S*.*)$")
stray = [s for s in symbols if not allowed.match(s)]
check(not stray, f"{len(symbols)} exported symbols, all llmc_* or the C++ API"
                 + (f"; stray: {stray[:10]}" if stray else ""))
c_api = [s for s in symbols if s.startswith("llmc_")]
check(len(c_api) >= 25 and "llmc_compile" in c_api, f"{len(c_api)} C API functions exported")
for ns in ("mlir::", "llvm::", "absl::", "llmc::llm::"):
    check(not any(ns in s.split("(")[0] for s in symbols), f"no {ns} symbol exported")

# --- shared-library needs ----------------------------------------------------
needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                    subprocess.run(["readelf", "-d", str(lib)], capture_output=True,
                                   text=True, check=True).stdout)
system = re.compile(r"^(libstdc\+\+|libm|libc|libgcc_s|libdl|libpthread|librt|ld-linux)")
vendored = [n for n in needed if not system.match(n)]
libs_dirs = [d for d in pkg.parent.iterdir() if d.name.endswith(".libs")]
held = {p.name for d in libs_dirs for p in d.iterdir()}
check(all(n in held for n in vendored),
      f"libllmc.so needs {len(needed)} libraries; the {len(vendored)} beyond the C/C++ "
      f"runtime are in the wheel ({', '.join(sorted(vendored)[:3])}...)")
ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, check=True).stdout
check("not found" not in ldd, "every needed library resolves")
resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
outside = [f"{n} => {resolved.get(n)}" for n in vendored
           if PREFIX not in Path(resolved.get(n, "/")).resolve().parents]
check(not outside, "Abseil and every other non-runtime library load from the wheel, "
                   f"not the system ({outside[:2]})")

# --- torch.compile ---------------------------------------------------------
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
x = torch.randn(4, 16)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.no_grad():
        got = torch.compile(model, backend="llmc")(x)
        want = model(x)
lib_warnings = [str(w.message) for w in caught if "libllmc" in str(w.message)]
check(not lib_warnings, f"no missing-library warning ({lib_warnings[:1]})")
rep = llmc.backend.last_report()
check(rep is not None and rep.compiles >= 1 and not rep.compile_failures,
      f"the backend compiled the graph through libllmc.so: {rep.compiles if rep else 0} "
      f"compile(s), failures {rep.compile_failures if rep else None}")
err = float((got - want).norm() / want.norm())
check(err <= 1e-5, f"results match eager (relative L2 error {err:.1e} <= 1e-5)")
if not torch.cuda.is_available():
    check(rep.eager_runs >= 1, "without a GPU the compiled subgraph runs in PyTorch")

# --- console scripts ---------------------------------------------------------
bindir = Path(sys.executable).parent
for tool in ("llmc-opt", "llmc-run", "llmc-compile", "llmc-serve"):
    exe = shutil.which(tool, path=str(bindir))
    check(exe is not None, f"{tool} is installed in {bindir}")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    check(out.returncode == 0 and f"llmc version {llmc.__version__}" in out.stdout,
          f"{tool} --version runs the packaged tool: {out.stdout.splitlines()[:1]}")
with tempfile.TemporaryDirectory() as tmp:
    src = Path(tmp) / "add.mlir"
    src.write_text("func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
                   "  %0 = llm.add %a, %b : tensor<4x8xf32>\n"
                   "  return %0 : tensor<4x8xf32>\n}\n")
    out = subprocess.run([shutil.which("llmc-opt", path=str(bindir)), str(src)],
                         capture_output=True, text=True)
    check(out.returncode == 0 and "llm.add" in out.stdout,
          f"llmc-opt parses the llm dialect ({out.stderr.strip()[:200]})")
print("check_installed: all checks passed")
