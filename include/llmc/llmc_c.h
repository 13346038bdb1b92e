/*===- llmc_c.h - C API of the llmc JIT compiler and runtime -----*- C -*-===*
 *
 * A C ABI for FFI users (the Python package loads it with ctypes). Opaque
 * handles with _create/_release, status returns, outputs last (out_*), no
 * exceptions across the boundary. Every function is thread-safe except that
 * one session runs one call at a time (calls are serialized inside).
 *
 * Errors: a function returns NULL on success or an llmc_status_t* that the
 * caller reads with llmc_status_code/llmc_status_message and frees with
 * llmc_status_free. Codes are those of absl::StatusCode (3 invalid argument
 * for a user mistake such as a wrong shape or dtype, 9 failed precondition
 * for a missing GPU or library, 12 unimplemented for an unsupported op,
 * 13 internal for an llmc bug, ...). Messages name the op or tensor and say
 * what was expected and what was found.
 *
 * Every handle is released exactly once with its _release function
 * (releasing NULL is a no-op; releasing twice is undefined behaviour, as with
 * free()).
 *
 * Tensors are dense row-major unless `strides` is given; `data` is a device
 * pointer for session inputs/outputs. Shapes are int64 element counts.
 *===----------------------------------------------------------------------===*/

#ifndef LLMC_LLMC_C_H
#define LLMC_LLMC_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLMC_C_API_VERSION 7 /* 2: NCCL communicators; 3: llmc_version; 4: llmc_executable_stats; 5: llmc_set_log_callback; 6: KV page pool; 7: serving engine */
#define LLMC_MAX_RANK 8

/* llmc's version, "MAJOR.MINOR.PATCH" (semantic versioning): a static,
 * NUL-terminated string the caller must not free. The same as the tools'
 * --version and the Python package's llmc.__version__. */
const char *llmc_version(void);

/*--- messages ---------------------------------------------------------------*/
/* What llmc reports on its own, apart from returned errors: a session that
 * turned CUDA graphs off (warning), warnings and remarks of a compile that
 * succeeded (warning / info, "loc: severity: message"). */
typedef enum llmc_log_level {
  LLMC_LOG_DEBUG = 0,
  LLMC_LOG_INFO = 1,
  LLMC_LOG_WARNING = 2,
  LLMC_LOG_ERROR = 3
} llmc_log_level;
/* `message` is NUL-terminated and valid only during the call. */
typedef void (*llmc_log_callback)(int level, const char *message, void *user_data);
/* Routes every later message to `callback` (with `user_data`); NULL restores
 * the default, stderr as "llmc: <level>: <message>". Thread-safe: messages
 * are delivered one at a time from the thread that logs them, and once this
 * returns no message goes to the previous callback. The callback may call
 * llmc on its own thread (a message that causes is delivered to it, nested)
 * but must not wait for another thread that calls llmc. */
void llmc_set_log_callback(llmc_log_callback callback, void *user_data);

/*--- status -----------------------------------------------------------------*/
typedef struct llmc_status_t llmc_status_t;
/* absl::StatusCode value; 0 for a NULL (OK) status. */
int llmc_status_code(const llmc_status_t *status);
/* NUL-terminated message owned by the status; "" for NULL. */
const char *llmc_status_message(const llmc_status_t *status);
void llmc_status_free(llmc_status_t *status);

/*--- element types ------------------------------------------------------------*/
typedef enum llmc_dtype {
  LLMC_DTYPE_F32 = 0,
  LLMC_DTYPE_F16 = 1,
  LLMC_DTYPE_BF16 = 2,
  LLMC_DTYPE_F8E4M3FN = 3,
  LLMC_DTYPE_F8E5M2 = 4,
  LLMC_DTYPE_I1 = 5, /* one byte per element, 0 or 1 */
  LLMC_DTYPE_I8 = 6,
  LLMC_DTYPE_I32 = 7,
  LLMC_DTYPE_I64 = 8,
} llmc_dtype;

typedef struct llmc_tensor {
  void *data;             /* device pointer (session I/O) */
  llmc_dtype dtype;
  int32_t rank;           /* 0..LLMC_MAX_RANK */
  const int64_t *shape;   /* rank entries */
  const int64_t *strides; /* rank entries in elements, or NULL = contiguous */
} llmc_tensor;

