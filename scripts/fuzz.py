#!/usr/bin/env python3
"""Mutation fuzzer for llmc's tools (issue 14: no crash on any input).

Seeds are the examples (examples/*.mlir), the shared cases (test/cases/*.mlir)
and the lit inputs (test/**/*.mlir, split at `// -----`, without their RUN,
CHECK and other comment lines). Each mutant is a seed with one to three
mutations that matter for this compiler (dimensions, element types, attribute
values, operands, lines deleted/duplicated/spliced from other seeds, op names,
nesting, truncation, byte flips, --shape bindings), run through one target:

  opt      llmc-opt with one of a few pass pipelines, or one pass option out
           of range
  run      llmc-run --backend=ref --ref-max-memory=1 --ref-max-gmacs=2 with --shape bindings
           (mostly small seeds)
  compile  llmc-compile --arch=sm_90a -o FILE (NVRTC runs without a GPU)

Every run is a subprocess in its own process group under resource limits:
address space (--memory-mb, 4 GiB), CPU time (20 s opt, 30 s run, 90 s
compile) with a wall clock of three times that plus 10 s, file size, no core
files. Outcomes:

  ok           exit 0
  error        nonzero exit with a diagnostic ("error:"): a clean error
  crash        killed by SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL
  internal     "internal error", "please report", "LLVM ERROR", an assertion,
               "UNREACHABLE", "terminate called", an escaping std:: exception
  sanitizer    an AddressSanitizer / UndefinedBehaviorSanitizer report
  timeout      past the wall-clock or CPU limit
  oom          the address-space limit was hit (an allocation failed)
  silent       nonzero exit without any diagnostic

Everything but ok and error is a failure: the input is minimized (line-based
delta reduction that keeps the outcome) and saved under --out with the
command that reproduces it, and the exit status is 1. A resource limit that
llmc itself enforces is a diagnostic, hence a clean error.

Deterministic: on one tree, mutant i of seed S is the same on every run and
for any --jobs (its random generator is seeded with "S:i"; which seeds count
as valid, i.e. pass llmc-opt unchanged, depends on the tree).

  python3 scripts/fuzz.py --executions 3000 --jobs 2          # CI
  python3 scripts/fuzz.py --executions 1000000 --jobs 2       # long run
  python3 scripts/fuzz.py --tools build-asan/bin --sanitized  # ASan/UBSan tools
  python3 scripts/fuzz.py --seed 3 --replay 11186             # one mutant
"""

import argparse
import concurrent.futures
import hashlib
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FAILURES = ("crash", "internal", "sanitizer", "timeout", "oom", "silent")
KINDS = ("ok", "error") + FAILURES

# ---------------------------------------------------------------------------
# Seeds
# ---------------------------------------------------------------------------

SPLIT_MARKER = "// -----"
COMMENT_LINE = re.compile(r"^\s*//")
DIM_NAMES = re.compile(r"llm\.dim_names\s*=\s*\[([^\]]*)\]")
STATIC_SHAPE = re.compile(r"tensor<((?:\d+x)+)")


class Seed:
    def __init__(self, name, text):
        self.name = name
        self.text = text
        self.lines = text.split("\n")
        elements = [1]
        for m in STATIC_SHAPE.finditer(text):
            n = 1
            for d in m.group(1).rstrip("x").split("x"):
                n *= int(d)
            elements.append(n)
        # Small enough for the reference executor in milliseconds.
        self.small = max(elements) <= (1 << 18)


def load_seeds(root):
    files = sorted((root / "examples").glob("*.mlir"))
    files += sorted((root / "test" / "cases").glob("*.mlir"))
    files += sorted(p for p in (root / "test").rglob("*.mlir")
                    if "cases" not in p.relative_to(root / "test").parts)
    seeds, seen = [], set()
    for path in files:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
        for i, chunk in enumerate(text.split(SPLIT_MARKER)):
            body = "\n".join(line for line in chunk.split("\n")
                             if not COMMENT_LINE.match(line)).strip("\n")
            if not body.strip() or body in seen:
                continue
            seen.add(body)
            name = str(path.relative_to(root)) + (f"#{i}" if i else "")
            seeds.append(Seed(name, body + "\n"))
    return seeds


class Pools:
    """Material the mutators draw from: op lines, op names, attributes."""

    def __init__(self, seeds):
        self.op_lines, ops, attrs = [], set(), set()
        for s in seeds:
            for line in s.lines:
                if re.search(r"=\s*llm\.\w+", line):
                    self.op_lines.append(line)
                ops.update(re.findall(r"\bllm\.[a-z_0-9]+\b", line))
                for d in re.findall(r"\{([^{}\n]*)\}", line):
                    for item in d.split(","):
                        item = item.strip()
                        if re.fullmatch(r"[a-z_]+(\s*=\s*[^,]+)?", item):
                            attrs.add(item)
        self.ops = sorted(ops)
        self.attrs = sorted(attrs)


