#!/usr/bin/env python3
"""Golden executables: every configuration of test/golden/MANIFEST, built by
the tool it names with --emit=executable-dump (the tool's own flow up to the
rt::Executable, printed by rt::DescribeExecutable: no NVRTC, no GPU), must
match test/golden/NAME.dump exactly.

  python3 scripts/golden.py --bin build/bin            # check (the ctest 'golden')
  python3 scripts/golden.py --bin build/bin --update   # rewrite the golden files
  bash scripts/update-golden.sh [REGEX]                # the same, for a subset

A check fails on any difference and prints the first lines of a unified diff
and the command that rebuilds the dump. --update prints, per changed
configuration, the per-call and preparation launches, kernels, GEMMs and arena
bytes before and after, so that the commit changing a golden file can say why
it changed and that it is no regression (same or fewer launches and arena
bytes; issue 15).

A crash, a timeout, an exit code other than 0 or 1, or an internal error is
never a golden: it fails in both modes. A clean user error (exit 1 with a
message) is recorded as the golden (its stderr and exit code), which pins it.
"""

import argparse
import concurrent.futures
import difflib
import glob
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = {"compile": "llmc-compile", "run": "llmc-run"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Environment the tools read that would change what they build (tuning
# knobs, the attention backend, torchrun's rank variables): removed, so the
# dumps depend on the command line only.
SCRUBBED_PREFIXES = ("LLMC_",)
SCRUBBED = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"}
# Messages of our own bugs (STYLE.md "Errors"): never a golden.
FAULT_RE = re.compile(r"internal error|please report|LLVM ERROR|Assertion|"
                      r"Segmentation fault|terminate called|Stack dump",
                      re.IGNORECASE)
DIFF_LINES = 40
# Configurations whose diff a failing check prints in full; the others are
# named with their numbers.
FULL_DIFFS = 10


class Config:
    def __init__(self, name, tool, args, line):
        self.name, self.tool, self.args, self.line = name, tool, args, line

    def command(self, bindir):
        return [os.path.join(bindir, TOOLS[self.tool])] + self.args + [
            "--emit=executable-dump"]

    def shown(self):
        return " ".join(shlex.quote(a) for a in
                        [TOOLS[self.tool]] + self.args + ["--emit=executable-dump"])


def read_manifest(path):
    configs, errors, seen = [], [], {}
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line)
            where = f"{os.path.relpath(path, ROOT)}:{n}"
            if len(words) < 3:
                errors.append(f"{where}: expected NAME TOOL ARGS..., found '{line}'")
                continue
            name, tool, args = words[0], words[1], words[2:]
            if not NAME_RE.match(name):
                errors.append(f"{where}: config name '{name}' must be letters, "
                              "digits, '.', '_' or '-'")
            elif name in seen:
                errors.append(f"{where}: config '{name}' is also on line {seen[name]}")
            if tool not in TOOLS:
                errors.append(f"{where}: tool '{tool}' must be one of "
                              f"{', '.join(TOOLS)}")
            if "--emit=executable-dump" in args:
                errors.append(f"{where}: leave --emit out (the driver adds it)")
            seen.setdefault(name, n)
            configs.append(Config(name, tool, args, n))
    return configs, errors


def environment():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(SCRUBBED_PREFIXES) and k not in SCRUBBED}
    env["LC_ALL"] = "C"
    return env


