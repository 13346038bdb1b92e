#!/usr/bin/env python3
"""Host (Python) time of one `LlmcSubgraph.forward`, without the C call.

Runs on a CPU machine: a tiny Hugging Face LLaMA is compiled with
torch.compile(backend="llmc") (the C API compiles every subgraph; NVRTC needs
no GPU), then every llmc subgraph is called again and again on its recorded
inputs with the device parts faked so that the real Python path of a GPU call
runs:

  * the inputs (and the bucketed path's padded inputs) are a Tensor
    subclass whose `is_cuda` says True (its torch functions are plain
    tensors', so nothing else changes);
  * `torch.cuda.is_available` says True, `torch.cuda.current_stream` answers
    stream 0;
  * the session is `_capi.Session` itself with a stand-in for the library
    whose `llmc_session_run` returns success at once (outputs stay as
    allocated), and CPU as its device.

Prints the mean microseconds per forward of each subgraph and, with
--segments, where they go (_pad, _key, lookup, input list, Session.run's
Python, _slice_outputs, _restride, assemble_outputs).

    python3 bench/plugin_overhead.py [--layers 1] [--seq 16] [--calls 2000] [--segments]
    python3 bench/plugin_overhead.py --dynamic   # bucketed path (pads, position check)
    python3 bench/plugin_overhead.py --model gpt-fast --layers 32 --segments   # decode step
    python3 bench/plugin_overhead.py --model hf-static --layers 32 --cuda-graphs --segments
        # Hugging Face generate() with a static cache: prefill and decode step
"""
import argparse
import contextlib
import os
import sys
import time
import types
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --python DIR: time another copy of the package (e.g. the previous commit's).
_py = os.path.join(REPO, "python")
if "--python" in sys.argv:
    _py = sys.argv[sys.argv.index("--python") + 1]
sys.path.insert(0, _py)
# The CPU stand-ins for the GPU parts, shared with test/python/test_fast_path.py.
sys.path.insert(1, os.path.join(REPO, "test", "python"))

import torch  # noqa: E402
from cuda_standin import (StandInLib, fake_cuda, record_subgraphs,  # noqa: E402
                          stand_in_session)


@contextlib.contextmanager
def fake_device():
    from llmc import _capi
    Session = stand_in_session(_capi.Session, lambda: StandInLib(_capi.load()))

    from llmc import bucketing
    pad = bucketing.pad_tensor

    def pad_tensor(*a, **k):  # padded inputs are "on the GPU" too
        return fake_cuda(pad(*a, **k))

    saved = (torch.cuda.is_available, torch.cuda.current_stream, _capi.Session)
    torch.cuda.is_available = lambda: True
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    _capi.Session = Session
    bucketing.pad_tensor = pad_tensor
    try:
        yield
    finally:
        torch.cuda.is_available, torch.cuda.current_stream, _capi.Session = saved
        bucketing.pad_tensor = pad


SEGMENTS = ["_pad", "_key", "_slice_outputs", "_restride"]


def time_segments(sub, args, calls):
    """Mean ns per call of the backend's helper methods and Session.run."""
    import llmc.backend as B
    from llmc import _capi
    acc = {}

    def wrap(owner, name, label):
        f = getattr(owner, name)

        def timed(*a, **k):
            t0 = time.perf_counter_ns()
            r = f(*a, **k)
            acc[label] = acc.get(label, 0) + time.perf_counter_ns() - t0
            return r
        return f, timed

    patches = []
    for name in SEGMENTS + ["_finish", "_restride_plan"]:
        if hasattr(B.LlmcSubgraph, name):
            patches.append((B.LlmcSubgraph, name) + wrap(B.LlmcSubgraph, name, name))
    for name in ("run", "run_fast", "_checked_inputs", "_guard"):
        if hasattr(_capi.Session, name):
            # (the last two run inside run_fast: indented, not summed)
            label = ("  of which " if name in ("_checked_inputs", "_guard") else "Session.") + name
            patches.append((_capi.Session, name) + wrap(_capi.Session, name, label))
    patches.append((B, "assemble_outputs") + wrap(B, "assemble_outputs", "assemble_outputs"))
    for owner, name, _, timed in patches:
        setattr(owner, name, timed)
    try:
        t0 = time.perf_counter_ns()
        for i in range(calls):
            sub(*args[i % len(args)])
        total = time.perf_counter_ns() - t0
    finally:
        for owner, name, orig, _ in patches:
            setattr(owner, name, orig)
    return total / calls, {k: v / calls for k, v in acc.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--dynamic", action="store_true",
                    help="sequence lengths 13 and 15 (bucketed to 16, position inputs checked)")
    ap.add_argument("--segments", action="store_true")
    ap.add_argument("--python", help="directory holding the llmc package to time")
    ap.add_argument("--model", choices=("hf-llama", "gpt-fast", "hf-static"), default="hf-llama",
                    help="gpt-fast: test/python/gpt_fast.py, prefill then a decode step "
                         "(static KV caches donated; --layers sets the input count); "
                         "hf-static: Hugging Face generate() with cache_implementation="
                         "'static', model.forward compiled (prefill and decode step)")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="options={'cuda_graphs': True} (staged inputs)")
    args = ap.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM
    from llmc import _capi
    ok, why = _capi.available()
    if not ok:
        sys.exit(f"needs libllmc.so with the C API: {why}")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=176,
                      num_hidden_layers=args.layers, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=2048)
    opts = {"options": {"cuda_graphs": True}} if args.cuda_graphs else {}
    if args.model == "gpt-fast":
        from gpt_fast import GptFast
        model = GptFast(layers=args.layers, max_seq=64)
        seqs = [args.seq]
        xs = [(torch.randint(0, 1000, (1, args.seq)), torch.arange(args.seq)),
              (torch.randint(0, 1000, (1, 1)), torch.tensor([args.seq]))]
        subs = record_subgraphs(model, xs, call=lambda cm, x: cm(*x), dynamic=False, **opts)
    elif args.model == "hf-static":
        model = LlamaForCausalLM(cfg).eval()
        seqs = [args.seq]
        def generate(m, ids):  # greedy, static cache, 4 tokens
            m.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                       pad_token_id=0, cache_implementation="static")
        subs = record_subgraphs(model, [torch.randint(1, 1000, (args.batch, args.seq))],
                                call=generate, compile_forward=True, dynamic=False, **opts)
    else:
        model = LlamaForCausalLM(cfg).eval()
        seqs = [13, 15] if args.dynamic else [args.seq]
        xs = [torch.randint(0, 1000, (args.batch, s)) for s in seqs]
        subs = record_subgraphs(model, xs, dynamic=None, **opts)
    with fake_device(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total_us = 0.0
        for sub, recorded in subs:
            fargs = [[fake_cuda(a) for a in call] for call in recorded[-len(seqs):]]
            try:
                for a in fargs:  # compile + session set-up outside the timing
                    sub(*a)
            except RuntimeError as e:  # e.g. an executable whose result shapes
                # are not concrete: the stand-in session cannot allocate them
                print(f"{sub.name}: not timed ({str(e).splitlines()[0]})")
                continue
            if sub.disabled:
                print(f"{sub.name}: disabled ({sub.disabled.splitlines()[0]})")
                continue
            for _ in range(3):
                best = None
                t0 = time.perf_counter_ns()
                for i in range(args.calls):
                    sub(*fargs[i % len(fargs)])
                per = (time.perf_counter_ns() - t0) / args.calls
                best = per if best is None else min(best, per)
            ntens = sum(isinstance(a, torch.Tensor) for a in fargs[0])
            print(f"{sub.name}: {best / 1000:.1f} us per forward "
                  f"({len(fargs[0])} args, {ntens} tensors, "
                  f"{'bucketed' if sub.plan else 'static'})")
            total_us += best / 1000
            if args.segments:
                tot, seg = time_segments(sub, fargs, args.calls)
                rest = tot - sum(v for k, v in seg.items() if not k.startswith("  "))
                for k, v in sorted(seg.items(), key=lambda kv: -kv[1]):
                    print(f"    {k:18s} {v / 1000:7.2f} us")
                print(f"    {'(forward body)':18s} {rest / 1000:7.2f} us")
        print(f"all {len(subs)} llmc subgraph(s): {total_us:.1f} us of Python per model forward")


if __name__ == "__main__":
    main()