/*--- compiler -----------------------------------------------------------------*/
typedef struct llmc_compiler_t llmc_compiler_t;
typedef struct llmc_executable_t llmc_executable_t;

/* options: NULL or "key=value;key=value" with keys
 *   arch=sm_90a            NVRTC target (default: the GPU's, else sm_90a)
 *   fuse=0|1               fusion on/off (default 1)
 *   cache_dir=PATH         kernel cache directory
 *   precision=fp32|bf16|fp16|fp8   numerics policy (default fp32: the graph
 *                          as written; see CompilerOptions::precision)
 *   fp8_scaling=tensor|row         with precision=fp8: one scale per GEMM
 *                          operand, or per row of the LHS and column of the
 *                          RHS (CompilerOptions::fp8_scaling)
 *   weight_only=none|int8|int4     weight-only quantization of parameter
 *                          weights (CompilerOptions::weight_only) */
llmc_status_t *llmc_compiler_create(const char *options,
                                    llmc_compiler_t **out_compiler);
void llmc_compiler_release(llmc_compiler_t *compiler);

/* Compiles function `function` (NULL = the first) of the MLIR module text
 * `mlir` (length `mlir_len`), with the dynamic dimensions bound by
 * `shape_bindings` ("seq=7,batch=2"; NULL or "" when all shapes are static),
 * to an executable whose kernels are compiled by NVRTC. */
llmc_status_t *llmc_compile(llmc_compiler_t *compiler, const char *mlir,
                            size_t mlir_len, const char *function,
                            const char *shape_bindings,
                            llmc_executable_t **out_executable);

/* Loads an executable file (LLMCX). The file must be a regular file (a
 * FIFO, device or directory is refused without blocking) of at most 4 GiB;
 * it is checked (checksum, format version, then Executable::Validate: every
 * offset, extent, grid, rank and cubin against its own buffers) before it is
 * returned. Codes: 3 for a NULL argument or an executable that fails its
 * checks, 5 when the file does not exist, 9 when it is not a regular file,
 * 15 (data loss) when it is truncated or corrupt. */
llmc_status_t *llmc_executable_load(const char *path,
                                    llmc_executable_t **out_executable);
/* Writes `executable` to `path` atomically (a temporary file in the same
 * directory, renamed over it). `path` must be a regular file or not exist,
 * in a directory that exists: a special file (/dev/null) is refused and
 * left as it is, and no directory is created. */
llmc_status_t *llmc_executable_save(const llmc_executable_t *executable,
                                    const char *path);
void llmc_executable_release(llmc_executable_t *executable);

int32_t llmc_executable_num_inputs(const llmc_executable_t *executable);
int32_t llmc_executable_num_outputs(const llmc_executable_t *executable);
/* Signature of input/output `index`: out_shape must hold LLMC_MAX_RANK. */
llmc_status_t *llmc_executable_input_info(const llmc_executable_t *executable,
                                          int32_t index, llmc_dtype *out_dtype,
                                          int32_t *out_rank, int64_t *out_shape);
llmc_status_t *llmc_executable_output_info(const llmc_executable_t *executable,
                                           int32_t index, llmc_dtype *out_dtype,
                                           int32_t *out_rank, int64_t *out_shape);

/* Whether input `index` is a parameter (*out_is_parameter = 1, else 0): the
 * executable's parameter-preparation launches (weight casts, fp8 scaling,
 * pads, weight-only quantization) read it, and llmc_session_run re-runs them
 * only when the device pointer of a parameter differs from the last
 * preparation's, or after llmc_session_invalidate_parameters. A pointer
 * identifies contents only while the caller keeps that memory allocated and
 * unchanged: a caller that frees a parameter and passes new contents that the
 * allocator placed at the same address, or that overwrites it in place, must
 * invalidate (or keep the old allocation alive until the next run, so that
 * new contents land elsewhere). Code 3 for a NULL handle or output pointer or
 * an index outside [0, llmc_executable_num_inputs). */
llmc_status_t *llmc_executable_input_is_parameter(
    const llmc_executable_t *executable, int32_t index,
    int32_t *out_is_parameter);

