//===- ExecDialect.td - the exec dialect -------------------*- tablegen -*-===//
//
// The execution-level dialect of llmc: buffers, kernel launches, GEMMs,
// copies and collectives, in the order the runtime runs them.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_DIALECT_EXEC_IR_EXECDIALECT_TD
#define LLMC_DIALECT_EXEC_IR_EXECDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Exec_Dialect : Dialect {
  let name = "exec";
  let cppNamespace = "::llmc::exec";
  let summary = "Buffers, kernel launches, GEMMs, copies and collectives: what the runtime runs.";
  let description = [{
    The `exec` dialect is the last IR before `rt::Executable`: one
    `exec.executable` holds the signature (`exec.input`, `exec.output`),
    the device buffers (`exec.buffer`, one kind each: input, output, arena,
    constant, persistent), the CUDA kernels (`exec.kernel`) and the launch
    sequence in the order the runtime replays it (`exec.launch`,
    `exec.gemm`, `exec.copy`, `exec.collective`; those inside `exec.prepare`
    form the parameter-preparation segment, run once per parameter set).

    Every decision is in the IR: the arena planner (`llmc-plan-arena`)
    writes each arena buffer's `offset` and the executable's `arena_bytes`,
    and the translation to `rt::Executable`
    (llmc/Target/Executable/TranslateToExecutable.h) only copies fields.

    ```mlir
    exec.executable @f attributes {arena_bytes = 256 : i64} {
      exec.input "arg0" : tensor<64xf32>
      exec.output "result0" : tensor<64xf32>
      %b0 = exec.buffer input[0] 256 bytes
      %b1 = exec.buffer output[0] 256 bytes
      exec.kernel @neg_f32 source "extern \"C\" __global__ void neg_f32(...) {...}"
      exec.launch @neg_f32 grid [1, 1, 1] block [64, 1, 1] smem 0 (%b0[0], %b1[0], 64 : i32) label "neg"
    }
    ```
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

// A 64-bit signless integer read as int64_t (I64Attr reads uint64_t): byte
// sizes, offsets and indices, which the verifiers check for being negative.
def Exec_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                                "64-bit signless integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

class Exec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Exec_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Exec_BufferType : TypeDef<Exec_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "A device memory region launches read and write.";
  let description = [{
    The value of an `exec.buffer` op: a region of device memory of a known
    size. Launch operands are (buffer, byte offset) pairs, printed
    `%b[offset]`.

    ```mlir
    %b2 = exec.buffer arena 4096 bytes live [3, 5] offset 0
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Exec_BufferKind : I32EnumAttr<"BufferKind", "where a buffer's memory comes from", [
    I32EnumAttrCase<"input", 0>, I32EnumAttrCase<"output", 1>,
    I32EnumAttrCase<"arena", 2>, I32EnumAttrCase<"constant", 3>,
    I32EnumAttrCase<"persistent", 4>]> {
  let cppNamespace = "::llmc::exec";
}

def Exec_Epilogue : I32EnumAttr<"Epilogue", "cuBLASLt GEMM epilogue", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"bias", 1>,
    I32EnumAttrCase<"relu", 2>, I32EnumAttrCase<"gelu", 3>,
    I32EnumAttrCase<"relu_bias", 4>, I32EnumAttrCase<"gelu_bias", 5>]> {
  let cppNamespace = "::llmc::exec";
  let genSpecializedAttr = 0;
}

// Printed by name in an attribute dictionary: #exec.epilogue<relu_bias>.
def Exec_EpilogueAttr : EnumAttr<Exec_Dialect, Exec_Epilogue, "epilogue"> {
  let assemblyFormat = "`<` $value `>`";
}

def Exec_CollectiveKind : I32EnumAttr<"CollectiveKind", "NCCL collective", [
    I32EnumAttrCase<"all_reduce", 0>, I32EnumAttrCase<"all_gather", 1>,
    I32EnumAttrCase<"reduce_scatter", 2>]> {
  let cppNamespace = "::llmc::exec";
}

def Exec_Reduction : I32EnumAttr<"Reduction", "NCCL reduction", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"prod", 1>,
    I32EnumAttrCase<"max", 2>, I32EnumAttrCase<"min", 3>,
    I32EnumAttrCase<"avg", 4>]> {
  let cppNamespace = "::llmc::exec";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Exec_AttentionAttr : AttrDef<Exec_Dialect, "Attention"> {
  let mnemonic = "attention";
  let summary = "A cuDNN scaled dot-product attention that may replace a launch.";
  let description = [{
    The shape and numerics of `rt::AttentionSpec`: q and o are dense
    row-major [b, sq, hq, d], k and v [b, skv, hkv, d]; `causal` aligns at
    the bottom right; `dtype` is bf16 or f16. The q/k/v/o buffers are the
    launch's `attention(...)` operands.

    ```mlir
    #exec.attention<b = 1, sq = 128, skv = 128, hq = 32, hkv = 8, d = 128,
                    causal = true, scale = 0.0883883461 : f32, dtype = bf16>
    ```
  }];
  let parameters = (ins "int64_t":$b, "int64_t":$sq, "int64_t":$skv,
                        "int64_t":$hq, "int64_t":$hkv, "int64_t":$d,
                        "::mlir::BoolAttr":$causal, "::mlir::FloatAttr":$scale,
                        "::mlir::Type":$dtype);
  let assemblyFormat = "`<` struct(params) `>`";
}

#endif // LLMC_DIALECT_EXEC_IR_EXECDIALECT_TD
