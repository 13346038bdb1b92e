"""The wheel's console scripts: `llmc-opt`, `llmc-run`, `llmc-compile` and
`llmc-serve` run the tools packaged in llmc/bin/ (next to
llmc/lib/libllmc.so, which they load through their $ORIGIN/../lib run path). A checkout's tools are
build/bin/llmc-*."""

import os
import sys
from pathlib import Path


def _exec(name: str) -> None:
    path = Path(__file__).resolve().parent / "bin" / name
    if not path.is_file():
        sys.exit(f"{name}: not part of this llmc installation (no {path}); the "
                 "wheel built from the repository root (pip install .) holds it, "
                 f"and a built checkout has build/bin/{name}")
    os.execv(str(path), [str(path)] + sys.argv[1:])


def llmc_opt() -> None:
    _exec("llmc-opt")


def llmc_run() -> None:
    _exec("llmc-run")


def llmc_compile() -> None:
    _exec("llmc-compile")


def llmc_serve() -> None:
    _exec("llmc-serve")
