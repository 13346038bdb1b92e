"""scripts/fuzz.py, the CI fuzzer: outcome classification, determinism of the
mutants, the mutators on degenerate inputs, and the delta minimizer. The
fuzz run itself is a step of scripts/test.sh."""

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import fuzz  # noqa: E402


@pytest.mark.parametrize("rc, stderr, kind", [
    (0, "", "ok"),
    (1, "f.mlir:1:2: error: 'llm.add' op operand types differ", "error"),
    (1, "", "silent"),
    (None, "", "timeout"),
    (-24, "", "timeout"),  # SIGXCPU: the CPU-time limit
    (-11, "Stack dump:\n", "crash"),
    (-6, "", "crash"),
    (-6, "LLVM ERROR: out of memory\nAllocation failed", "oom"),
    (1, "error: internal error (please report): x", "internal"),
    (1, "llmc-run: error: LLVM ERROR: foo", "internal"),
    (1, "terminate called after throwing an instance of 'std::length_error'",
     "internal"),
    (1, "a.cpp:3:9: runtime error: signed integer overflow", "sanitizer"),
    (1, "==7==ERROR: AddressSanitizer: heap-use-after-free on address",
     "sanitizer"),
    (1, "==7==ERROR: AddressSanitizer: hard rss limit exhausted (4096Mb)",
     "oom"),
    (1, "error: 'llm.constant' needs 4 TiB; llmc's limit is 1 GiB, "
        "out of memory", "error"),
])
def test_classify(rc, stderr, kind):
    assert fuzz.classify(rc, stderr)[0] == kind


def test_crash_signature_names_the_first_llmc_frame():
    stderr = ("Stack dump:\n #0 0x1 llvm::sys::PrintStackTrace(int) (a.so)\n"
              " #4 0x2 llmc::reference::RankState::gather(int) (libllmc.so)\n")
    assert fuzz.classify(-11, stderr) == (
        "crash", "SIGSEGV in llmc::reference::RankState::gather")


def test_mutants_are_deterministic():
    seeds = fuzz.load_seeds(fuzz.ROOT)
    pools = fuzz.Pools(seeds)
    for i in range(50):
        a = fuzz.mutate(random.Random(f"14:{i}"), seeds[i % len(seeds)], pools)
        b = fuzz.mutate(random.Random(f"14:{i}"), seeds[i % len(seeds)], pools)
        assert a == b


def test_seeds_drop_run_lines_and_split_chunks():
    seeds = fuzz.load_seeds(fuzz.ROOT)
    assert len(seeds) > 100
    assert not any("RUN:" in s.text or "CHECK" in s.text for s in seeds)
    assert any(s.name.startswith("test/Dialect/LLM/invalid.mlir#") for s in seeds)


def test_every_mutator_handles_empty_and_tiny_inputs():
    pools = fuzz.Pools(fuzz.load_seeds(fuzz.ROOT))
    for text in ["", "x", "\n", "%"]:
        for i in range(20):
            for _, mutator in fuzz.MUTATORS:
                mutator(random.Random(i), text, pools)


def test_minimize_keeps_only_the_lines_that_reproduce():
    lines = [f"line {i}" for i in range(40)]
    lines[7] = "BAD"
    lines[31] = "WORSE"
    out = fuzz.minimize("\n".join(lines),
                        lambda t: "BAD" in t and "WORSE" in t,
                        max_tests=500, deadline=float("inf"))
    assert out.split("\n") == ["BAD", "WORSE"]