# ---------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------

# Dimensions the parser accepts (most of them) and a few it must reject.
DIM_VALUES = ["0", "1", "3", "5", "16", "127", "?", str(2**31), str(2**40),
              str(2**62), str(2**63 - 1)] * 3 + [
              "-1", str(2**64), "99999999999999999999"]
ELEMENT_TYPES = ["f32", "bf16", "f16", "f64", "f8E4M3FN", "f8E5M2", "i1", "i8",
                 "i32", "i64", "index", "complex<f32>", "tf32", "ui8", "none"]
INTEGERS = ["0", "1", "-1", "2", "3", "7", "-7", "4096", str(2**31 - 1),
            str(2**31), str(2**32), str(2**40), str(2**62), str(2**63 - 1),
            str(-2**63)]
FLOATS = ["0.0", "-0.0", "1.0e-30", "1.0e+30", "1.0e+300", "-1.0e-05", "-2.5",
          "0x7FC00000", "0x7F800000", "0xFFFFFFFF", "1.0e+39"]
NEST_DEPTHS = [3, 50, 200, 255, 256, 257, 300, 2000, 5000, 10000]
BINDING_VALUES = ["0", "-1", str(2**31), str(2**40), str(2**62), str(2**63),
                  "99999999999999999999", "x", "", "1.5"]

TENSOR_TYPE = re.compile(r"tensor<[^<>\n]*>")
TENSOR_DIMS = re.compile(r"(?:[0-9?]+x)+")
ELEMENT_TYPE = re.compile(
    r"(?<=[x<])(?:f32|bf16|f16|f64|f8E4M3FN|f8E5M2|i1|i8|i16|i32|i64|index)"
    r"(?=[>,])")
NUMBER = re.compile(r"(?<![\w%#.@^$-])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")
SSA = re.compile(r"%[\w$.-]+(?:#\d+)?")
ARRAY = re.compile(r"\[[^\[\]\n]*\]")


def pick(rng, regex, text):
    matches = list(regex.finditer(text))
    return rng.choice(matches) if matches else None


def replace_span(text, start, end, new):
    return text[:start] + new + text[end:]


def mutate_dim(rng, text, pools):
    """One dimension of one tensor type, changed in every use of that type
    (mostly) so that the mutant still type-checks up to the verifiers."""
    m = pick(rng, TENSOR_TYPE, text)
    if not m or not TENSOR_DIMS.match(m.group(0), len("tensor<")):
        return None
    old = m.group(0)
    dims_match = TENSOR_DIMS.match(old, len("tensor<"))
    dims = dims_match.group(0).rstrip("x").split("x")
    dims[rng.randrange(len(dims))] = rng.choice(DIM_VALUES)
    if rng.random() < 0.1:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(["1", "2", "?"]))
    new = "tensor<" + "x".join(dims) + "x" + old[dims_match.end():]
    if rng.random() < 0.8:
        return text.replace(old, new)
    return replace_span(text, m.start(), m.end(), new)


def mutate_dim_value(rng, text, pools):
    """Every dimension of one size, in every tensor type, becomes another
    size: the program stays consistent (shapes still match) and reaches the
    lowering and the reference executor at an edge size (0, 1, a row of 2^20,
    an element count past int32 or int64)."""
    sizes = sorted({d for m in TENSOR_DIMS.finditer(text)
                    for d in m.group(0).rstrip("x").split("x")
                    if d.isdigit()} if "tensor<" in text else set())
    if not sizes:
        return None
    old = rng.choice(sizes)
    new = rng.choice(["0", "1", "2", "3", "7", "17", "4096", "65536",
                      str(2**20), str(2**31), str(2**40), str(2**62)])

    def retype(m):
        dims = m.group(0).rstrip("x").split("x")
        return "x".join(new if d == old else d for d in dims) + "x"
    return re.sub(r"(?<=tensor<)(?:[0-9?]+x)+", retype, text)


def mutate_element_type(rng, text, pools):
    """An element type, changed everywhere (mostly) or in one place."""
    m = pick(rng, ELEMENT_TYPE, text)
    if not m:
        return None
    new = rng.choice(ELEMENT_TYPES)
    if rng.random() < 0.7:
        return ELEMENT_TYPE.sub(
            lambda x: new if x.group(0) == m.group(0) else x.group(0), text)
    return replace_span(text, m.start(), m.end(), new)