/* The input whose buffer holds output `index` after a run (*out_input =
 * its index, else -1): a donated input (`llm.donate`) the executable updated
 * in place. Passing that input's buffer as this output skips the final copy.
 * Code 3 for a NULL handle or output pointer or an index outside
 * [0, llmc_executable_num_outputs). */
llmc_status_t *llmc_executable_output_alias_input(
    const llmc_executable_t *executable, int32_t index, int32_t *out_input);

/* What `executable` holds, for reports: out_counts[i] for i < n of
 *   0 distinct kernels, 1 launches per call (kernels, GEMMs, copies,
 *   collectives), 2 parameter-preparation launches (once per parameter set),
 *   3 cuBLASLt GEMMs per call, 4 attention launches cuDNN may run instead of
 *   llmc's kernel, 5 collectives per call, 6 arena bytes;
 * n may be smaller than LLMC_EXECUTABLE_STATS (the first n are written) but
 * not larger. Code 3 for a NULL handle or array, or n outside
 * [0, LLMC_EXECUTABLE_STATS]. */
#define LLMC_EXECUTABLE_STATS 7
llmc_status_t *llmc_executable_stats(const llmc_executable_t *executable,
                                     int64_t *out_counts, int32_t n);

/*--- session ------------------------------------------------------------------*/
typedef struct llmc_session_t llmc_session_t;

/* Loads `executable` on GPU `device_ordinal`. options: NULL or
 * "key=value" pairs separated by ';':
 *   cuda_graphs=0|1          replay the launches as a CUDA graph;
 *   staged_inputs=I[,J...]   inputs copied each run into buffers of the
 *                            session so the graph does not depend on where
 *                            they are (a token, a position); not parameters
 *                            nor donated inputs (code 3 otherwise);
 *   staged_output_bytes=N    outputs of at most N bytes written into buffers
 *                            of the session and copied out after the run.
 * (SessionOptions in llmc/runtime/Session.h; the staging keys only act with
 * cuda_graphs=1.) Fails with code 9 when no GPU or driver is present. */
llmc_status_t *llmc_session_create(const llmc_executable_t *executable,
                                   int32_t device_ordinal, const char *options,
                                   llmc_session_t **out_session);
void llmc_session_release(llmc_session_t *session);

/* Enqueues one run on `cuda_stream` (a CUstream; NULL = the legacy default
 * stream). Inputs and outputs must match the executable's signature exactly
 * and lie at 16-byte aligned addresses, since the kernels access them with
 * 16-byte vectors (code 3 otherwise, naming the tensor; nothing is enqueued).
 * Asynchronous: outputs are ready when the stream reaches this point. */
llmc_status_t *llmc_session_run(llmc_session_t *session,
                                const llmc_tensor *inputs, int32_t num_inputs,
                                const llmc_tensor *outputs, int32_t num_outputs,
                                void *cuda_stream);

/* CUDA graph counters of a session (options "cuda_graphs=1"), for tests and
 * diagnostics. out_counts (7 entries) receives, since the session was made:
 * captures, instantiations, updates (captures written into a cached graph),
 * replays (cached graphs launched as they were), graph launches, graph runs
 * on the session's private stream (callers on the legacy default stream),
 * graphs cached now. out_reason (reason_bytes, may be 0 with NULL) receives
 * why graphs were turned off after a capture or instantiation failure,
 * NUL-terminated and truncated to fit; "" while they are on. Code 3 for a
 * NULL session or out_counts. */
llmc_status_t *llmc_session_graph_stats(llmc_session_t *session,
                                        int64_t *out_counts, char *out_reason,
                                        size_t reason_bytes);

/* Weights changed in place: the next llmc_session_run re-runs the executable's
 * parameter-preparation launches (e.g. int8/int4 weight quantization), which
 * otherwise run only when a parameter input's device pointer changes.
 * Code 3 for a NULL session. */
llmc_status_t *llmc_session_invalidate_parameters(llmc_session_t *session);

