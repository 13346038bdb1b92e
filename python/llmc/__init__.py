"""llmc: a torch.compile backend that compiles transformer graphs to CUDA.

    import torch
    model = torch.compile(model, backend="llmc")   # found via the entry point

`llmc.backend.last_report()` tells which ops ran where. Call
`llmc.invalidate_parameters()` after changing weights behind PyTorch's
version counters (`p.data.add_(...)`): see Options.prepare_parameters.
`llmc.KvPagePool` is the paged KV cache's page pool of a serving loop,
`llmc.ServingEngine` the continuous-batching engine over a serving step
(llmc.serving).
"""

from ._capi import LlmcError  # noqa: F401
from ._version import __version__  # noqa: F401
from .backend import (Options, invalidate_parameters, last_report, llmc_backend,  # noqa: F401
                      reports)
from .serving import KvPagePool, ServingEngine  # noqa: F401
