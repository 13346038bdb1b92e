"""ctypes bindings of the llmc C API (include/llmc/llmc_c.h).

The shared library is located lazily (`find_library`) so that importing
`llmc` never fails: a missing library, or one built without the C API, is
reported by `load()` raising `LibraryNotFound` with the places searched, and
the backend turns that into a one-time warning and eager execution.

Status returns become `LlmcError(code, message)`; codes are absl's.
"""

from __future__ import annotations

import array
import atexit
import ctypes
import logging
import math
import os
import threading
import weakref
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ._version import __version__

LLMC_MAX_RANK = 8

# absl::StatusCode values used by the C API.
OK = 0
INVALID_ARGUMENT = 3
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
INTERNAL = 13

_CODE_NAMES = {
    0: "ok", 1: "cancelled", 2: "unknown", 3: "invalid argument",
    4: "deadline exceeded", 5: "not found", 6: "already exists",
    7: "permission denied", 8: "resource exhausted", 9: "failed precondition",
    10: "aborted", 11: "out of range", 12: "unimplemented", 13: "internal",
    14: "unavailable", 15: "data loss", 16: "unauthenticated",
}


class LlmcError(RuntimeError):
    """An llmc status turned into a Python exception."""

    def __init__(self, code: int, message: str, context: str = ""):
        self.code = code
        self.message = message
        self.context = context
        text = f"llmc: {_CODE_NAMES.get(code, code)}: {message}"
        if context:
            text += f"\n  while {context}"
        super().__init__(text)

    @property
    def is_unimplemented(self) -> bool:
        return self.code == UNIMPLEMENTED

    @property
    def is_user_error(self) -> bool:
        return self.code == INVALID_ARGUMENT


class LibraryNotFound(RuntimeError):
    pass


# --- element types --------------------------------------------------------

LLMC_DTYPE_F32 = 0
LLMC_DTYPE_F16 = 1
LLMC_DTYPE_BF16 = 2
LLMC_DTYPE_F8E4M3FN = 3
LLMC_DTYPE_F8E5M2 = 4
LLMC_DTYPE_I1 = 5
LLMC_DTYPE_I8 = 6
LLMC_DTYPE_I32 = 7
LLMC_DTYPE_I64 = 8

TORCH_TO_LLMC: Dict[torch.dtype, int] = {
    torch.float32: LLMC_DTYPE_F32,
    torch.float16: LLMC_DTYPE_F16,
    torch.bfloat16: LLMC_DTYPE_BF16,
    torch.float8_e4m3fn: LLMC_DTYPE_F8E4M3FN,
    torch.float8_e5m2: LLMC_DTYPE_F8E5M2,
    torch.bool: LLMC_DTYPE_I1,  # one byte per element, 0 or 1: as torch.bool
    torch.int8: LLMC_DTYPE_I8,
    torch.int32: LLMC_DTYPE_I32,
    torch.int64: LLMC_DTYPE_I64,
}
LLMC_TO_TORCH: Dict[int, torch.dtype] = {v: k for k, v in TORCH_TO_LLMC.items()}


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
    ]


class _KvPagePoolOptions(ctypes.Structure):
    """llmc_kv_page_pool_options."""
    _fields_ = [
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("num_layers", ctypes.c_int64),
        ("num_kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("element_bytes", ctypes.c_int64),
        ("device_ordinal", ctypes.c_int32),
        ("host_memory", ctypes.c_int32),
    ]


class _ServingEngineOptions(ctypes.Structure):
    """llmc_serving_engine_options."""
    _fields_ = [
        ("max_batch_tokens", ctypes.c_int64),
        ("max_sequences", ctypes.c_int64),
        ("token_buckets", ctypes.POINTER(ctypes.c_int64)),
        ("num_token_buckets", ctypes.c_int64),
        ("device_ordinal", ctypes.c_int32),
        ("use_cuda_graphs", ctypes.c_int32),
        ("reference", ctypes.c_int32),
    ]


class _SamplingParams(ctypes.Structure):
    """llmc_sampling_params."""
    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("max_new_tokens", ctypes.c_int64),
        ("stop_tokens", ctypes.POINTER(ctypes.c_int32)),
        ("num_stop_tokens", ctypes.c_int64),
    ]


# --- locating and loading the library -------------------------------------

_REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def candidate_paths() -> List[Path]:
    """Where libllmc.so is looked for, in order: $LLMC_LIB; the wheel's own
    (llmc/lib/libllmc.so, installed by `pip install .` from the repository
    root); a built checkout's build/lib and dist/lib (`pip install -e python/`)."""
    paths = []
    env = os.environ.get("LLMC_LIB")
    if env:
        paths.append(Path(env))
    paths.append(Path(__file__).resolve().parent / "lib" / "libllmc.so")
    paths.append(_REPO_ROOT / "build" / "lib" / "libllmc.so")
    paths.append(_REPO_ROOT / "dist" / "lib" / "libllmc.so")
    return paths


_lib = None
_lib_error: Optional[str] = None
_lib_lock = threading.Lock()

# Every live Session (weakly), for invalidate_all_parameters; sessions are
# made lazily on any thread (a first call per shape), hence the lock.
_SESSIONS: "weakref.WeakSet[Session]" = weakref.WeakSet()
_SESSIONS_LOCK = threading.Lock()


