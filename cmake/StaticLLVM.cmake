# Debian's MLIR CMake targets link LLVM through the 150 MB libLLVM.so. llmc's
# outputs must run on machines without LLVM (the GPU machine), so rewrite every
# imported MLIR target's link interface to use LLVM's static component libraries.
set(LLMC_LLVM_STATIC_COMPONENTS
  LLVMSupport LLVMRemarks LLVMCore LLVMBitstreamReader LLVMDemangle
  LLVMBinaryFormat LLVMTargetParser LLVMFrontendOpenMP LLVMFrontendOffloading
  LLVMFrontendAtomic LLVMFrontendDirective LLVMTransformUtils LLVMAnalysis
  LLVMProfileData LLVMObject LLVMMC LLVMMCParser LLVMTextAPI LLVMBitReader
  LLVMIRReader LLVMAsmParser LLVMDebugInfoDWARF LLVMDebugInfoDWARFLowLevel
  LLVMSymbolize LLVMObjectYAML LLVMDebugInfoCodeView LLVMDebugInfoPDB
  LLVMDebugInfoMSF LLVMDebugInfoBTF LLVMScalarOpts LLVMInstCombine
  LLVMAggressiveInstCombine LLVMTarget LLVMFrontendHLSL LLVMCodeGenTypes
  LLVMIRPrinter LLVMBitWriter)

function(llmc_rewrite_llvm_dylib target)
  if(NOT TARGET ${target})
    return()
  endif()
  get_target_property(imported ${target} IMPORTED)
  if(NOT imported)
    return()
  endif()
  get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT libs)
    return()
  endif()
  list(FIND libs LLVM idx)
  if(idx EQUAL -1)
    return()
  endif()
  list(REMOVE_ITEM libs LLVM)
  set(static_components)
  foreach(c ${LLMC_LLVM_STATIC_COMPONENTS})
    if(TARGET ${c})
      list(APPEND static_components ${c})
    endif()
  endforeach()
  list(APPEND libs ${static_components})
  set_target_properties(${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${libs}")
endfunction()

get_property(_llmc_mlir_libs GLOBAL PROPERTY MLIR_ALL_LIBS)
set(_llmc_all ${MLIR_ALL_LIBS} ${_llmc_mlir_libs} ${MLIR_LIBS} ${LLMC_LLVM_STATIC_COMPONENTS})
# Walk every imported target the MLIR/LLVM exports define.
get_property(_llmc_dir_targets DIRECTORY PROPERTY IMPORTED_TARGETS)
list(APPEND _llmc_all ${_llmc_dir_targets})
list(REMOVE_DUPLICATES _llmc_all)
foreach(t ${_llmc_all})
  llmc_rewrite_llvm_dylib(${t})
endforeach()
# Our own add_mlir_* / add_llvm_* helpers link "LLVM" when LLVM_LINK_LLVM_DYLIB is on.
set(LLVM_LINK_LLVM_DYLIB OFF)
set(MLIR_LINK_MLIR_DYLIB OFF)