def mutate_number(rng, text, pools):
    m = pick(rng, NUMBER, text)
    if not m:
        return None
    is_float = any(c in m.group(0) for c in ".eE")
    if rng.random() < 0.1:
        is_float = not is_float
    values = FLOATS if is_float else INTEGERS
    return replace_span(text, m.start(), m.end(), rng.choice(values))


def mutate_operands(rng, text, pools):
    lines = text.split("\n")
    candidates = [i for i, l in enumerate(lines)
                  if "=" in l and len(SSA.findall(l.split("=", 1)[1])) >= 1]
    if not candidates:
        return None
    i = rng.choice(candidates)
    lhs, rhs = lines[i].split("=", 1)
    uses = list(SSA.finditer(rhs))
    if len(uses) >= 2 and rng.random() < 0.5:
        a, b = rng.sample(uses, 2)
        if a.start() > b.start():
            a, b = b, a
        rhs = (rhs[:a.start()] + b.group(0) + rhs[a.end():b.start()] +
               a.group(0) + rhs[b.end():])
    else:
        # A value defined (or used) above: mostly a type or shape mismatch
        # for the verifiers rather than an undefined name for the parser.
        names = sorted(set(SSA.findall("\n".join(lines[:i])))) or \
            sorted(set(SSA.findall(text)))
        u = rng.choice(uses)
        rhs = replace_span(rhs, u.start(), u.end(), rng.choice(names))
    lines[i] = lhs + "=" + rhs
    return "\n".join(lines)


def mutate_lines(rng, text, pools):
    lines = text.split("\n")
    if len(lines) < 2:
        return None
    i = rng.randrange(len(lines))
    r = rng.random()
    if r < 0.4:
        del lines[i]
    elif r < 0.7:
        lines.insert(i, lines[i])
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def mutate_splice(rng, text, pools):
    """An op line from another seed, its operands renamed to values defined
    above the insertion point and its results to a fresh name."""
    lines = text.split("\n")
    at = rng.randrange(len(lines) + 1)
    lhs, rhs = rng.choice(pools.op_lines).split("=", 1)
    names = sorted(set(SSA.findall("\n".join(lines[:at]))))
    if names:
        rhs = SSA.sub(lambda m: rng.choice(names), rhs)
    lhs = SSA.sub("%fz_splice", lhs, count=1)
    lines.insert(at, lhs + "=" + rhs)
    return "\n".join(lines)


def mutate_op_name(rng, text, pools):
    m = pick(rng, re.compile(r"\bllm\.[a-z_0-9]+\b"), text)
    if not m:
        return None
    return replace_span(text, m.start(), m.end(), rng.choice(pools.ops))


def mutate_attribute(rng, text, pools):
    lines = text.split("\n")
    candidates = [i for i, l in enumerate(lines) if re.search(r"llm\.\w+", l)
                  and " : " in l]
    if not candidates or not pools.attrs:
        return None
    i = rng.choice(candidates)
    line = lines[i]
    m = re.search(r"\{([^{}]*)\}(?=[^{}]*:)", line)
    if m:
        items = [x.strip() for x in m.group(1).split(",") if x.strip()]
        r = rng.random()
        if r < 0.3 and items:
            del items[rng.randrange(len(items))]
        elif r < 0.6 and items:
            items[rng.randrange(len(items))] = rng.choice(pools.attrs)
        else:
            items.append(rng.choice(pools.attrs))
        line = replace_span(line, m.start(), m.end(),
                            "{" + ", ".join(items) + "}")
    else:
        at = line.index(" : ")
        line = line[:at] + " {" + rng.choice(pools.attrs) + "}" + line[at:]
    lines[i] = line
    return "\n".join(lines)


def mutate_dim_names(rng, text, pools):
    m = DIM_NAMES.search(text)
    new = rng.choice(['[]', '[1]', '["seq", "seq"]', '["x", "y", "z"]',
                      '["seq"]', '[""]', '["batch"]', '"seq"'])
    if m:
        return replace_span(text, m.start(), m.end(), "llm.dim_names = " + new)
    m = re.search(r"%\w+: tensor<[^>]*\?[^>]*>", text)
    if not m:
        return None
    return replace_span(text, m.end(), m.end(), " {llm.dim_names = " + new + "}")


def mutate_nesting(rng, text, pools):
    n = rng.choice(NEST_DEPTHS)
    r = rng.random()
    if r < 0.3:
        return "module {\n" * n + text + "}\n" * n
    if r < 0.6:
        m = pick(rng, ARRAY, text)
        if m:
            return replace_span(text, m.start(), m.end(),
                                "[" * n + m.group(0) + "]" * n)
    if r < 0.8:
        m = pick(rng, TENSOR_TYPE, text)
        if m:
            return replace_span(text, m.start(), m.end(),
                                "tuple<" * n + m.group(0) + ">" * n)
    chain = ["#fz0 = [1]"] + [f"#fz{i} = [#fz{i - 1}]" for i in range(1, n)]
    m = pick(rng, ARRAY, text)
    if not m:
        return "\n".join(chain) + "\n" + text
    return ("\n".join(chain) + "\n" +
            replace_span(text, m.start(), m.end(), f"[#fz{n - 1}]"))