def invalidate_all_parameters():
    """Session.invalidate_parameters() on every live session; every one is
    tried, and the first failure is raised after the others."""
    with _SESSIONS_LOCK:
        sessions = list(_SESSIONS)
    first = None
    for s in sessions:
        try:
            s.invalidate_parameters()
        except LlmcError as e:
            first = first or e
    if first is not None:
        raise first


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes)
_SIGNATURES = {
    "llmc_version": (ctypes.c_char_p, []),
    "llmc_set_log_callback": (None, [ctypes.c_void_p, ctypes.c_void_p]),
    "llmc_status_code": (ctypes.c_int, [_P]),
    "llmc_status_message": (ctypes.c_char_p, [_P]),
    "llmc_status_free": (None, [_P]),
    "llmc_compiler_create": (_P, [ctypes.c_char_p, _PP]),
    "llmc_compiler_release": (None, [_P]),
    "llmc_compile": (_P, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                          ctypes.c_char_p, _PP]),
    "llmc_executable_load": (_P, [ctypes.c_char_p, _PP]),
    "llmc_executable_save": (_P, [_P, ctypes.c_char_p]),
    "llmc_executable_release": (None, [_P]),
    "llmc_executable_num_inputs": (ctypes.c_int32, [_P]),
    "llmc_executable_num_outputs": (ctypes.c_int32, [_P]),
    "llmc_executable_input_info": (_P, [_P, ctypes.c_int32, ctypes.POINTER(ctypes.c_int),
                                        ctypes.POINTER(ctypes.c_int32),
                                        ctypes.POINTER(ctypes.c_int64)]),
    "llmc_executable_output_info": (_P, [_P, ctypes.c_int32, ctypes.POINTER(ctypes.c_int),
                                         ctypes.POINTER(ctypes.c_int32),
                                         ctypes.POINTER(ctypes.c_int64)]),
    "llmc_executable_input_is_parameter": (_P, [_P, ctypes.c_int32,
                                                ctypes.POINTER(ctypes.c_int32)]),
    "llmc_session_create": (_P, [_P, ctypes.c_int32, ctypes.c_char_p, _PP]),
    "llmc_session_release": (None, [_P]),
    "llmc_session_invalidate_parameters": (_P, [_P]),
    "llmc_session_run": (_P, [_P, ctypes.POINTER(_Tensor), ctypes.c_int32,
                              ctypes.POINTER(_Tensor), ctypes.c_int32, _P]),
    "llmc_nccl_get_unique_id": (_P, [ctypes.c_char_p]),
    "llmc_communicator_create": (_P, [ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.c_int32, ctypes.c_double, _PP]),
    "llmc_communicator_release": (None, [_P]),
    "llmc_communicator_wait": (_P, [_P, _P]),
    "llmc_session_create_with_communicator": (_P, [_P, _P, ctypes.c_char_p, _PP]),
}

# Entry points of newer libraries: bound when present, None otherwise.
_OPTIONAL_SIGNATURES = {
    "llmc_session_graph_stats": (_P, [_P, ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p,
                                      ctypes.c_size_t]),
    "llmc_executable_output_alias_input": (_P, [_P, ctypes.c_int32,
                                                ctypes.POINTER(ctypes.c_int32)]),
    "llmc_executable_stats": (_P, [_P, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
    # KV page pool (llmc.serving.KvPagePool)
    "llmc_serving_engine_create": (_P, [_P, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.POINTER(_Tensor), ctypes.c_int64,
                                        ctypes.POINTER(_ServingEngineOptions), _PP]),
    "llmc_serving_engine_release": (None, [_P]),
    "llmc_serving_engine_warmup": (_P, [_P]),
    "llmc_serving_engine_add_request": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int32),
                                             ctypes.c_int64, ctypes.POINTER(_SamplingParams)]),
    "llmc_serving_engine_step": (_P, [_P, ctypes.POINTER(ctypes.c_int64),
                                      ctypes.POINTER(ctypes.c_int64)]),
    "llmc_serving_engine_step_token": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                                            ctypes.POINTER(ctypes.c_int32)]),
    "llmc_serving_engine_step_finished": (_P, [_P, ctypes.c_int64,
                                               ctypes.POINTER(ctypes.c_int64),
                                               ctypes.POINTER(ctypes.c_int32),
                                               ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                               ctypes.POINTER(ctypes.c_int64),
                                               ctypes.POINTER(ctypes.c_char_p)]),
    "llmc_serving_engine_has_work": (_P, [_P, ctypes.POINTER(ctypes.c_int32)]),
    "llmc_serving_engine_stats": (_P, [_P, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32,
                                       ctypes.POINTER(ctypes.c_double)]),
    "llmc_kv_page_pool_create": (_P, [ctypes.POINTER(_KvPagePoolOptions), _PP]),
    "llmc_kv_page_pool_release": (None, [_P]),
    "llmc_kv_page_pool_pages": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64),
                                     ctypes.POINTER(ctypes.c_uint64)]),
    "llmc_kv_page_pool_add_sequence": (_P, [_P, ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_append": (_P, [_P, ctypes.c_int64, ctypes.c_int64,
                                      ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_fork": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_release_sequence": (_P, [_P, ctypes.c_int64]),
    "llmc_kv_page_pool_truncate": (_P, [_P, ctypes.c_int64, ctypes.c_int64]),
    "llmc_kv_page_pool_length": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_block_table": (_P, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int32),
                                           ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_fill_batch_metadata": (_P, [_P, ctypes.POINTER(ctypes.c_int64),
                                                   ctypes.c_int64, ctypes.c_int64,
                                                   ctypes.POINTER(ctypes.c_int32),
                                                   ctypes.POINTER(ctypes.c_int32)]),
    "llmc_kv_page_pool_apply_pending_copies": (_P, [_P, _P]),
    "llmc_kv_page_pool_take_pending_copies": (_P, [_P, ctypes.POINTER(ctypes.c_int64),
                                                   ctypes.c_int64,
                                                   ctypes.POINTER(ctypes.c_int64)]),
    "llmc_kv_page_pool_stats": (_P, [_P, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32,
                                     ctypes.POINTER(ctypes.c_double)]),
    "llmc_kv_page_pool_check_invariants": (_P, [_P]),
}

NCCL_UNIQUE_ID_BYTES = 128