/*--- NCCL communicators (tensor parallelism) ---------------------------------*
 * One process per GPU. Rank 0 makes an id with llmc_nccl_get_unique_id and
 * sends its 128 bytes to every rank by the caller's own means (MPI,
 * torch.distributed.broadcast_object_list, a file); every rank then calls
 * llmc_communicator_create with the same id and nranks, and loads the
 * executables of its rank (compiled from an llmc-shard'ed graph) with
 * llmc_session_create_with_communicator. Needs libnccl.so.2 (LLMC_LIBNCCL
 * names another file); code 9 without it. Set-up and waits never hang: NCCL
 * runs in non-blocking mode and a rank that failed or never started makes
 * the others fail with code 4 (deadline exceeded) after the timeout, the
 * communicator aborted. See docs/tensor-parallel.md. */
#define LLMC_NCCL_UNIQUE_ID_BYTES 128
typedef struct llmc_nccl_unique_id {
  char internal[LLMC_NCCL_UNIQUE_ID_BYTES]; /* ncclUniqueId, opaque */
} llmc_nccl_unique_id;
typedef struct llmc_communicator_t llmc_communicator_t;

/* A fresh id (ncclGetUniqueId); needs libnccl, not a GPU. */
llmc_status_t *llmc_nccl_get_unique_id(llmc_nccl_unique_id *out_id);

/* Joins the communicator `id` as rank `rank` (0 <= rank < nranks, code 3
 * otherwise) on GPU `device_ordinal`; returns when all nranks ranks joined.
 * `timeout_seconds` (> 0; 0 = the default of 300 s) bounds the set-up and
 * every llmc_communicator_wait. */
llmc_status_t *llmc_communicator_create(const llmc_nccl_unique_id *id,
                                        int32_t rank, int32_t nranks,
                                        int32_t device_ordinal,
                                        double timeout_seconds,
                                        llmc_communicator_t **out_communicator);
/* Finalizes and destroys the communicator (after the sessions using it). */
void llmc_communicator_release(llmc_communicator_t *communicator);
int32_t llmc_communicator_rank(const llmc_communicator_t *communicator);
int32_t llmc_communicator_nranks(const llmc_communicator_t *communicator);

/* Waits until the work enqueued on `cuda_stream` has finished, watching for
 * NCCL errors; on an error or after the timeout the communicator is aborted
 * and the status names the rank and the timeout (code 4 or 13). */
llmc_status_t *llmc_communicator_wait(llmc_communicator_t *communicator,
                                      void *cuda_stream);

/* llmc_session_create on the communicator's GPU, with its collectives
 * (all_reduce, all_gather, reduce_scatter) run over `communicator`, which
 * must outlive nothing: the session keeps it alive. */
llmc_status_t *llmc_session_create_with_communicator(
    const llmc_executable_t *executable, llmc_communicator_t *communicator,
    const char *options, llmc_session_t **out_session);

/*--- KV page pool -------------------------------------------------------------*
 * The paged KV cache of a serving loop (PagedAttention, Kwon et al., SOSP
 * 2023; vLLM's block manager; llmc::rt::KvPagePool in
 * llmc/runtime/KvPagePool.h): fixed-size pages of K and V, a block table per
 * sequence, pages shared by forked sequences and copied on write.
 *
 * Layout (what llm.paged_attention and llm.paged_kv_append read): for each
 * layer, key pages and value pages [num_pages, page_size, num_kv_heads,
 * head_dim], row-major, element_bytes per element. Position j of a sequence
 * is row j % page_size of page block_table[j / page_size]; its slot is
 * page * page_size + row, and its K row of layer l starts at
 * key_pages(l) + slot * num_kv_heads * head_dim * element_bytes.
 *
 * A step: llmc_kv_page_pool_append for each sequence of the batch (the
 * slots its new tokens' K/V go to), llmc_kv_page_pool_apply_pending_copies
 * on the step's stream (the copy-on-write copies), then the step with the
 * block tables and lengths of llmc_kv_page_pool_fill_batch_metadata. Fork
 * a sequence only once its rows are written. Sequence ids are int64 from 0,
 * never reused; an id that was never made or is released gives code 5 (not
 * found). Thread-safe. */
typedef struct llmc_kv_page_pool_t llmc_kv_page_pool_t;