def mutate_truncate(rng, text, pools):
    if len(text) < 2:
        return None
    return text[:rng.randrange(1, len(text))]


def mutate_bytes(rng, text, pools):
    chars = list(text)
    if not chars:
        return None
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(chars))
        b = rng.choice([0, 0xFF, 0x80, 0xC3, ord("{"), ord("}"), ord("<"),
                        ord(">"), ord('"'), ord("%"), ord("\\"), ord("\n"),
                        rng.randrange(256)])
        chars[i] = chr(b) if b < 0x80 else chr(0xDC00 + b)
    return "".join(chars)


MUTATORS = [  # (weight, mutator)
    (10, mutate_dim), (8, mutate_dim_value), (8, mutate_element_type),
    (12, mutate_number), (8, mutate_operands), (6, mutate_lines),
    (5, mutate_splice), (3, mutate_op_name), (8, mutate_attribute),
    (3, mutate_dim_names), (3, mutate_nesting), (2, mutate_truncate),
    (2, mutate_bytes),
]


def mutate(rng, seed, pools):
    text = seed.text
    applied = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        for _attempt in range(8):
            weight_total = sum(w for w, _ in MUTATORS)
            r = rng.uniform(0, weight_total)
            for w, fn in MUTATORS:
                r -= w
                if r <= 0:
                    break
            out = fn(rng, text, pools)
            if out is not None and out != text:
                text = out
                applied.append(fn.__name__[len("mutate_"):])
                break
    return text, applied


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------

OPT_PIPELINES = [
    [], ["--canonicalize"], ["--cse", "--canonicalize"], ["--llmc-raise"],
    ["--llmc-specialize-shapes=dims=seq=5"],
    ["--llmc-specialize-shapes=dims=seq=3,batch=2", "--llmc-pipeline"],
    ["--llmc-pipeline"], ["--llmc-precision=policy=bf16"],
    ["--llmc-precision=policy=fp8"], ["--llmc-pad-layout"],
    ["--llmc-shard=tp=2 rank=1"],
    ["--llmc-specialize-shapes=dims=seq=5", "--llmc-form-kernels",
     "--llmc-select-kernel-configs"],
    ["--llmc-specialize-shapes=dims=seq=4", "--llmc-precision=policy=fp8",
     "--llmc-pad-layout", "--llmc-form-kernels", "--llmc-select-kernel-configs"],
]
# Pass options with values out of range, for the passes' option checks.
ODD_VALUES = ["0", "-1", "3", "7", str(2**31), str(2**62), str(2**63), "x", ""]
ODD_PIPELINES = [
    "--llmc-specialize-shapes=dims=seq={v}",
    "--llmc-specialize-shapes=dims=seq={v},seq=2",
    "--llmc-specialize-shapes=dims={v}",
    "--llmc-shard=tp={v} rank=0",
    "--llmc-shard=tp=2 rank={v}",
    "--llmc-pad-layout=multiple={v}",
    "--llmc-select-kernel-configs=elementwise-unroll={v}",
    "--llmc-pad-layout=vocab-multiple={v}",
    "--llmc-precision=policy={v}",
    "--llmc-precision=weight-only={v}",
]
TARGET_WEIGHTS = {"opt": 6, "run": 3, "compile": 1}
# CPU seconds per run (RLIMIT_CPU). The wall-clock limit is three times as
# long plus 10 s, so that a loaded machine does not turn a slow run into a
# timeout while a hang (no CPU used) is still caught.
TIMEOUTS = {"opt": 20, "run": 30, "compile": 90}


def shape_flags(rng, text):
    names = []
    for m in DIM_NAMES.finditer(text):
        names += re.findall(r'"([^"]*)"', m.group(1))
    names = sorted(set(names)) or []
    flags = []
    for name in names:
        r = rng.random()
        if r < 0.05:
            continue  # unbound
        value = (rng.choice(BINDING_VALUES) if r < 0.15
                 else str(rng.choice([1, 2, 3, 5, 7, 8])))
        flags.append(f"--shape={name}={value}")
        if rng.random() < 0.03:
            flags.append(f"--shape={name}={rng.choice([1, 4, 9])}")
    if rng.random() < 0.03:
        flags.append(f"--shape=nosuchdim={rng.choice(['1', '0', '-1'])}")
    return flags


