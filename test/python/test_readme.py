"""Every file README.md and python/README.md point a newcomer to exists: the
paths in links and in `code` spans, and the scripts of the shell blocks (the
two commands)."""

import re

import pytest

from conftest import REPO

TOP = ("scripts", "docs", "python", "examples", "test", "lib", "include", "runtime",
       "dialects", "bench", "tools", ".ci", "llmc")  # llmc/: python/README's own


def _referenced_paths(md: str):
    for target in re.findall(r"\]\(([^)#\s]+)\)", md):
        if not re.match(r"[a-z]+://", target):
            yield target
    for span in re.findall(r"`([^`\n]+)`", md):
        for word in span.split():
            word = word.rstrip(".,;:)")
            placeholder = re.search(r"[*<>${}]|\b[A-Z]{2,}\b", word)  # NAME, DIR, <x>
            if word.startswith(TOP) and "/" in word and not placeholder:
                yield word
    for block in re.findall(r"```sh\n(.*?)```", md, re.S):
        yield from re.findall(r"\b((?:scripts|bench)/[\w./-]+\.(?:sh|py))", block)


@pytest.mark.parametrize("readme", ["README.md", "python/README.md"])
def test_every_referenced_path_exists(readme):
    path = REPO / readme
    md = path.read_text()
    paths = sorted(set(_referenced_paths(md)))
    assert paths, f"{readme}: found no path references (is the pattern wrong?)"
    base = path.parent
    missing = [p for p in paths
               if not (base / p).exists() and not (REPO / p).exists()]
    assert not missing, f"{readme} refers to files that do not exist: {missing}"


# Variables the sources read: string literals of the C++ and Python sources,
# ${LLMC_...} in the scripts, os.environ in the tests and benchmarks.
_ENV_PATTERNS = (
    (("lib", "runtime", "include", "python/llmc"), ("*.cpp", "*.h", "*.py"), r'"(LLMC_[A-Z0-9_]+)"'),
    (("scripts", ".ci"), ("*.sh", "run"), r"\$\{?(LLMC_[A-Z0-9_]+)"),
    (("test/python", "bench"), ("*.py",), r'environ(?:\.get)?[(\[]"(LLMC_[A-Z0-9_]+)"'),
    (("test/unit", "tools", "dialects"), ("*.cpp", "*.h"), r'getenv\("(LLMC_[A-Z0-9_]+)"\)'),
)
# Names in quotes that are not variables: generated kernel code.
_NOT_VARIABLES = {"LLMC_INF", "LLMC_NAN"}


def test_readme_table_names_every_environment_variable():
    read = set()
    for dirs, globs, pattern in _ENV_PATTERNS:
        for d in dirs:
            for g in globs:
                for f in (REPO / d).rglob(g):
                    read |= set(re.findall(pattern, f.read_text(errors="replace")))
    read -= _NOT_VARIABLES
    assert {"LLMC_CACHE_DIR", "LLMC_GEMV_UNROLL", "LLMC_PDL", "LLMC_CHECK"} <= read, read
    md = (REPO / "README.md").read_text()
    table = md[md.index("## Environment variables"):]
    table = table[:table.index("\n## ")]
    missing = sorted(v for v in read if f"`{v}`" not in table)
    assert not missing, f"README.md's environment table lacks {missing}"