typedef struct llmc_kv_page_pool_options {
  int64_t num_pages;     /* P, at most INT32_MAX */
  int64_t page_size;     /* tokens per page */
  int64_t num_layers;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t element_bytes; /* 1, 2 (bf16, f16) or 4 (f32) */
  int32_t device_ordinal; /* the GPU whose memory holds the pages */
  /* For tests and CPU-only CI: 1 puts the pages in host memory (the
   * runtime's fake device allocator) and makes copies with memcpy; no GPU
   * or driver is touched and the page addresses are host pointers. 0 for
   * serving. */
  int32_t host_memory;
} llmc_kv_page_pool_options;

/* Allocates the pages (2 * num_layers * num_pages * page_size *
 * num_kv_heads * head_dim * element_bytes bytes) from the GPU's memory pool.
 * Code 3 for a NULL argument or an option out of range (naming it,
 * "options.<field>"), checked before any GPU is touched; 8 when
 * the memory is not there (naming the bytes), 9 without a GPU or driver. */
llmc_status_t *llmc_kv_page_pool_create(const llmc_kv_page_pool_options *options,
                                        llmc_kv_page_pool_t **out_pool);
/* Frees the pages back to the GPU's memory pool, which may hand them out
 * again at once: GPU work that reads or writes them (steps, copies made by
 * llmc_kv_page_pool_apply_pending_copies) must be finished before, e.g. its
 * streams synchronized. */
void llmc_kv_page_pool_release(llmc_kv_page_pool_t *pool);

/* The device addresses of layer `layer`'s key and value pages (either
 * output may be NULL). Code 3 for a NULL pool or a layer outside
 * [0, num_layers). */
llmc_status_t *llmc_kv_page_pool_pages(const llmc_kv_page_pool_t *pool,
                                       int64_t layer, uint64_t *out_key_pages,
                                       uint64_t *out_value_pages);

/* A new, empty sequence. */
llmc_status_t *llmc_kv_page_pool_add_sequence(llmc_kv_page_pool_t *pool,
                                              int64_t *out_sequence);
/* Reserves the slots of `num_tokens` (>= 0) new tokens at the end of
 * `sequence` and writes them, in position order, to out_slots (num_tokens
 * entries; NULL allowed for 0). A shared, partially filled last page is
 * first replaced by a private copy (one pending copy). Code 8 (resource
 * exhausted) when the free pages do not suffice; nothing changes then. */
llmc_status_t *llmc_kv_page_pool_append(llmc_kv_page_pool_t *pool,
                                        int64_t sequence, int64_t num_tokens,
                                        int64_t *out_slots);
/* A new sequence sharing every page of `sequence`. */
llmc_status_t *llmc_kv_page_pool_fork(llmc_kv_page_pool_t *pool,
                                      int64_t sequence, int64_t *out_sequence);
/* Ends `sequence`; pages no other sequence holds become free. */
llmc_status_t *llmc_kv_page_pool_release_sequence(llmc_kv_page_pool_t *pool,
                                                  int64_t sequence);
/* Keeps the first `length` tokens of `sequence` (0 <= length <= its
 * length, code 3 otherwise), e.g. after rejected speculative tokens. */
llmc_status_t *llmc_kv_page_pool_truncate(llmc_kv_page_pool_t *pool,
                                          int64_t sequence, int64_t length);
llmc_status_t *llmc_kv_page_pool_length(const llmc_kv_page_pool_t *pool,
                                        int64_t sequence, int64_t *out_length);
/* Writes the number of pages of `sequence` (ceil(length / page_size)) to
 * *out_num_pages and its page ids to out_pages (`capacity` entries).
 * out_pages NULL with capacity 0 asks for the count only; otherwise code 3
 * when capacity is smaller than the count (*out_num_pages is still set), so
 * a non-NULL out_pages with capacity 0 gives code 3 unless the sequence has
 * no pages. A table never has more than num_pages entries. */
llmc_status_t *llmc_kv_page_pool_block_table(const llmc_kv_page_pool_t *pool,
                                             int64_t sequence, int32_t *out_pages,
                                             int64_t capacity,
                                             int64_t *out_num_pages);
/* The block_table [num_sequences, max_pages] (int32, row-major; entries past
 * a sequence's pages 0) and seq_lens [num_sequences] (int32) of the
 * sequences `sequences`, in host memory. On an error nothing is written:
 * code 3 for a NULL pool, num_sequences < 0, max_pages < 1, a NULL array
 * with num_sequences > 0, num_sequences * max_pages beyond INT64_MAX, a
 * sequence that needs more than max_pages pages or has more than INT32_MAX
 * tokens; code 5 for a sequence never made or released. */