def command(rng, target, text, tools, file, out_file):
    if target == "opt":
        if rng.random() < 0.1:
            flag = rng.choice(ODD_PIPELINES).format(v=rng.choice(ODD_VALUES))
            return [str(tools / "llmc-opt"), file, flag]
        return [str(tools / "llmc-opt"), file] + rng.choice(OPT_PIPELINES)
    if target == "run":
        # The reference executor's budgets must be below the run's limits
        # for its own checks, clean errors, to come first: memory (default
        # 8 GiB) below the address-space limit (4 GiB), work (default 1.6e10
        # multiply-adds) well below the CPU-time limit (2e9 is seconds).
        cmd = [str(tools / "llmc-run"), file, "--backend=ref",
               "--ref-max-memory=1", "--ref-max-gmacs=2",
               f"--seed={rng.randrange(4)}"] + shape_flags(rng, text)
        if rng.random() < 0.15:
            cmd.append(f"--precision={rng.choice(['bf16', 'fp16', 'fp8'])}")
        return cmd
    cmd = [str(tools / "llmc-compile"), file, "--arch=sm_90a", "-o",
           out_file] + shape_flags(rng, text)
    r = rng.random()
    if r < 0.1:
        cmd.append(f"--precision={rng.choice(['bf16', 'fp16', 'fp8'])}")
    elif r < 0.15:
        cmd.append("--no-raise")
    elif r < 0.2:
        cmd.append("--no-hoist")
    return cmd


# ---------------------------------------------------------------------------
# Running and classifying
# ---------------------------------------------------------------------------

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE,
                 signal.SIGILL}
SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer): ([\w-]+)|"
                       r"(runtime error): (.*)|"
                       r"(UndefinedBehaviorSanitizer): (\S+)")
SANITIZER_OOM = re.compile(r"ERROR: AddressSanitizer: (?:.*rss limit exhausted|"
                           r"allocation-size-too-big|out of memory|"
                           r"requested allocation size)")
OOM = re.compile(r"out of memory|std::bad_alloc|Cannot allocate memory|"
                 r"failed to allocate|allocation-size-too-big|"
                 r"requested allocation size .* exceeds|rss limit exhausted",
                 re.IGNORECASE)
INTERNAL = re.compile(r"internal error|please report|LLVM ERROR|Assertion .*"
                      r"failed|UNREACHABLE|terminate called|"
                      r"std::[a-z_]+(?:_error|exception)\b|what\(\):|"
                      r"PLEASE submit a bug report|Stack dump:",
                      re.IGNORECASE)
DIAGNOSTIC = re.compile(r"\berror\b", re.IGNORECASE)


class Limits:
    def __init__(self, address_space, sanitized):
        self.address_space = address_space
        self.sanitized = sanitized

    def preexec(self, cpu_seconds):
        def apply():
            # ASan reserves terabytes of shadow memory: no address-space
            # limit there (ASAN_OPTIONS carries an RSS limit instead).
            if not self.sanitized:
                resource.setrlimit(resource.RLIMIT_AS,
                                   (self.address_space, self.address_space))
            resource.setrlimit(resource.RLIMIT_CPU,
                               (cpu_seconds, cpu_seconds + 1))
            resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        return apply


def run_command(cmd, cpu_seconds, limits, env, cwd):
    """(returncode or None on timeout, stderr text, seconds)."""
    timeout = 3 * cpu_seconds + 10
    t0 = time.monotonic()
    with tempfile.TemporaryFile(dir=cwd) as err:
        for attempt in range(5):
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err,
                                        cwd=cwd, env=env,
                                        start_new_session=True,
                                        preexec_fn=limits.preexec(cpu_seconds))
                break
            except OSError:
                # The tool is being relinked (a shared build directory):
                # wait for it rather than count a failure of the harness.
                if attempt == 4:
                    raise
                time.sleep(2)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        else:
            # Reap anything the tool left behind in its group.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        err.seek(0)
        head = err.read(1 << 20)
        err.seek(0, os.SEEK_END)
        if err.tell() > len(head):
            err.seek(max(len(head), err.tell() - (1 << 16)))
            head += b"\n...\n" + err.read()
    return rc, head.decode("utf-8", "replace"), time.monotonic() - t0