# llmc's own messages (llmc_set_log_callback) go to logging.getLogger("llmc"):
# a session that turned CUDA graphs off, warnings of a compile that succeeded.
_LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}
_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def _log_message(level, message, _user_data):
    try:
        logging.getLogger("llmc").log(_LOG_LEVELS.get(level, logging.WARNING),
                                      "%s", message.decode(errors="replace"))
    except Exception:  # an exception must not unwind into C
        pass


# Kept alive for the process: the library holds the pointer.
_LOG_CALLBACK = _LOG_FN(_log_message)


def _restore_stderr_log():
    """At interpreter exit: messages after it go to stderr, not into Python."""
    if _lib is not None:
        _lib.llmc_set_log_callback(None, None)


atexit.register(_restore_stderr_log)


def load():
    """Returns the loaded library; raises LibraryNotFound (with the reason)."""
    global _lib, _lib_error
    with _lib_lock:
        if _lib is not None:
            return _lib
        if _lib_error is not None:
            raise LibraryNotFound(_lib_error)
        tried = []
        for path in candidate_paths():
            if not path.is_file():
                tried.append(f"{path} (absent)")
                continue
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                tried.append(f"{path} (cannot load: {e})")
                continue
            missing = [n for n in _SIGNATURES if not hasattr(lib, n)]
            if missing:
                tried.append(f"{path} (no C API: {missing[0]} is not exported)")
                continue
            for name, (res, args) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = res
                fn.argtypes = args
            lib_version = lib.llmc_version().decode()
            if lib_version != __version__:
                tried.append(f"{path} (llmc {lib_version}; this package is llmc {__version__})")
                continue
            for name, (res, args) in _OPTIONAL_SIGNATURES.items():
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = res
                    fn.argtypes = args
            lib._llmc_path = str(path)
            lib.llmc_set_log_callback(ctypes.cast(_LOG_CALLBACK, ctypes.c_void_p), None)
            _lib = lib
            return lib
        _lib_error = ("libllmc.so with the C API not found; set LLMC_LIB or build "
                      "llmc (cmake --build build). Tried: " + "; ".join(tried))
        raise LibraryNotFound(_lib_error)


def library_version() -> str:
    """The loaded libllmc.so's version (llmc_version()); LibraryNotFound without one."""
    return load().llmc_version().decode()


def available() -> Tuple[bool, str]:
    """(True, path) when the C API can be used, else (False, reason)."""
    try:
        lib = load()
    except LibraryNotFound as e:
        return False, str(e)
    return True, lib._llmc_path


def _reset_for_tests():
    global _lib, _lib_error
    with _lib_lock:
        _lib = None
        _lib_error = None


def _check(status, context: str = ""):
    if not status:
        return
    lib = _lib
    code = lib.llmc_status_code(status)
    msg = lib.llmc_status_message(status)
    msg = msg.decode("utf-8", "replace") if msg else ""
    lib.llmc_status_free(status)
    raise LlmcError(code, msg, context)


# --- objects ----------------------------------------------------------------


class Compiler:
    """llmc_compiler_t: options as a dict, e.g. {"arch": "sm_90a", "cache_dir": "..."}."""

    def __init__(self, options: Optional[Dict[str, object]] = None):
        self._lib = load()
        opts = ";".join(f"{k}={_opt(v)}" for k, v in (options or {}).items()
                        if v is not None)
        handle = ctypes.c_void_p()
        _check(self._lib.llmc_compiler_create(opts.encode() if opts else None,
                                              ctypes.byref(handle)),
               f"creating a compiler with options '{opts}'")
        self._handle = handle

    def compile(self, mlir: str, function: Optional[str] = None,
                shape_bindings: Optional[Dict[str, int]] = None) -> "Executable":
        text = mlir.encode()
        bindings = ",".join(f"{k}={int(v)}" for k, v in (shape_bindings or {}).items())
        out = ctypes.c_void_p()
        _check(self._lib.llmc_compile(self._handle, text, len(text),
                                      function.encode() if function else None,
                                      bindings.encode() if bindings else None,
                                      ctypes.byref(out)),
               f"compiling function '{function or '(first)'}'"
               + (f" with shapes {bindings}" if bindings else ""))
        return Executable(out)

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_compiler_release(h)
            self._handle = None


