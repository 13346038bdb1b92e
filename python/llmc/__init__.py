"""llmc: a torch.compile backend that compiles transformer graphs to CUDA.

    import torch
    model = torch.compile(model, backend="llmc")   # found via the entry point

`llmc.backend.last_report()` tells which ops ran where. `llmc.KvPagePool` is
the paged KV cache's page pool of a serving loop, `llmc.ServingEngine` the
continuous-batching engine over a serving step (llmc.serving).
"""

from ._capi import LlmcError  # noqa: F401
from ._version import __version__  # noqa: F401
from .backend import Options, last_report, llmc_backend, reports  # noqa: F401
from .serving import KvPagePool, ServingEngine  # noqa: F401
