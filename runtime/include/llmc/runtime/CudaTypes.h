// Opaque CUDA (and NCCL) handle types, declared exactly as cuda.h does, so public
// runtime headers need not include cuda.h.
#ifndef LLMC_RUNTIME_CUDATYPES_H
#define LLMC_RUNTIME_CUDATYPES_H

typedef struct CUstream_st* CUstream;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
typedef struct CUgraphExec_st* CUgraphExec;
// As nccl.h declares it (an identical typedef may be repeated).
typedef struct ncclComm* ncclComm_t;

#endif  // LLMC_RUNTIME_CUDATYPES_H