def produce(config, bindir, env, timeout):
    """(text, fault): the tool's stdout, then 'stderr: ' lines and 'exit N'."""
    try:
        p = subprocess.run(config.command(bindir), cwd=ROOT, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    except OSError as e:
        return None, f"cannot run {TOOLS[config.tool]}: {e}"
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return None, f"killed by signal {-p.returncode}\n{err}"
    if p.returncode not in (0, 1):
        return None, f"exit code {p.returncode}\n{err}"
    if FAULT_RE.search(err):
        return None, f"an internal error (a bug, not a golden):\n{err}"
    if p.returncode == 0 and not out.startswith("llmc-executable-dump "):
        return None, "exit code 0 without a dump on stdout"
    text = out
    if text and not text.endswith("\n"):
        text += "\n"
    for line in err.splitlines():
        text += f"stderr: {line}".rstrip() + "\n"
    if p.returncode:
        text += f"exit {p.returncode}\n"
    return text, None


def summary(text):
    """The numbers a change must not make worse, from a dump."""
    if text is None:
        return "missing"
    if not text.startswith("llmc-executable-dump "):
        return "error (" + next((l for l in text.splitlines()
                                 if "error" in l), "no dump").strip() + ")"
    counts = dict(re.findall(r"(\w+)=(\d+)",
                             re.search(r"^counts .*$", text, re.M).group(0)))
    prep = int(re.search(r"^num_prepare_launches (\d+)$", text, re.M).group(1))
    arena = int(re.search(r"^arena_bytes (\d+)$", text, re.M).group(1))
    return {"launches per call": int(counts["launches"]) - prep,
            "preparation launches": prep,
            "kernels": int(counts["kernels"]),
            "GEMMs": int(counts["gemms"]),
            "arena bytes": arena}


def describe_change(old, new):
    a, b = summary(old), summary(new)
    if isinstance(b, dict) and old is None:
        return "    " + ", ".join(f"{k} {v}" for k, v in b.items())
    if not isinstance(a, dict) or not isinstance(b, dict):
        return f"    {a} -> {b}"
    lines = []
    for key in a:
        mark = ""
        if key in ("launches per call", "arena bytes") and b[key] > a[key]:
            mark = "   <-- MORE (a regression unless explained)"
        lines.append(f"    {key:<21} {a[key]:>12} -> {b[key]:<12}{mark}")
    return "\n".join(lines)


def coverage_errors(configs):
    used = set()
    for c in configs:
        for a in c.args:
            used.add(os.path.normpath(a))
    errors = []
    for pattern in ("examples/*.mlir", "test/cases/*.mlir"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            rel = os.path.relpath(path, ROOT)
            if rel not in used:
                errors.append(f"{rel} is in no configuration of test/golden/MANIFEST")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                    help="directory of llmc-compile and llmc-run (default build/bin)")
    ap.add_argument("--manifest", default=os.path.join(ROOT, "test", "golden", "MANIFEST"))
    ap.add_argument("--golden-dir", default=os.path.join(ROOT, "test", "golden"))
    ap.add_argument("--update", action="store_true", help="rewrite the golden files")
    ap.add_argument("--filter", default="", help="only configs whose name matches REGEX")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per config")
    args = ap.parse_args()
    bindir = os.path.abspath(args.bin)
    t0 = time.monotonic()

    configs, errors = read_manifest(args.manifest)
    if not args.filter:
        errors += coverage_errors(configs)
    selected = [c for c in configs if re.search(args.filter, c.name)]
    if not selected:
        errors.append(f"no configuration matches --filter '{args.filter}'")
    if errors:
        for e in errors:
            print(f"golden: error: {e}", file=sys.stderr)
        return 1

    env = environment()
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(
            lambda c: produce(c, bindir, env, args.timeout), selected))

    failures, changed, differing = [], [], 0
    for config, (text, fault) in zip(selected, results):
        path = os.path.join(args.golden_dir, config.name + ".dump")
        if fault:
            failures.append(f"{config.name}: {config.shown()}\n  {fault.rstrip()}")
            continue
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
        if old == text:
            continue
        if args.update:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            changed.append((config, old, text))
            continue
        if old is None:
            failures.append(f"{config.name}: no golden file {os.path.relpath(path, ROOT)}")
            continue
        differing += 1
        if differing > FULL_DIFFS:
            failures.append(f"{config.name}: the executable differs from its "
                            f"golden file ({config.shown()})\n"
                            f"{describe_change(old, text)}")
            continue
        diff = list(difflib.unified_diff(
            old.splitlines(), text.splitlines(),
            f"test/golden/{config.name}.dump (golden)",
            f"{config.shown()} (now)", lineterm="", n=1))
        more = len(diff) - DIFF_LINES
        shown = "\n".join(diff[:DIFF_LINES]) + (
            f"\n... {more} more diff lines" if more > 0 else "")
        failures.append(f"{config.name}: the executable differs from its golden file\n"
                        f"{shown}\n{describe_change(old, text)}"
                        + (f"\n(diffs of the configurations after the first "
                           f"{FULL_DIFFS} are not printed; run with "
                           f"--filter to see one)" if differing == FULL_DIFFS else ""))

    stale = []
    if not args.filter:
        names = {c.name for c in configs}
        for path in sorted(glob.glob(os.path.join(args.golden_dir, "*.dump"))):
            name = os.path.basename(path)[:-len(".dump")]
            if name not in names:
                stale.append(path)
    if args.update:
        for path in stale:
            os.remove(path)
            print(f"removed {os.path.relpath(path, ROOT)} (not in the manifest)")
        for config, old, text in changed:
            print(f"{'new' if old is None else 'changed'}: {config.name}\n"
                  f"{describe_change(old, text)}")
    else:
        for path in stale:
            failures.append(f"{os.path.relpath(path, ROOT)} has no configuration "
                            "in test/golden/MANIFEST (remove it, or add its line)")

    seconds = time.monotonic() - t0
    total = sum(os.path.getsize(p) for p in glob.glob(
        os.path.join(args.golden_dir, "*.dump")))
    if failures:
        for f in failures:
            print(f"golden: FAIL {f}\n", file=sys.stderr)
        print(f"golden: {len(failures)} of {len(selected)} configurations failed "
              f"({seconds:.1f} s). If a change is intended, rebuild the golden "
              "files with `bash scripts/update-golden.sh [REGEX]` and say in the "
              "commit why they changed and that no launch count or arena size "
              "grew.", file=sys.stderr)
        return 1
    verb = f"updated {len(changed)}, " if args.update else ""
    print(f"golden: {verb}{len(selected)} configurations match "
          f"({seconds:.1f} s, {len(glob.glob(os.path.join(args.golden_dir, '*.dump')))} "
          f"golden files, {total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