def classify(rc, stderr):
    """(kind, signature): signature tells bugs of one kind apart."""
    m = SANITIZER_OOM.search(stderr)
    if m:
        return "oom", m.group(0)
    m = SANITIZER.search(stderr)
    if m:
        groups = [g for g in m.groups() if g]
        return "sanitizer", " ".join(groups[:2])[:120]
    if rc is None:
        return "timeout", "wall clock"
    if rc < 0:
        sig = signal.Signals(-rc)
        if sig == signal.SIGXCPU or sig == signal.SIGKILL:
            return "timeout", sig.name
        if sig == signal.SIGXFSZ:
            return "oom", "file size limit"
        if OOM.search(stderr):
            return "oom", OOM.search(stderr).group(0)
        if sig in CRASH_SIGNALS:
            return "crash", sig.name + frame_signature(stderr)
        return "crash", sig.name
    if rc == 0:
        return "ok", ""
    m = OOM.search(stderr)
    if m and not re.search(r"error: .*(limit|budget|at most)", stderr):
        return "oom", m.group(0)
    m = INTERNAL.search(stderr)
    if m:
        line = stderr[m.start():].split("\n", 1)[0]
        return "internal", re.sub(r"\d+", "N", line)[:120]
    if DIAGNOSTIC.search(stderr):
        return "error", ""
    return "silent", f"exit {rc}"


def frame_signature(stderr):
    """The first llmc frame of LLVM's stack dump, if any (' in foo')."""
    for m in re.finditer(r"#\d+ 0x[0-9a-f]+ (.*?) \(", stderr):
        frame = m.group(1)
        if "llmc" in frame or "llm::" in frame:
            return " in " + re.sub(r"\(.*", "", frame)[:80]
    return ""


# ---------------------------------------------------------------------------
# Minimization
# ---------------------------------------------------------------------------