llmc_status_t *llmc_kv_page_pool_fill_batch_metadata(
    const llmc_kv_page_pool_t *pool, const int64_t *sequences,
    int64_t num_sequences, int64_t max_pages, int32_t *out_block_table,
    int32_t *out_seq_lens);

/* Makes the pending copy-on-write copies (K and V of every layer) on
 * `cuda_stream` (a CUstream; NULL = the legacy default stream), in the order
 * they were recorded. On an error the copies not made stay pending. */
llmc_status_t *llmc_kv_page_pool_apply_pending_copies(llmc_kv_page_pool_t *pool,
                                                      void *cuda_stream);
/* The pending copies, for a caller that makes them itself (in this order,
 * before any copy taken later): takes the earliest min(capacity, pending)
 * of them, writes (src page, dst page) pairs to out_pairs (2 * capacity
 * entries) and their number to *out_num_copies, and forgets them. out_pairs
 * NULL with capacity 0 writes the number pending and takes nothing (cheap:
 * no walk over the pages); a non-NULL out_pairs with capacity 0 takes
 * nothing and writes 0. */
llmc_status_t *llmc_kv_page_pool_take_pending_copies(llmc_kv_page_pool_t *pool,
                                                     int64_t *out_pairs,
                                                     int64_t capacity,
                                                     int64_t *out_num_copies);

/* out_counts[i] for i < n of
 *   0 pages, 1 free pages, 2 used pages (a shared page counts once),
 *   3 shared pages, 4 sequences, 5 tokens (sum of the lengths), 6 filled
 *   slots (distinct slots holding a token), 7 pending copies, 8 copies on
 *   write since creation;
 * n may be smaller than LLMC_KV_PAGE_POOL_STATS but not larger. out_waste
 * (may be NULL) receives 1 - filled slots / (used pages * page_size), 0 when
 * no page is used. */
#define LLMC_KV_PAGE_POOL_STATS 9
llmc_status_t *llmc_kv_page_pool_stats(const llmc_kv_page_pool_t *pool,
                                       int64_t *out_counts, int32_t n,
                                       double *out_waste);
/* Checks the pool's bookkeeping (reference counts against the block tables,
 * free list against used pages); for tests. Code 13 naming the first
 * violation. */
llmc_status_t *llmc_kv_page_pool_check_invariants(const llmc_kv_page_pool_t *pool);

/*--- serving engine -----------------------------------------------------------*/
/* Continuous batching (Orca, OSDI 2022) with chunked prefill
 * (Sarathi-Serve, OSDI 2024) over a paged KV cache (PagedAttention, SOSP
 * 2023): llmc::rt::ServingEngine driving a serving-step function, the
 * calling convention of llmc/runtime/ServingStep.h (the 6 int32 batch
 * arrays, each layer's key and value pages [P, page_size, Hkv, D] donated,
 * then the weights; logits [rows, vocab] and the pages out), e.g.
 * examples/tiny_llama_serving_step.mlir or Python's
 * llmc.serving.llama_serving_step_mlir. The engine owns a KV page pool of
 * the function's page shape. On the GPU every step is padded to a token
 * bucket whose executable is compiled once and replayed as a CUDA graph;
 * with `reference` the same padding runs on the CPU reference executor (for
 * tests and CI; no GPU is touched). Not thread-safe beyond serialization:
 * calls on one engine are serialized inside. */
typedef struct llmc_serving_engine_t llmc_serving_engine_t;

typedef struct llmc_serving_engine_options {
  int64_t max_batch_tokens;     /* token budget of a step, >= max_sequences */
  int64_t max_sequences;        /* running requests at most, >= 1 */
  const int64_t *token_buckets; /* strictly ascending, the last >=
                                 * max_batch_tokens; NULL: powers of two up
                                 * to 32, then multiples of 64 up to
                                 * max_batch_tokens */
  int64_t num_token_buckets;
  int32_t device_ordinal;       /* the GPU (ignored with reference) */
  int32_t use_cuda_graphs;      /* 0 or 1 */
  int32_t reference;            /* 1: the CPU reference executor */
} llmc_serving_engine_options;