def _opt(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


class TensorInfo:
    """One input or output of an executable: dtype, shape and, for inputs,
    whether it is a parameter (read by the parameter-preparation launches;
    see Session)."""
    __slots__ = ("dtype", "shape", "parameter")

    def __init__(self, dtype: torch.dtype, shape: Tuple[int, ...], parameter: bool = False):
        self.dtype = dtype
        self.shape = shape
        self.parameter = parameter

    def __repr__(self):
        p = ", parameter" if self.parameter else ""
        return f"TensorInfo({self.dtype}, {list(self.shape)}{p})"


class Executable:
    def __init__(self, handle: ctypes.c_void_p):
        self._lib = load()
        self._handle = handle

    @classmethod
    def load_file(cls, path: str) -> "Executable":
        lib = load()
        out = ctypes.c_void_p()
        _check(lib.llmc_executable_load(str(path).encode(), ctypes.byref(out)),
               f"loading executable {path}")
        return cls(out)

    def save(self, path: str):
        _check(self._lib.llmc_executable_save(self._handle, str(path).encode()),
               f"saving executable {path}")

    def _info(self, fn, index: int) -> TensorInfo:
        dtype = ctypes.c_int()
        rank = ctypes.c_int32()
        shape = (ctypes.c_int64 * LLMC_MAX_RANK)()
        _check(fn(self._handle, index, ctypes.byref(dtype), ctypes.byref(rank), shape),
               f"reading the signature of tensor {index}")
        return TensorInfo(LLMC_TO_TORCH[dtype.value], tuple(shape[: rank.value]))

    STATS = ("kernels", "launches", "prepare_launches", "gemms", "cudnn_attentions",
             "collectives", "arena_bytes")

    def stats(self) -> Optional[Dict[str, int]]:
        """What the executable holds (llmc_executable_stats: keys STATS:
        distinct kernels, launches per call, parameter-preparation launches,
        cuBLASLt GEMMs per call, attention launches cuDNN may run,
        collectives per call, arena bytes); None when the library predates
        it."""
        fn = getattr(self._lib, "llmc_executable_stats", None)
        if fn is None:
            return None
        counts = (ctypes.c_int64 * len(self.STATS))()
        _check(fn(self._handle, counts, len(self.STATS)), "reading executable statistics")
        return dict(zip(self.STATS, list(counts)))

    @property
    def output_aliases(self) -> Dict[int, int]:
        """{output index: input index} of the outputs a donated input holds
        after a run (llmc_executable_output_alias_input); {} when the library
        predates it."""
        fn = getattr(self._lib, "llmc_executable_output_alias_input", None)
        if fn is None:
            return {}
        found = {}
        flag = ctypes.c_int32()
        for o in range(self._lib.llmc_executable_num_outputs(self._handle)):
            _check(fn(self._handle, o, ctypes.byref(flag)), f"reading the alias of output {o}")
            if flag.value >= 0:
                found[o] = flag.value
        return found

    @property
    def inputs(self) -> List[TensorInfo]:
        n = self._lib.llmc_executable_num_inputs(self._handle)
        infos = [self._info(self._lib.llmc_executable_input_info, i) for i in range(n)]
        flag = ctypes.c_int32()
        for i, info in enumerate(infos):
            _check(self._lib.llmc_executable_input_is_parameter(self._handle, i,
                                                                ctypes.byref(flag)),
                   f"reading whether input {i} is a parameter")
            info.parameter = bool(flag.value)
        return infos

    @property
    def outputs(self) -> List[TensorInfo]:
        n = self._lib.llmc_executable_num_outputs(self._handle)
        return [self._info(self._lib.llmc_executable_output_info, i) for i in range(n)]

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_executable_release(h)
            self._handle = None


# Whether tensors[i].data_ptr() == ptrs[i] for every i of indices, in one
# C++ call (what PyTorch's CUDA graph trees use); a Python loop on a torch
# without it.
_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None) or (
    lambda tensors, ptrs, indices: all(tensors[i].data_ptr() == ptrs[i] for i in indices))


def _tensor_struct(t: torch.Tensor, keep: list) -> _Tensor:
    dtype = TORCH_TO_LLMC.get(t.dtype)
    if dtype is None:
        raise LlmcError(INVALID_ARGUMENT, f"dtype {t.dtype} has no llmc element type")
    if t.dim() > LLMC_MAX_RANK:
        raise LlmcError(INVALID_ARGUMENT, f"rank {t.dim()} above {LLMC_MAX_RANK}")
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    keep.append(shape)
    return _Tensor(ctypes.c_void_p(t.data_ptr()), dtype, t.dim(), shape, None)


def nccl_unique_id() -> bytes:
    """A fresh NCCL unique id (128 bytes; ncclGetUniqueId). Make it on one
    rank and send it to all (see llmc.distributed)."""
    lib = load()
    buf = ctypes.create_string_buffer(NCCL_UNIQUE_ID_BYTES)
    _check(lib.llmc_nccl_get_unique_id(buf), "making an NCCL unique id")
    return buf.raw


class Communicator:
    """llmc_communicator_t: this process's rank of an NCCL communicator on
    one GPU (non-blocking NCCL; set-up and waits fail after `timeout_s`
    instead of hanging when another rank is missing or failed)."""

    def __init__(self, unique_id: bytes, rank: int, nranks: int,
                 device_ordinal: int, timeout_s: float = 300.0):
        if len(unique_id) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id has {NCCL_UNIQUE_ID_BYTES} bytes, "
                             f"got {len(unique_id)}")
        self._lib = load()
        self.rank, self.nranks, self.device_ordinal = rank, nranks, device_ordinal
        out = ctypes.c_void_p()
        _check(self._lib.llmc_communicator_create(unique_id, rank, nranks,
                                                  device_ordinal, float(timeout_s),
                                                  ctypes.byref(out)),
               f"creating the NCCL communicator of rank {rank} of {nranks} "
               f"on GPU {device_ordinal}")
        self._handle = out

    def wait(self, stream: Optional[int] = None):
        """Waits for the work on `stream` (default: torch's current stream),
        watching for NCCL errors and the timeout."""
        if stream is None:
            stream = torch.cuda.current_stream(
                torch.device("cuda", self.device_ordinal)).cuda_stream
        _check(self._lib.llmc_communicator_wait(self._handle, ctypes.c_void_p(stream)),
               f"waiting on rank {self.rank} of {self.nranks}")

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_communicator_release(h)
            self._handle = None


