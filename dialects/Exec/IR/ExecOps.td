//===- ExecOps.td - exec dialect operations ----------------*- tablegen -*-===//

#ifndef LLMC_DIALECT_EXEC_IR_EXECOPS_TD
#define LLMC_DIALECT_EXEC_IR_EXECOPS_TD

include "Exec/IR/ExecDialect.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

//===----------------------------------------------------------------------===//
// Container and signature
//===----------------------------------------------------------------------===//

def Exec_ExecutableOp : Exec_Op<"executable", [
    IsolatedFromAbove, SymbolTable, Symbol, NoTerminator, SingleBlock,
    NoRegionArguments]> {
  let summary = "A compiled program: signature, buffers, kernels and launches.";
  let description = [{
    One `rt::Executable`. Its block holds, in order: `exec.input` and
    `exec.output` (the signature, inputs and outputs numbered in order),
    `exec.buffer` (buffers numbered in order), `exec.kernel` (the kernel
    table, in order) and the launches in the order the runtime runs them,
    the parameter-preparation segment first (`exec.prepare`).
    `arena_bytes` is the size of the scratch arena, written by
    `llmc-plan-arena`; `symbol_bindings` maps each dynamic dimension name
    to the value this specialization was compiled for.

    The verifier checks that the sections come in that order, that
    input/output buffers name a signature entry and are exactly its bytes,
    that there is at most one `exec.prepare`, that it comes before every
    launch and reads only `parameter` inputs, that planned arena buffers lie
    inside `arena_bytes`, and that every output is written.

    ```mlir
    exec.executable @f attributes {arena_bytes = 0 : i64, symbol_bindings = {seq = 7 : i64}} {
      exec.input "arg0" : tensor<7x64xf32>
      exec.output "result0" : tensor<7x64xf32>
      %b0 = exec.buffer input[0] 1792 bytes
      %b1 = exec.buffer output[0] 1792 bytes
      exec.copy 1792 bytes from %b0[0] to %b1[0] label "copy"
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<Exec_I64Attr>:$arena_bytes,
                       OptionalAttr<DictionaryAttr>:$symbol_bindings);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The signature ops, in order.
    ::llvm::SmallVector<InputOp, 4> getInputs();
    ::llvm::SmallVector<OutputOp, 4> getOutputs();
  }];
}

def Exec_InputOp : Exec_Op<"input", [HasParent<"ExecutableOp">]> {
  let summary = "One input of the executable's signature.";
  let description = [{
    The inputs are numbered in order. `type` gives the element type and the
    concrete shape (dense row-major); `parameter` marks a weight that the
    parameter-preparation segment reads (`rt::TensorSig::parameter`).

    ```mlir
    exec.input "arg1" : tensor<4096x4096xbf16> parameter
    ```
  }];
  let arguments = (ins StrAttr:$name, TypeAttrOf<AnyStaticShapeTensor>:$type,
                       UnitAttr:$parameter);
  let assemblyFormat = "$name `:` $type (`parameter` $parameter^)? attr-dict";
  let hasVerifier = 1;
}

def Exec_OutputOp : Exec_Op<"output", [HasParent<"ExecutableOp">]> {
  let summary = "One output of the executable's signature.";
  let description = [{
    The outputs are numbered in order. `alias_input` names a donated input
    that holds this output's data after the call (`rt::TensorSig::alias_input`).

    ```mlir
    exec.output "result1" : tensor<1x64x2x16xbf16> alias_input 2
    ```
  }];
  let arguments = (ins StrAttr:$name, TypeAttrOf<AnyStaticShapeTensor>:$type,
                       OptionalAttr<Exec_I64Attr>:$alias_input);
  let assemblyFormat = "$name `:` $type (`alias_input` $alias_input^)? attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Buffers and kernels
//===----------------------------------------------------------------------===//

def Exec_BufferOp : Exec_Op<"buffer", [
    HasParent<"ExecutableOp">,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "A device buffer of one kind: input, output, arena, constant or persistent.";
  let description = [{
    Buffers are numbered in order (`rt::Buffer::id`). `input[i]`/`output[i]`
    are the caller's tensors (signature entry i, exactly its bytes);
    `constant` buffers hold `data` (exactly `bytes` bytes, uploaded at load);
    `persistent` buffers live as long as the session (written by the
    parameter-preparation segment); `arena` buffers are scratch inside the
    per-call arena, live over the launch steps `live = [first, last]` and
    placed at `offset` by `llmc-plan-arena`.

    ```mlir
    %b0 = exec.buffer input[0] 1792 bytes
    %b5 = exec.buffer arena 4096 bytes live [2, 4] offset 128
    %b6 = exec.buffer constant 4 bytes data "\00\00\80?"
    %b7 = exec.buffer persistent 8192 bytes
    ```
  }];
  let arguments = (ins Exec_BufferKind:$kind, Exec_I64Attr:$bytes,
                       OptionalAttr<Exec_I64Attr>:$io_index,
                       OptionalAttr<DenseI64ArrayAttr>:$live,
                       OptionalAttr<Exec_I64Attr>:$offset,
                       OptionalAttr<StrAttr>:$data);
  let results = (outs Exec_BufferType:$result);
  let assemblyFormat = [{
    $kind (`[` $io_index^ `]`)? $bytes `bytes` (`live` $live^)?
    (`offset` $offset^)? (`data` $data^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_KernelOp : Exec_Op<"kernel", [HasParent<"ExecutableOp">, Symbol]> {
  let summary = "A CUDA kernel: its source and how NVRTC compiles it.";
  let description = [{
    One entry of the kernel table (`rt::KernelSpec`), in order. `entry` is
    the `extern "C" __global__` symbol when it differs from the op's symbol
    name; `options` are NVRTC options, `headers` in-memory headers (name to
    contents); `arch` and `cubin` hold a prebuilt binary when there is one.
    `grid_dependency`: the kernel calls `llmcGridDependencyWait()` before its
    first access to memory an earlier launch may write or read, so the
    runtime may start it while the previous kernel finishes (programmatic
    dependent launch, `rt::KernelSpec::grid_dependency`).

    ```mlir
    exec.kernel @rms_norm_bf16 source "extern \"C\" __global__ void rms_norm_bf16(...) {...}" {options = ["-std=c++17"]}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, OptionalAttr<StrAttr>:$entry,
                       StrAttr:$source,
                       DefaultValuedAttr<StrArrayAttr, "{}">:$options,
                       OptionalAttr<DictionaryAttr>:$headers,
                       OptionalAttr<StrAttr>:$arch,
                       OptionalAttr<StrAttr>:$cubin,
                       UnitAttr:$grid_dependency);
  let assemblyFormat = "$sym_name (`entry` $entry^)? `source` $source attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The kernel's entry symbol: `entry`, or the op's symbol name.
    ::llvm::StringRef getEntryName() {
      return getEntry() ? *getEntry() : getSymName();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

def Exec_PrepareOp : Exec_Op<"prepare", [
    HasParent<"ExecutableOp">, NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "The parameter-preparation segment: launches run once per parameter set.";
  let description = [{
    Holds the first launches of the executable
    (`rt::Executable::num_prepare_launches`): they read only parameters
    (`exec.input ... parameter`), write persistent buffers and arena scratch
    of their own, and run once per parameter set; the launches after it run
    on every call. At most one, before every other launch.

    ```mlir
    exec.prepare {
      exec.launch @quantize_int8 grid [64, 1, 1] block [256, 1, 1] smem 0 (%b1[0], %b7[0]) label "prep"
    }
    ```
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

def Exec_LaunchOp : Exec_Op<"launch", [
    ParentOneOf<["ExecutableOp", "PrepareOp"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, AttrSizedOperandSegments]> {
  let summary = "A launch of a CUDA kernel with its grid, block, shared memory and arguments.";
  let description = [{
    Launches `kernel` (an `exec.kernel` of the enclosing executable) with
    `grid` and `block` dimensions and `smem` bytes of dynamic shared memory.
    Arguments, in kernel-parameter order: a buffer pointer `%b[offset]`
    (buffer address plus byte offset), `N : i32`, `N` (i64), `X : f32`, or a
    string: a by-value struct passed as its bytes. `attention(%q[..], %k[..],
    %v[..], %o[..][, %lse[..]]) #exec.attention<...>` attaches a cuDNN
    attention the runtime may run instead (the kernel stays the fallback);
    `lse`, the f32 [b, hq, sq] logsumexp a training forward saves, is
    written by both when present. Eleven operands (q, k, v, o, lse, dO, dQ,
    dK, dV, row sum, dQ accumulator) attach cuDNN's SDPA backward; the
    launches that carry the same backward attachment are its fallback
    together (rt::AttentionSpec::backward).

    ```mlir
    exec.launch @add_f32 grid [4, 1, 1] block [256, 1, 1] smem 0 (%b0[0], %b1[0], %b2[512], 1024, 1.0 : f32) label "add"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, DenseI64ArrayAttr:$grid,
                       DenseI64ArrayAttr:$block, Exec_I64Attr:$smem,
                       Variadic<Exec_BufferType>:$buffers, ArrayAttr:$args,
                       Variadic<Exec_BufferType>:$attention_buffers,
                       OptionalAttr<DenseI64ArrayAttr>:$attention_offsets,
                       OptionalAttr<Exec_AttentionAttr>:$attention,
                       OptionalAttr<StrAttr>:$label);
  let assemblyFormat = [{
    $kernel `grid` $grid `block` $block `smem` $smem
    custom<LaunchArgs>($buffers, $args)
    (`attention` `(` custom<BufferRefs>($attention_buffers, $attention_offsets)^ `)` $attention)?
    (`label` $label^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_GemmOp : Exec_Op<"gemm", [
    ParentOneOf<["ExecutableOp", "PrepareOp"]>, AttrSizedOperandSegments]> {
  let summary = "A cuBLASLt GEMM: D = alpha * op(A) @ op(B) + beta * C [+ bias] [activation].";
  let description = [{
    `rt::GemmSpec`, row-major: op(A) is [m, k], op(B) is [k, n], C and D are
    [m, n]; `lda`..`ldd` are row strides and `stride_a`..`stride_d` batch
    strides, in elements; `transa`/`transb` say A is stored [k, m] / B
    [n, k]. Operands are `%buffer[byte offset]`; C, the bias (n elements)
    and the fp8 scales (one f32 each) are optional. Attributes at their
    defaults (batch 1, strides 0, no transposes, f32 compute, alpha 1,
    beta 0, no epilogue) are not printed.

    ```mlir
    exec.gemm a %b0[0] b %b1[0] d %b2[0] {dtype_a = bf16, dtype_b = bf16, dtype_c = bf16, dtype_d = bf16,
        k = 64 : i64, lda = 64 : i64, ldb = 64 : i64, ldc = 128 : i64, ldd = 128 : i64,
        m = 7 : i64, n = 128 : i64, transb} label "q_proj"
    ```
  }];
  let arguments = (ins
      Exec_I64Attr:$m, Exec_I64Attr:$n, Exec_I64Attr:$k,
      DefaultValuedAttr<Exec_I64Attr, "1">:$batch,
      DefaultValuedAttr<Exec_I64Attr, "0">:$stride_a, DefaultValuedAttr<Exec_I64Attr, "0">:$stride_b,
      DefaultValuedAttr<Exec_I64Attr, "0">:$stride_c, DefaultValuedAttr<Exec_I64Attr, "0">:$stride_d,
      UnitAttr:$transa, UnitAttr:$transb,
      Exec_I64Attr:$lda, Exec_I64Attr:$ldb, Exec_I64Attr:$ldc, Exec_I64Attr:$ldd,
      TypeAttr:$dtype_a, TypeAttr:$dtype_b, TypeAttr:$dtype_c, TypeAttr:$dtype_d,
      DefaultValuedAttr<TypeAttr, "::mlir::Float32Type::get($_builder.getContext())">:$compute,
      DefaultValuedAttr<F32Attr, "1.0f">:$alpha, DefaultValuedAttr<F32Attr, "0.0f">:$beta,
      DefaultValuedAttr<Exec_EpilogueAttr, "::llmc::exec::Epilogue::none">:$epilogue,
      Exec_BufferType:$a, Exec_I64Attr:$a_offset,
      Exec_BufferType:$b, Exec_I64Attr:$b_offset,
      Optional<Exec_BufferType>:$c, OptionalAttr<Exec_I64Attr>:$c_offset,
      Exec_BufferType:$d, Exec_I64Attr:$d_offset,
      Optional<Exec_BufferType>:$bias, OptionalAttr<Exec_I64Attr>:$bias_offset,
      Optional<Exec_BufferType>:$scale_a, OptionalAttr<Exec_I64Attr>:$scale_a_offset,
      Optional<Exec_BufferType>:$scale_b, OptionalAttr<Exec_I64Attr>:$scale_b_offset,
      OptionalAttr<StrAttr>:$label);
  let assemblyFormat = [{
    `a` $a `[` $a_offset `]` `b` $b `[` $b_offset `]`
    (`c` $c^ `[` $c_offset `]`)? `d` $d `[` $d_offset `]`
    (`bias` $bias^ `[` $bias_offset `]`)?
    (`scale_a` $scale_a^ `[` $scale_a_offset `]`)?
    (`scale_b` $scale_b^ `[` $scale_b_offset `]`)?
    attr-dict (`label` $label^)?
  }];
  let hasVerifier = 1;
}

def Exec_CopyOp : Exec_Op<"copy", [ParentOneOf<["ExecutableOp", "PrepareOp"]>]> {
  let summary = "A device-to-device copy of a number of bytes.";
  let description = [{
    Copies `bytes` bytes from `%src[offset]` to `%dst[offset]`; both ranges
    lie inside their buffers.

    ```mlir
    exec.copy 1792 bytes from %b0[0] to %b1[0] label "copy"
    ```
  }];
  let arguments = (ins Exec_I64Attr:$bytes, Exec_BufferType:$src, Exec_I64Attr:$src_offset,
                       Exec_BufferType:$dst, Exec_I64Attr:$dst_offset,
                       OptionalAttr<StrAttr>:$label);
  let assemblyFormat = [{
    $bytes `bytes` `from` $src `[` $src_offset `]` `to` $dst `[` $dst_offset `]`
    (`label` $label^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Exec_CollectiveOp : Exec_Op<"collective", [ParentOneOf<["ExecutableOp", "PrepareOp"]>]> {
  let summary = "An NCCL collective over the session's communicator.";
  let description = [{
    `rt::CollectiveSpec`: `count` elements of `dtype` per rank sent
    (all_reduce, all_gather) or received (reduce_scatter), from
    `%send[offset]` into `%recv[offset]`, combined with `reduction`.

    ```mlir
    exec.collective all_reduce sum 4096 x bf16 from %b3[0] to %b3[0] label "all_reduce"
    ```
  }];
  let arguments = (ins Exec_CollectiveKind:$kind, Exec_Reduction:$reduction,
                       Exec_I64Attr:$count, TypeAttr:$dtype,
                       Exec_BufferType:$send, Exec_I64Attr:$send_offset,
                       Exec_BufferType:$recv, Exec_I64Attr:$recv_offset,
                       OptionalAttr<StrAttr>:$label);
  let assemblyFormat = [{
    $kind $reduction $count `x` $dtype `from` $send `[` $send_offset `]`
    `to` $recv `[` $recv_offset `]` (`label` $label^)? attr-dict
  }];
  let hasVerifier = 1;
}

#endif // LLMC_DIALECT_EXEC_IR_EXECOPS_TD
