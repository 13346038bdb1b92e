"""llmc's version is one string everywhere: CMake's project(llmc VERSION),
the Python package (llmc/_version.py, read by pyproject.toml), the C API's
llmc_version() and the tools' --version; a libllmc.so of another version is
refused with a reason instead of being called with a different ABI."""

import re
import subprocess
from importlib import metadata

import pytest

import llmc
from llmc import _capi

from conftest import LLMC_OPT, REPO


def _cmake_project_version() -> str:
    text = (REPO / "CMakeLists.txt").read_text()
    m = re.search(r"project\(llmc VERSION (\d+\.\d+\.\d+)", text)
    assert m, "CMakeLists.txt: no project(llmc VERSION X.Y.Z)"
    return m.group(1)


def test_python_package_is_the_cmake_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", llmc.__version__)
    assert llmc.__version__ == _cmake_project_version()
    # The installed distribution's metadata comes from llmc/_version.py.
    assert metadata.version("llmc") == llmc.__version__


def test_library_reports_the_package_version():
    ok, why = _capi.available()
    if not ok:
        pytest.skip(why)
    assert _capi.library_version() == llmc.__version__


@pytest.mark.parametrize("tool", ["llmc-opt", "llmc-compile", "llmc-run"])
def test_tools_print_the_version(tool):
    exe = LLMC_OPT.parent / tool
    if not exe.exists():
        pytest.skip(f"{exe} is not built")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[0] == f"llmc version {llmc.__version__}"


def test_a_library_of_another_version_is_refused(monkeypatch):
    ok, why = _capi.available()
    if not ok:
        pytest.skip(why)
    monkeypatch.setattr(_capi, "__version__", "99.0.0")
    _capi._reset_for_tests()
    try:
        with pytest.raises(_capi.LibraryNotFound,
                           match=rf"llmc {re.escape(llmc.__version__)}; this package is llmc 99\.0\.0"):
            _capi.load()
    finally:
        monkeypatch.undo()
        _capi._reset_for_tests()
    assert _capi.available()[0]