class Session:
    """llmc_session_t on one GPU. Inputs are passed zero-copy (data_ptr);
    non-contiguous ones are made contiguous first. Outputs come from
    torch.empty on the inputs' device (PyTorch's caching allocator owns
    them): one each, or, for `packed_outputs`, one per dtype with the
    outputs as views of it; `output_views` outputs get another output's
    memory.
    Executables with collectives need a `communicator` (its GPU is used).

    Per call, only what changes is written: the llmc_tensor arrays (dtype,
    rank, shape of every input and output: the executable fixes them) are
    built once, a call that matches them (count, dtype, shape, device) only
    stores its data pointers there. Any other call takes the general path,
    which describes the tensors as they are (the runtime then names the
    mismatch).

    Parameter preparation (weight casts, fp8 scaling, pads, weight-only
    quantization) runs in the runtime once per set of parameter pointers
    (the inputs TensorInfo.parameter marks), so a pointer must identify the
    contents it was prepared from. The session makes sure it does:
    - it keeps the parameter tensors of the last call alive until the next
      one, so PyTorch's allocator cannot hand their memory to a new tensor
      (a fresh tensor at a reused address, version 0 like the last one, would
      otherwise reuse the last call's prepared weights);
    - a non-contiguous parameter is passed as a contiguous copy that is kept
      and reused while its source (pointer, version, strides) is unchanged,
      and made anew (at a new address, the old copy still alive) otherwise;
    - an in-place update at the same address (an optimizer step) is seen
      through PyTorch's version counters and invalidates the preparation
      (an inference tensor, which has no version counter, always does).
    `always_prepare=True` (training graphs, where weights may also change
    behind `.data`) runs the preparation on every call and keeps nothing.

    cuda_graphs: the runtime replays a CUDA graph of the launches while the
    input/output pointers are ones it has seen (a few sets are kept, see
    SessionOptions::use_cuda_graphs), also for callers on the legacy default
    stream (PyTorch's default). staged_inputs (input indices) and
    staged_output_bytes: inputs and small outputs copied through buffers of
    the session so that their addresses are not part of the graph
    (SessionOptions::staged_inputs / staged_output_bytes); only with
    cuda_graphs.

    persistent_outputs: outputs that get one tensor at session creation,
    returned again by every call: for results whose only reader copies them
    elsewhere before the next call on the stream (AOTAutograd's copy-back
    of a mutated input, e.g. a KV cache's position counter), this saves an
    allocation per output and call, before the first kernel, and gives the
    output a fixed address. Each calling thread and stream gets its own
    tensors: calls in flight at once must not share one (a second call could
    overwrite it before the first one's copy has read it).

    fixed_inputs: inputs not staged for the CUDA graphs on the assumption
    that they stay where they are (a mutated buffer); when one moves
    between two calls, `fixed_input_moved` turns True (the caller may then
    recreate the session with them staged: a graph per address would be
    captured otherwise)."""

    def __init__(self, executable: Executable, device_ordinal: int = 0,
                 cuda_graphs: bool = False,
                 communicator: Optional[Communicator] = None,
                 always_prepare: bool = False,
                 staged_inputs: Sequence[int] = (),
                 staged_output_bytes: int = 0,
                 packed_outputs: Sequence[int] = (),
                 output_views: Optional[Dict[int, int]] = None,
                 persistent_outputs: Sequence[int] = (),
                 fixed_inputs: Sequence[int] = ()):
        lib = load()
        self.communicator = communicator  # released after the session
        if communicator is not None:
            device_ordinal = communicator.device_ordinal
        self._setup(lib, executable, torch.device("cuda", device_ordinal), always_prepare,
                    packed_outputs, output_views, persistent_outputs, fixed_inputs)
        # The runtime copies staged inputs through its aligned staging buffer
        # (also once the graphs are off, when one is misaligned): any address.
        self._staged_set = frozenset(int(i) for i in staged_inputs) if cuda_graphs else frozenset()
        out = ctypes.c_void_p()
        opts = f"cuda_graphs={1 if cuda_graphs else 0}"
        if cuda_graphs and staged_inputs:
            opts += ";staged_inputs=" + ",".join(str(int(i)) for i in staged_inputs)
        if cuda_graphs and staged_output_bytes:
            opts += f";staged_output_bytes={int(staged_output_bytes)}"
        if communicator is None:
            status = self._lib.llmc_session_create(executable._handle, device_ordinal,
                                                   opts.encode(), ctypes.byref(out))
        else:
            status = self._lib.llmc_session_create_with_communicator(
                executable._handle, communicator._handle, opts.encode(),
                ctypes.byref(out))
        _check(status, f"creating a session on GPU {device_ordinal}")
        self._handle = out

    def _setup(self, lib, executable: Executable, device: torch.device,
               always_prepare: bool, packed_outputs: Sequence[int] = (),
               output_views: Optional[Dict[int, int]] = None,
               persistent_outputs: Sequence[int] = (),
               fixed_inputs: Sequence[int] = ()):
        """The Python side of a session: the argument templates (also used by
        bench/plugin_overhead.py with a stand-in library)."""
        self._lib = lib
        self.always_prepare = always_prepare
        self.executable = executable  # keeps it alive
        self.output_info = executable.outputs
        self.input_info = executable.inputs
        # Parameter guard (see the class docstring): the indices of the
        # parameter inputs, their tensors and (pointer, version) in the last
        # call, and the kept contiguous copies of non-contiguous ones.
        self._params = [k for k, i in enumerate(self.input_info) if i.parameter]
        self._param_set = frozenset(self._params)
        self._staged_set: frozenset = frozenset()  # __init__ sets the staged inputs
        self._held: Optional[List[torch.Tensor]] = None
        self._held_keys: Optional[List[Tuple[int, Optional[int]]]] = None
        self._param_copies: Dict[int, Tuple[Tuple[int, int, Tuple[int, ...]], torch.Tensor]] = {}
        self.device = device
        self._device_index = device.index if device.index is not None else (
            0 if device.type == "cuda" else -1)
        self._run_lock = threading.Lock()
        self._keep: list = []
        # Output index -> input index of a donated input (`llm.donate`) the
        # executable updated in place and that holds that output (as the
        # executable says): the input tensor is passed as the output (the
        # runtime then skips the copy) and returned.
        # (A stand-in executable of the tests may have none.)
        self.aliases: Dict[int, int] = dict(getattr(executable, "output_aliases", {}))
        self._in_sig = [(torch.Size(i.shape), i.dtype) for i in self.input_info]
        self._out_alloc = [(tuple(i.shape), i.dtype) for i in self.output_info]
        # The aliases whose input signature is the output's: a checked,
        # contiguous input holds the output as it is (run_fast).
        self._fast_alias = {o: i for o, i in self.aliases.items()
                            if o < len(self._out_alloc) and i < len(self._in_sig)
                            and self._in_sig[i] == (torch.Size(self._out_alloc[o][0]),
                                                    self._out_alloc[o][1])}
        # (weak references, pointers, version counters or None) of the last
        # checked call's inputs (_checked_inputs).
        self._last_in = None
        self._in_arr, self._in_data = self._template(self.input_info)
        self._out_arr, self._out_data = self._template(self.output_info)
        self._views = self._view_plan(output_views or {})
        # The persistent outputs (neither donated, a view, nor packed), and
        # their tensors per (calling thread, stream): {output index: tensor},
        # allocated on first use.
        self._persistent_by_caller: Dict[Tuple[int, int], Dict[int, torch.Tensor]] = {}
        self._persistent = {
            int(o) for o in persistent_outputs
            if 0 <= int(o) < len(self._out_alloc) and int(o) not in self.aliases
            and int(o) not in self._views and all(int(o) != b for b in self._views.values())}
        self._pack = self._pack_plan([o for o in packed_outputs
                                      if o not in self._views and o not in self._persistent])
        self._fixed = sorted({int(k) for k in fixed_inputs if 0 <= int(k) < len(self.input_info)})
        self.fixed_input_moved = False
        self._n_in = len(self.input_info)
        self._n_out = len(self.output_info)
        with _SESSIONS_LOCK:  # last: invalidate_all_parameters sees it complete
            _SESSIONS.add(self)

    # Byte alignment of each packed output in its shared allocation (the
    # kernels' 16-byte vector paths need 16; the caching allocator gives 512).
    PACK_ALIGN = 256

    def _pack_plan(self, packed: Sequence[int]):
        """Outputs allocated together (`packed_outputs`: outputs that live and
        die together, the tensors a training forward saves for its backward):
        per dtype one torch.empty, each output a contiguous view of it at an
        aligned offset, instead of one allocation per output (some 9 µs of
        host time each, before the first kernel can start: 389 outputs of
        the 1B LLaMA forward took 3.5 ms). Outputs of one shape whose size
        keeps the alignment come from one unbind (one call for all). Donated
        outputs (aliases) are not packed. Returns ([(dtype, elements,
        stacks [(outputs, offset, shape)], singles [(output, offset, shape,
        strides)])], the packed output indices); ([], set()) for none."""
        groups: Dict[torch.dtype, list] = {}
        for o in sorted(set(int(o) for o in packed)):
            if o < 0 or o >= len(self._out_alloc) or o in self.aliases:
                continue
            shape, dtype = self._out_alloc[o]
            groups.setdefault(dtype, []).append((o, tuple(shape)))
        plan, members = [], set()
        for dtype, outs in groups.items():
            if len(outs) < 2:
                continue
            step = max(1, self.PACK_ALIGN // torch.empty((), dtype=dtype).element_size())
            by_shape: Dict[tuple, List[int]] = {}
            for o, shape in outs:
                by_shape.setdefault(shape, []).append(o)
            at, stacks, singles = 0, [], []
            for shape, os in by_shape.items():
                numel = math.prod(shape)
                if len(os) > 1 and numel % step == 0:
                    stacks.append((os, at, shape))
                    at += numel * len(os)
                    continue
                strides = [1] * len(shape)
                for d in range(len(shape) - 2, -1, -1):
                    strides[d] = strides[d + 1] * max(shape[d + 1], 1)
                for o in os:
                    singles.append((o, at, shape, tuple(strides)))
                    at += (numel + step - 1) // step * step
            members.update(o for o, _ in outs)
            plan.append((dtype, max(at, 1), stacks, singles))
        return plan, members

    def _view_plan(self, views: Dict[int, int]) -> Dict[int, int]:
        """{output: the output whose memory it shares}: outputs that hold the
        same elements in the same order as another (`output_views`: saved
        tensors that are reshapes of one value, which the executable copies
        from one output buffer to the other). Passing one address for both
        makes the runtime skip that copy (it skips a copy onto itself);
        the output is then a view, as in eager. Kept only for outputs of
        one dtype and element count, neither a donated input's, pointing at
        an output that is no view itself."""
        n = len(self._out_alloc)
        plan = {}
        for a, b in views.items():
            a, b = int(a), int(b)
            if not (0 <= a < n and 0 <= b < n) or a == b or a in self.aliases or b in self.aliases:
                continue
            (sa, da), (sb, db) = self._out_alloc[a], self._out_alloc[b]
            if da != db or math.prod(sa) != math.prod(sb):
                continue
            plan[a] = b
        return {a: b for a, b in plan.items() if b not in plan}

    def _packed(self):
        """{output index: its tensor} for the packed outputs of one call."""
        got = {}
        for dtype, numel, stacks, singles in self._pack[0]:
            flat = torch.empty(numel, dtype=dtype, device=self.device)
            for os, at, shape in stacks:
                n = math.prod(shape)
                got.update(zip(os, flat[at:at + n * len(os)].view(len(os), *shape).unbind(0)))
            for o, at, shape, strides in singles:
                got[o] = flat.as_strided(shape, strides, at)
        return got

    def _persistent_outputs(self, stream: int) -> Dict[int, torch.Tensor]:
        """The persistent output tensors of this thread and `stream` (see the
        class docstring), allocated on first use."""
        key = (threading.get_ident(), stream)
        got = self._persistent_by_caller.get(key)
        if got is None:
            got = self._persistent_by_caller[key] = {
                o: torch.empty(self._out_alloc[o][0], dtype=self._out_alloc[o][1], device=self.device)
                for o in sorted(self._persistent)}
        return got

    def _template(self, infos: Sequence[TensorInfo]):
        """An llmc_tensor array describing `infos` (data NULL) and a view of
        its data fields: element 4*i of the uint64 view (32-byte structs, data
        first)."""
        assert ctypes.sizeof(_Tensor) == 32 and _Tensor.data.offset == 0
        arr = (_Tensor * max(len(infos), 1))()
        for k, info in enumerate(infos):
            rank = len(info.shape)
            shape = (ctypes.c_int64 * max(rank, 1))(*info.shape)
            self._keep.append(shape)
            arr[k].dtype = TORCH_TO_LLMC[info.dtype]
            arr[k].rank = rank
            arr[k].shape = shape
        data = memoryview(arr).cast("B").cast("Q")
        return arr, data

    def _stream(self) -> int:
        """The raw CUstream of torch's current stream on our device."""
        get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if get is not None:
            return get(self._device_index)
        return torch.cuda.current_stream(self.device).cuda_stream

    # The runtime's kTensorAlignment (Session.h): every input and output
    # address a multiple of it (its kernels use 16-byte vectors).
    TENSOR_ALIGN = 16

    def _needs_copy(self, t: torch.Tensor, k: int, ptr: int) -> bool:
        """Whether input `k`, tensor `t` at address `ptr`, must be passed as
        a copy: non-contiguous, or contiguous at an address the runtime
        refuses (a view into the middle of a row, e.g. a flat buffer's
        slice) unless the runtime stages it (copies it through its own
        aligned buffer)."""
        return not t.is_contiguous() or (ptr % self.TENSOR_ALIGN != 0 and t.numel() > 0
                                         and k not in self._staged_set)

    @staticmethod
    def _version(t: torch.Tensor) -> Optional[int]:
        """t's version counter; None for an inference tensor (none kept)."""
        return None if t.is_inference() else t._version

    def _contiguous(self, k: int, t: torch.Tensor) -> torch.Tensor:
        """The contiguous, aligned copy of input `k` (one that _needs_copy):
        for a parameter, the kept copy while its source is unchanged (see
        the class docstring), else a new copy."""
        if self.always_prepare or k not in self._param_set:
            return t.clone(memory_format=torch.contiguous_format)
        version = self._version(t)
        key = (t.data_ptr(), version, t.stride())
        kept = self._param_copies.get(k)
        if kept is not None and version is not None and kept[0] == key:
            return kept[1]
        copy = t.clone(memory_format=torch.contiguous_format)
        self._param_copies[k] = (key, copy)  # the old copy is freed only now
        return copy

    def invalidate_parameters(self):
        """Makes the next call prepare the parameters again and copy
        non-contiguous ones anew: for weights changed in a way the version
        counters do not see (writes through `.data`, into a flat buffer the
        parameters are `.data` views of, into a tensor assigned to `.data`)."""
        with self._run_lock:
            self._param_copies.clear()
            self._held_keys = None
            if self._params and hasattr(self, "_handle"):  # created (or a test's stand-in)
                _check(self._lib.llmc_session_invalidate_parameters(self._handle),
                       "invalidating the session's prepared parameters")

    def _guard(self, inputs: Sequence[torch.Tensor]):
        """Before a run: invalidates the runtime's prepared parameters when a
        parameter input was updated in place, and keeps this call's parameter
        tensors alive until the next call (see the class docstring)."""
        if not self._params:
            return
        if self.always_prepare:
            changed = True
        else:
            held = [inputs[k] for k in self._params]
            keys = [(t.data_ptr(), self._version(t)) for t in held]
            last = self._held_keys
            changed = last is not None and any(
                p == q and (v is None or v != w) for (p, v), (q, w) in zip(keys, last))
            self._held, self._held_keys = held, keys
        if changed:
            _check(self._lib.llmc_session_invalidate_parameters(self._handle),
                   "invalidating the session's prepared parameters")

    def _checked_inputs(self, inputs: Sequence[torch.Tensor]):
        """(the input pointers, {index: non-contiguous input}) when every
        input matches the executable's signature (dtype, shape) and lies on
        the session's GPU, else None.

        What the previous call checked is remembered (self._last_in: weak
        references, pointers, version counters): an input that is the very
        same tensor object, at the same address and with the same version
        counter as then (weights, buffers: graph inputs at fixed addresses)
        keeps its checked signature, so only the others are looked at. The
        in-place ops that change a tensor's shape or strides (t_, resize_,
        as_strided_, ...) bump its version counter; the addresses are
        compared in one C++ call (torch._C._tensors_data_ptrs_at_indices_equal,
        as PyTorch's CUDA graph trees check static inputs). Inference tensors
        (no version counter) and non-contiguous inputs are checked on every
        call. A 7B decode step has ~300 inputs, 2 of them new each step."""
        n = self._n_in
        last = self._last_in
        todo = range(n)
        if last is not None:
            refs, ptrs, versions = last
            keep = [k for k in range(n) if versions[k] is not None
                    and refs[k]() is inputs[k] and inputs[k]._version == versions[k]]
            if keep and _ptrs_equal(list(inputs), ptrs, keep):
                kept = set(keep)
                todo = [k for k in range(n) if k not in kept]
            data, refs, versions = list(ptrs), list(refs), list(versions)
        else:
            data, refs, versions = [0] * n, [None] * n, [None] * n
        dev = self._device_index
        copies = None
        sig = self._in_sig
        for k in todo:
            t = inputs[k]
            shape, dtype = sig[k]
            if t.dtype is not dtype or t.shape != shape or t.get_device() != dev:
                self._last_in = None
                return None
            data[k] = t.data_ptr()
            refs[k] = weakref.ref(t)
            versions[k] = None
            if self._needs_copy(t, k, data[k]):
                copies = copies or {}
                copies[k] = t
            elif not t.is_inference():
                versions[k] = t._version
        if last is not None and self._fixed and not self.fixed_input_moved:
            self.fixed_input_moved = any(data[k] != last[1][k] for k in self._fixed)
        self._last_in = (refs, list(data), versions)
        return data, copies

    def run_fast(self, inputs: Sequence[torch.Tensor]) -> Optional[List[torch.Tensor]]:
        """run(inputs) when every input matches the executable's signature
        (dtype, shape) and lies on the session's GPU; None (nothing done)
        otherwise."""
        if len(inputs) != self._n_in:
            return None
        checked = self._checked_inputs(inputs)
        if checked is None:
            return None
        data, copies = checked
        # Outputs: the donated inputs that hold theirs (checked above, so
        # only contiguity is left), the packed ones, fresh tensors for the
        # others.
        outs, out_ptrs = [], []
        packed = self._packed() if self._pack[0] else None
        stream = self._stream()
        persistent = self._persistent_outputs(stream) if self._persistent else None
        for o, (shape, dtype) in enumerate(self._out_alloc):
            i = self._fast_alias.get(o)
            if o in self._views:
                outs.append(None)  # below, once the output it views exists
                out_ptrs.append(0)
            elif i is not None and not (copies and i in copies):
                outs.append(inputs[i])
                out_ptrs.append(data[i])
            elif packed is not None and o in packed:
                t = packed[o]
                outs.append(t)
                out_ptrs.append(t.data_ptr())
            elif persistent is not None and o in persistent:
                t = persistent[o]
                outs.append(t)
                out_ptrs.append(t.data_ptr())
            else:
                t = torch.empty(shape, dtype=dtype, device=self.device)
                outs.append(t)
                out_ptrs.append(t.data_ptr())
        for o, b in self._views.items():
            outs[o] = outs[b].view(self._out_alloc[o][0])
            out_ptrs[o] = out_ptrs[b]
        with self._run_lock:
            self._guard(inputs)
            if copies:
                for k, t in copies.items():
                    copies[k] = c = self._contiguous(k, t)
                    data[k] = c.data_ptr()
            if self._n_in:
                self._in_data[0::4] = array.array("Q", data)
            if self._n_out:
                self._out_data[0::4] = array.array("Q", out_ptrs)
            status = self._lib.llmc_session_run(self._handle, self._in_arr, self._n_in,
                                                self._out_arr, self._n_out,
                                                ctypes.c_void_p(stream))
        if status:
            _check(status, "running on inputs " + ", ".join(
                f"{t.dtype}{list(t.shape)}" for t in inputs))
        del copies  # kept alive across the (asynchronous) enqueue
        return outs

    def _outputs(self, inputs: Sequence[torch.Tensor], alloc) -> List[torch.Tensor]:
        """Fresh output tensors (the packed ones from one allocation), except
        the donated inputs (self.aliases) that can hold their output as they
        are (contiguous, on the session's GPU) and the views of another
        output (self._views)."""
        packed = self._packed() if self._pack[0] else {}
        persistent = self._persistent_outputs(self._stream()) if self._persistent else {}
        outs = [packed[o] if o in packed else
                None if o in self._views else
                persistent[o] if o in persistent and alloc[o] == self._out_alloc[o] else
                torch.empty(shape, dtype=dtype, device=self.device)
                for o, (shape, dtype) in enumerate(alloc)]
        for o, i in self.aliases.items():
            if o < len(outs) and i < len(inputs):
                t = inputs[i]
                if (not self._needs_copy(t, i, t.data_ptr()) and t.dtype is outs[o].dtype
                        and t.shape == outs[o].shape
                        and t.get_device() == self._device_index):
                    outs[o] = t
        for o, b in self._views.items():
            outs[o] = outs[b].view(alloc[o][0])
        return outs

    def run(self, inputs: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        outs = self.run_fast(inputs)
        if outs is not None:
            return outs
        keep: list = []
        outs = self._outputs(inputs, [(tuple(i.shape), i.dtype) for i in self.output_info])
        out_structs = [_tensor_struct(t, keep) for t in outs]
        out_arr = (_Tensor * max(len(outs), 1))(*out_structs)
        with self._run_lock:
            if len(inputs) == self._n_in:  # else the runtime names the mismatch
                self._guard(inputs)
            ins = []
            for k, t in enumerate(inputs):
                if self._needs_copy(t, k, t.data_ptr()):
                    t = self._contiguous(k, t)
                keep.append(t)
                ins.append(_tensor_struct(t, keep))
            in_arr = (_Tensor * max(len(ins), 1))(*ins)
            status = self._lib.llmc_session_run(self._handle, in_arr, len(ins),
                                                out_arr, len(outs),
                                                ctypes.c_void_p(self._stream()))
        _check(status, "running on inputs " + ", ".join(
            f"{t.dtype}{list(t.shape)}" for t in inputs))
        return outs

    GRAPH_STATS = ("captures", "instantiations", "updates", "replays", "launches",
                   "private_stream_runs", "cached")

    def graph_stats(self) -> Optional[Dict[str, object]]:
        """The runtime's CUDA graph counters (llmc_session_graph_stats: keys
        GRAPH_STATS, and "disabled_reason", "" while graphs are on); None when
        the library predates them."""
        fn = getattr(self._lib, "llmc_session_graph_stats", None)
        if fn is None:
            return None
        counts = (ctypes.c_int64 * len(self.GRAPH_STATS))()
        reason = ctypes.create_string_buffer(1024)
        _check(fn(self._handle, counts, reason, len(reason)), "reading graph statistics")
        stats: Dict[str, object] = dict(zip(self.GRAPH_STATS, list(counts)))
        stats["disabled_reason"] = reason.value.decode("utf-8", "replace")
        return stats

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h:
            self._lib.llmc_session_release(h)
            self._handle = None