def minimize(text, reproduces, max_tests, deadline):
    """Line-based delta debugging (ddmin): the smallest set of lines found
    that still reproduces, within max_tests runs and the deadline."""
    lines = text.split("\n")
    n, tests = 2, 0
    while len(lines) >= 2 and tests < max_tests and time.monotonic() < deadline:
        size = max(1, len(lines) // n)
        chunks = [lines[i:i + size] for i in range(0, len(lines), size)]
        reduced = False
        for i in range(len(chunks)):
            if tests >= max_tests or time.monotonic() >= deadline:
                break
            candidate = [l for j, c in enumerate(chunks) if j != i for l in c]
            tests += 1
            if candidate and reproduces("\n".join(candidate)):
                lines = candidate
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if size == 1:
                break
            n = min(len(lines), n * 2)
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.tools = Path(args.tools).resolve()
        for tool in ("llmc-opt", "llmc-run", "llmc-compile"):
            if not (self.tools / tool).exists():
                sys.exit(f"fuzz: {self.tools / tool} not found (build first)")
        self.seeds = load_seeds(ROOT)
        self.pools = Pools(self.seeds)
        self.limits = Limits(args.memory_mb << 20, args.sanitized)
        self.work = Path(tempfile.mkdtemp(prefix="llmc-fuzz-"))
        self.out = Path(args.out).resolve()
        self.env = dict(os.environ)
        self.env["LLMC_CACHE_DIR"] = str(self.work / "cache")
        self.env.setdefault("LLVM_DISABLE_SYMBOLIZATION", "1")
        if args.sanitized:
            # An RSS limit stands in for the address-space limit, and an
            # allocation too large returns null (as under RLIMIT_AS) instead
            # of being reported as a sanitizer error: both are "oom".
            # The caller's options (e.g. test-sanitizers.sh's
            # allow_user_poisoning=0) come last and win.
            self.env["ASAN_OPTIONS"] = ":".join(filter(None, [
                f"hard_rss_limit_mb={args.memory_mb}:"
                "allocator_may_return_null=1:allow_user_poisoning=0",
                os.environ.get("ASAN_OPTIONS", "")]))
            self.env.setdefault("UBSAN_OPTIONS",
                                "print_stacktrace=1:halt_on_error=1")
        self.mark_valid()
        self.valid = [s for s in self.seeds if s.valid]
        self.valid_small = [s for s in self.valid if s.small]
        weights = [(t, TARGET_WEIGHTS[t]) for t in args.targets]
        self.target_names = [t for t, _ in weights]
        self.target_weights = [w for _, w in weights]
        self.lock = threading.Lock()
        self.counts = {t: {k: 0 for k in KINDS} for t in self.target_names}
        self.signatures = {}  # (target, kind, signature) -> count
        self.saved = []
        self.log = (open(args.log, "w", errors="backslashreplace")
                    if args.log else None)

    def mark_valid(self):
        """Seed.valid: llmc-opt accepts the seed as it is. Most mutants start
        from valid seeds, so that they get past the parser."""
        def check(seed):
            d = self.work / f"seed{id(seed)}"
            d.mkdir()
            (d / "s.mlir").write_bytes(seed.text.encode("utf-8",
                                                        "surrogateescape"))
            rc, _, _ = run_command([str(self.tools / "llmc-opt"), "s.mlir"],
                                   TIMEOUTS["opt"], self.limits, self.env, d)
            seed.valid = rc == 0
            shutil.rmtree(d, ignore_errors=True)
        with concurrent.futures.ThreadPoolExecutor(self.args.jobs) as pool:
            list(pool.map(check, self.seeds))

    def mutant(self, i):
        rng = random.Random(f"{self.args.seed}:{i}")
        target = rng.choices(self.target_names, self.target_weights)[0]
        if rng.random() < 0.85 and self.valid:
            pool = self.valid_small if target == "run" else self.valid
        else:
            pool = self.seeds
        seed = pool[rng.randrange(len(pool))]
        text, applied = mutate(rng, seed, self.pools)
        return rng, target, seed, text, applied

    def execute(self, target, text, cmd_rng_state, worker_dir):
        rng = random.Random()
        rng.setstate(cmd_rng_state)
        file = worker_dir / "input.mlir"
        file.write_bytes(text.encode("utf-8", "surrogateescape"))
        cmd = command(rng, target, text, self.tools, str(file),
                      str(worker_dir / "out.llmcx"))
        rc, stderr, secs = run_command(cmd, TIMEOUTS[target], self.limits,
                                       self.env, worker_dir)
        kind, sig = classify(rc, stderr)
        return kind, sig, cmd, stderr, secs

    def one(self, i):
        rng, target, seed, text, applied = self.mutant(i)
        worker_dir = self.work / f"w{threading.get_ident()}"
        worker_dir.mkdir(exist_ok=True)
        state = rng.getstate()
        kind, sig, cmd, stderr, secs = self.execute(target, text, state,
                                                    worker_dir)
        with self.lock:
            if self.log:
                first = next((l for l in stderr.split("\n") if l.strip()), "")
                self.log.write(f"{i}\t{target}\t{seed.name}\t"
                               f"{','.join(applied)}\t{kind}\t{secs:.2f}\t"
                               f"{' '.join(cmd[2:])}\t{first[:200]}\n")
            self.counts[target][kind] += 1
            key = (target, kind, sig)
            first = kind in FAILURES and key not in self.signatures
            self.signatures[key] = self.signatures.get(key, 0) + 1
        if first:
            self.report(i, target, seed, applied, text, state, kind, sig, cmd,
                        stderr, worker_dir)

    def report(self, i, target, seed, applied, text, state, kind, sig, cmd,
               stderr, worker_dir):
        if kind != "timeout" and not self.args.no_minimize:
            def reproduces(candidate):
                k, s = self.execute(target, candidate, state, worker_dir)[:2]
                return k == kind and s == sig
            text = minimize(text, reproduces, self.args.minimize_tests,
                            time.monotonic() + self.args.minimize_seconds)
            cmd, stderr = self.execute(target, text, state, worker_dir)[2:4]
        digest = hashlib.sha1(text.encode("utf-8", "surrogateescape"))
        slug = re.sub(r"[^A-Za-z0-9]+", "-", sig).strip("-")[:40]
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{target}-{kind}-{slug}-{digest.hexdigest()[:8]}.mlir"
        shown = [("%s" if a == cmd[1] else shlex.quote(a)) for a in cmd]
        shown[0] = Path(cmd[0]).name
        header = [f"// fuzz: {kind} ({sig}) in {target}",
                  f"// command: {' '.join(shown)}",
                  f"// from: seed {self.args.seed} mutant {i} of {seed.name}"
                  f" ({', '.join(applied)})"]
        header += ["// stderr: " + l for l in stderr.strip().split("\n")[:8]]
        body = "\n".join(l[:300] for l in header) + "\n"
        path.write_bytes(body.encode() + text.encode("utf-8", "surrogateescape"))
        with self.lock:
            self.saved.append(path)
        print(f"fuzz: {kind} ({sig}) in {target}: saved {path}",
              file=sys.stderr, flush=True)

    def summary(self, executions, elapsed):
        total = {k: sum(c[k] for c in self.counts.values()) for k in KINDS}
        lines = [f"fuzz: seed {self.args.seed}, {executions} executions in "
                 f"{elapsed:.0f} s ({executions / max(elapsed, 1e-9):.1f}/s), "
                 f"{len(self.seeds)} seeds ({len(self.valid)} valid)"]
        header = "  %-8s" % "target" + "".join("%10s" % k for k in KINDS)
        lines.append(header)
        for t in self.target_names:
            lines.append("  %-8s" % t +
                         "".join("%10d" % self.counts[t][k] for k in KINDS))
        lines.append("  %-8s" % "all" + "".join("%10d" % total[k] for k in KINDS))
        failures = sorted((k, n) for k, n in self.signatures.items()
                          if k[1] in FAILURES)
        if failures:
            lines.append("failures (target, kind, signature: count):")
            lines += [f"  {t} {k} {s}: {n}" for (t, k, s), n in failures]
        if self.saved:
            lines.append(f"inputs saved in {self.out}")
        return "\n".join(lines), sum(total[k] for k in FAILURES)

    def replay(self, i):
        """Runs mutant i alone: prints its outcome and command, and writes
        it to --out as mutant-<seed>-<i>.mlir."""
        rng, target, seed, text, applied = self.mutant(i)
        worker_dir = self.work / "replay"
        worker_dir.mkdir(exist_ok=True)
        kind, sig, cmd, stderr, secs = self.execute(target, text,
                                                    rng.getstate(), worker_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"mutant-{self.args.seed}-{i}.mlir"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        cmd = [str(path) if a == str(worker_dir / "input.mlir") else a
               for a in cmd]
        print(f"mutant {i} of {seed.name} ({', '.join(applied)}): {kind}"
              f"{' (' + sig + ')' if sig else ''} in {secs:.2f} s\n"
              f"{' '.join(shlex.quote(a) for a in cmd)}\n{stderr}")
        shutil.rmtree(self.work, ignore_errors=True)
        return 1 if kind in FAILURES else 0

    def run(self):
        args = self.args
        t0 = time.monotonic()
        last = t0
        done = 0
        next_index = args.start
        end = args.start + args.executions
        pending = set()
        # A sliding window of runs: a slow run occupies one worker while the
        # others go on.
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            try:
                while pending or next_index < end:
                    timed_out = args.seconds and time.monotonic() - t0 > args.seconds
                    while (next_index < end and not timed_out and
                           len(pending) < 2 * args.jobs):
                        pending.add(pool.submit(self.one, next_index))
                        next_index += 1
                    finished, pending = concurrent.futures.wait(
                        pending, return_when=concurrent.futures.FIRST_COMPLETED)
                    for f in finished:
                        f.result()
                        done += 1
                    now = time.monotonic()
                    if now - last >= args.progress:
                        last = now
                        text, _ = self.summary(done, now - t0)
                        print(text.split("\n")[0] + " " + " ".join(
                            f"{k}={sum(c[k] for c in self.counts.values())}"
                            for k in KINDS), file=sys.stderr, flush=True)
            except KeyboardInterrupt:
                for f in pending:
                    f.cancel()
        # Runs in flight at an interrupt still finish and count.
        executions = sum(sum(c.values()) for c in self.counts.values())
        text, failures = self.summary(executions, time.monotonic() - t0)
        print(text, flush=True)
        shutil.rmtree(self.work, ignore_errors=True)
        return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--executions", type=int, default=3000,
                   help="mutants to run (default 3000)")
    p.add_argument("--seconds", type=float, default=0,
                   help="stop after this many seconds (default: no limit)")
    p.add_argument("--seed", type=int, default=14, help="random seed")
    p.add_argument("--start", type=int, default=0,
                   help="index of the first mutant (to continue a run)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--targets", default="opt,run,compile",
                   type=lambda s: [t for t in s.split(",") if t])
    p.add_argument("--tools", default=str(ROOT / "build" / "bin"),
                   help="directory of llmc-opt, llmc-run, llmc-compile")
    p.add_argument("--out", default=str(ROOT / "build" / "fuzz"),
                   help="where failing inputs are saved")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="address-space limit per run (RSS limit with "
                        "--sanitized)")
    p.add_argument("--sanitized", action="store_true",
                   help="the tools are built with ASan/UBSan")
    p.add_argument("--no-minimize", action="store_true")
    p.add_argument("--minimize-tests", type=int, default=400)
    p.add_argument("--minimize-seconds", type=float, default=120)
    p.add_argument("--log", help="write one line per execution to this file "
                   "(index, target, seed, mutations, outcome, seconds, flags, "
                   "first stderr line)")
    p.add_argument("--replay", type=int, metavar="I",
                   help="run mutant I of --seed alone and print its outcome")
    p.add_argument("--progress", type=float, default=30,
                   help="seconds between progress lines")
    args = p.parse_args()
    for t in args.targets:
        if t not in TARGET_WEIGHTS:
            p.error(f"unknown target {t!r} (expected opt, run, compile)")
    if args.executions < 0 or args.jobs < 1:
        p.error("--executions must be >= 0 and --jobs >= 1")
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    # A long run stopped with kill (or Ctrl-C) still prints its counts.
    signal.signal(signal.SIGTERM, interrupt)
    fuzzer = Fuzzer(args)
    if args.replay is not None:
        sys.exit(fuzzer.replay(args.replay))
    sys.exit(fuzzer.run())


if __name__ == "__main__":
    main()
