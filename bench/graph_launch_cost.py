#!/usr/bin/env python3
"""Host cost of launching a straight-line CUDA graph of N small kernels
(torch.cuda.CUDAGraph.replay(), PyTorch's capture), N = 10 .. 1000:

    python3 bench/graph_launch_cost.py

Prints the median time the replay() call takes on the host and the time to
the graph's completion. A reference for llmc's own graph launches (a 7B
decode step is one graph of ~490 launches): on the H200 with driver
580.159.04 (2026-12-04), 10.4 us for 500 nodes, 12.2 us for 1000, so a
launch gap of hundreds of microseconds before a graph's first kernel is not
the driver's. Under torch.profiler (CUPTI records every node) the gaps look
larger than they are."""
import time, torch, statistics
x = torch.zeros(1024, device="cuda")
for n in (10, 100, 250, 500, 1000):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        x.add_(1); torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            for _ in range(n):
                x.add_(1)
    host, total = [], []
    for it in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); g.replay(); t1 = time.perf_counter()
        torch.cuda.synchronize(); t2 = time.perf_counter()
        host.append(t1 - t0); total.append(t2 - t0)
    print(f"nodes {n:5d}: replay() host {statistics.median(host)*1e6:8.1f} us, to completion {statistics.median(total)*1e6:8.1f} us")