/* `compiler` compiles the buckets (NULL with reference). `weights`: the
 * function's arguments from 6 + 2 * layers on, in order, each with the
 * argument's dtype and shape; device pointers, or host pointers with
 * reference (copied). The caller keeps device weights alive and unchanged
 * while the engine lives. Code 3 for a NULL argument, an option out of
 * range (named "options.<field>"), MLIR that is not a serving step (naming
 * the argument) or a weight of the wrong dtype or shape (named); 8 when the
 * pages do not fit in memory; 9 without a GPU; a compile error of the
 * first bucket as llmc_compile's. */
llmc_status_t *llmc_serving_engine_create(llmc_compiler_t *compiler, const char *mlir,
                                          const char *function, const llmc_tensor *weights,
                                          int64_t num_weights,
                                          const llmc_serving_engine_options *options,
                                          llmc_serving_engine_t **out_engine);
void llmc_serving_engine_release(llmc_serving_engine_t *engine);
/* Compiles and loads every token bucket now (no-op with reference). */
llmc_status_t *llmc_serving_engine_warmup(llmc_serving_engine_t *engine);

typedef struct llmc_sampling_params {
  float temperature;          /* 0: greedy; > 0: softmax(logits / t) */
  float top_p;                /* (0, 1]: nucleus sampling */
  uint64_t seed;              /* with the request id and token index */
  int64_t max_new_tokens;     /* >= 1 */
  const int32_t *stop_tokens; /* num_stop_tokens ids, or NULL */
  int64_t num_stop_tokens;
} llmc_sampling_params;

/* Queues request `id` (unique among unfinished requests) with `prompt_len`
 * (>= 1) tokens in [0, vocab). Code 3 naming the field otherwise, or for a
 * request longer (prompt + max_new_tokens) than the block table holds. */
llmc_status_t *llmc_serving_engine_add_request(llmc_serving_engine_t *engine, int64_t id,
                                               const int32_t *prompt, int64_t prompt_len,
                                               const llmc_sampling_params *params);
/* One iteration. The tokens generated and the requests finished are kept
 * until the next step: read them with llmc_serving_engine_step_token and
 * llmc_serving_engine_step_finished. A failed step keeps no results; the
 * next step retries. */
llmc_status_t *llmc_serving_engine_step(llmc_serving_engine_t *engine,
                                        int64_t *out_num_tokens, int64_t *out_num_finished);
/* Token i (< out_num_tokens) of the last step. */
llmc_status_t *llmc_serving_engine_step_token(llmc_serving_engine_t *engine, int64_t i,
                                              int64_t *out_request_id, int32_t *out_token);
/* Finished request i (< out_num_finished) of the last step: its reason (0
 * stop token, 1 max_new_tokens, 2 failed), every generated token (owned by
 * the engine, valid until the next step) and, when failed, why ("" else). */
llmc_status_t *llmc_serving_engine_step_finished(llmc_serving_engine_t *engine, int64_t i,
                                                 int64_t *out_request_id, int32_t *out_reason,
                                                 const int32_t **out_tokens,
                                                 int64_t *out_num_tokens,
                                                 const char **out_error);
/* 1 while requests wait or run. */
llmc_status_t *llmc_serving_engine_has_work(llmc_serving_engine_t *engine, int32_t *out);
/* out_counts[i] for i < n of
 *   0 steps, 1 batched tokens, 2 prefill tokens, 3 decode tokens,
 *   4 recomputed tokens, 5 largest step, 6 partial prefills, 7 preemptions,
 *   8 requests added, 9 finished, 10 failed, 11 generated tokens,
 *   12 waiting, 13 running, 14 KV pages, 15 KV pages used;
 * n may be smaller than LLMC_SERVING_ENGINE_STATS but not larger;
 * out_kv_waste (may be NULL) as llmc_kv_page_pool_stats's. */
#define LLMC_SERVING_ENGINE_STATS 16
llmc_status_t *llmc_serving_engine_stats(llmc_serving_engine_t *engine, int64_t *out_counts,
                                         int32_t n, double *out_kv_waste);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMC_LLMC_C_H */
