"""llmc's NCCL communicator from a torch.distributed process group.

With `torch.distributed` initialized with the NCCL backend (one process per
GPU, e.g. under `torchrun`), `communicator()` gives this process's llmc
communicator: rank 0 makes an llmc/NCCL unique id and sends it to every rank
with `torch.distributed.broadcast_object_list`; every rank then joins on its
current CUDA device. llmc's communicator is its own NCCL communicator (the
process group's is not reachable from C), over the same ranks.

    import torch.distributed as dist, llmc.distributed
    dist.init_process_group("nccl"); torch.cuda.set_device(local_rank)
    comm = llmc.distributed.communicator()
    session = llmc._capi.Session(exe, communicator=comm)   # exe: this rank's shard

Collectives inside torch.compile'd graphs (`_c10d_functional.all_reduce`,
`all_gather_into_tensor`, `reduce_scatter_tensor`, `wait_tensor`) are not
imported into llm collectives yet: the llmc backend leaves them, and the
graph pieces around them, to eager PyTorch.
"""
from typing import Optional

import torch

from . import _capi

_cached: Optional[_capi.Communicator] = None
_cached_key = None


def torch_nccl_ready() -> bool:
    """True when torch.distributed is initialized with the NCCL backend."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        return dist.get_backend() == "nccl"
    except Exception:  # a non-default group setup
        return False


def communicator(timeout_s: float = 300.0) -> _capi.Communicator:
    """This rank's llmc communicator over the default process group (made
    once per process and group). Collective: every rank must call it.
    Raises RuntimeError when torch.distributed is not initialized with NCCL."""
    global _cached, _cached_key
    import torch.distributed as dist
    if not torch_nccl_ready():
        raise RuntimeError("llmc.distributed.communicator() needs "
                           "torch.distributed initialized with the NCCL backend "
                           "(torch.distributed.init_process_group('nccl'))")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.cuda.current_device()
    key = (rank, world, device, id(dist.group.WORLD))
    if _cached is not None and _cached_key == key:
        return _cached
    payload = [_capi.nccl_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(payload, src=0)
    uid = payload[0]
    if not isinstance(uid, bytes) or len(uid) != _capi.NCCL_UNIQUE_ID_BYTES:
        raise RuntimeError(f"rank {rank}: received a malformed NCCL unique id "
                           f"from rank 0 ({type(uid).__name__})")
    _cached = _capi.Communicator(uid, rank, world, device, timeout_s)
    _cached_key = key
    return _cached
