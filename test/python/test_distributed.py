"""llmc.distributed and the communicator bindings. The NCCL id and argument
checks run without a GPU; the two-rank test needs 2 GPUs (skipped otherwise)."""
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from llmc import _capi, distributed


def _lib_or_skip():
    ok, why = _capi.available()
    if not ok:
        pytest.skip(why)


def test_not_initialized_is_a_clear_error():
    assert not distributed.torch_nccl_ready()
    with pytest.raises(RuntimeError, match="NCCL backend"):
        distributed.communicator()


def test_unique_ids_are_fresh_128_bytes():
    _lib_or_skip()
    try:
        a, b = _capi.nccl_unique_id(), _capi.nccl_unique_id()
    except _capi.LlmcError as e:
        assert "LLMC_LIBNCCL" in str(e)
        pytest.skip(f"no libnccl: {e}")
    assert len(a) == 128 and len(b) == 128 and a != b


def test_communicator_argument_errors():
    _lib_or_skip()
    with pytest.raises(ValueError, match="128 bytes"):
        _capi.Communicator(b"x", 0, 2, 0)
    with pytest.raises(_capi.LlmcError, match="rank"):
        _capi.Communicator(bytes(128), 3, 2, 0)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 GPUs")
def test_two_ranks_from_torch_distributed(tmp_path):
    _lib_or_skip()
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent("""
        import os, torch, torch.distributed as dist
        import llmc.distributed
        r = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(r)
        dist.init_process_group("nccl", device_id=torch.device("cuda", r))
        comm = llmc.distributed.communicator(timeout_s=60)
        assert (comm.rank, comm.nranks) == (dist.get_rank(), 2)
        assert llmc.distributed.communicator() is comm
        comm.wait()
        print("rank", comm.rank, "ok", flush=True)
        del comm; llmc.distributed._cached = None
        dist.destroy_process_group()
    """))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), "..", "..", "python"),
         os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run",
                          "--nproc-per-node=2", f"--master-port={port}", str(script)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 ok" in out.stdout and "rank 1 ok" in out.stdout
