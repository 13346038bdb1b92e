// The nesting limit of llmc/Support/ParseSource.h: every tool rejects a source
// nesting deeper than 256 levels with an error at the bracket (or alias use)
// that crosses the limit, where MLIR's recursive parser and printer used to
// overflow the stack (SIGSEGV). %S/Inputs/nesting.py writes the sources.

// 5,000 nested modules, in every tool.
// RUN: %python %S/Inputs/nesting.py modules 5000 > %t.modules.mlir
// RUN: not llmc-opt %t.modules.mlir 2>&1 | FileCheck %s --check-prefix=MODULES
// RUN: not llmc-compile %t.modules.mlir --arch=sm_90a -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=MODULES
// RUN: not llmc-run %t.modules.mlir --backend=ref 2>&1 | FileCheck %s --check-prefix=MODULES
// MODULES: modules.mlir:257:8: error: '{' nests 257 levels deep; llmc accepts at most 256 levels of nested '(', '[', '{' and '<'

// 10,000 nested array attributes.
// RUN: %python %S/Inputs/nesting.py arrays 10000 > %t.arrays.mlir
// RUN: not llmc-opt %t.arrays.mlir 2>&1 | FileCheck %s --check-prefix=ARRAYS
// RUN: not llmc-run %t.arrays.mlir --backend=ref 2>&1 | FileCheck %s --check-prefix=ARRAYS
// ARRAYS: arrays.mlir:1:286: error: '[' nests 257 levels deep

// Chains of 20,000 aliases, each wrapping the previous one: no line nests
// deeply, but the attribute and type do (MLIR's printer overflowed the stack
// on them). The use that crosses the limit is reported.
// RUN: %python %S/Inputs/nesting.py attr-aliases 20000 > %t.attr-aliases.mlir
// RUN: not llmc-opt %t.attr-aliases.mlir 2>&1 | FileCheck %s --check-prefix=ATTR-ALIASES
// ATTR-ALIASES: attr-aliases.mlir:257:10: error: '#a255' nests 257 levels deep through its alias definitions; llmc accepts at most 256
// RUN: %python %S/Inputs/nesting.py type-aliases 20000 > %t.type-aliases.mlir
// RUN: not llmc-opt %t.type-aliases.mlir 2>&1 | FileCheck %s --check-prefix=TYPE-ALIASES
// RUN: not llmc-compile %t.type-aliases.mlir --arch=sm_90a -o %t.llmcx 2>&1 | FileCheck %s --check-prefix=TYPE-ALIASES
// TYPE-ALIASES: type-aliases.mlir:257:15: error: '!t255' nests 257 levels deep through its alias definitions

// The '>' of '->' and of '>=' closes nothing: nested function types and
// integer sets still count every level.
// RUN: %python %S/Inputs/nesting.py arrows 300 > %t.arrows.mlir
// RUN: not llmc-opt %t.arrows.mlir 2>&1 | FileCheck %s --check-prefix=ARROWS
// ARROWS: arrows.mlir:1:5108: error: '(' nests 257 levels deep
// RUN: %python %S/Inputs/nesting.py integer-sets 300 > %t.sets.mlir
// RUN: not llmc-opt %t.sets.mlir 2>&1 | FileCheck %s --check-prefix=SETS
// SETS: sets.mlir:1:7886: error: '(' nests 257 levels deep

// At the limit, and below it through aliases, sources parse and print.
// RUN: %python %S/Inputs/nesting.py modules 256 | llmc-opt | FileCheck %s --check-prefix=AT-LIMIT
// RUN: %python %S/Inputs/nesting.py type-aliases 250 | llmc-opt | FileCheck %s --check-prefix=AT-LIMIT
// RUN: %python %S/Inputs/nesting.py arrows 200 | llmc-opt | FileCheck %s --check-prefix=AT-LIMIT
// AT-LIMIT: module

// Brackets in string literals and comments do not count.
// RUN: %python -c "print('// ' + '[' * 1000); print('module attributes {llm.s = \"' + '(' * 1000 + '\"} {}')" | llmc-opt | FileCheck %s --check-prefix=UNCOUNTED
// UNCOUNTED: module attributes {llm.s = "((((

// Under --split-input-file every chunk starts at depth 0: an unclosed chunk
// does not add to the next one.
// RUN: %python -c "print('module {\n' * 200 + '// -----\n' + 'module {\n' * 200 + '}\n' * 200)" > %t.split.mlir
// RUN: not llmc-opt --split-input-file %t.split.mlir 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT-NOT: levels deep
// SPLIT: error: expected
// SPLIT-NOT: levels deep
// RUN: not llmc-opt %t.split.mlir 2>&1 | FileCheck %s --check-prefix=NO-SPLIT
// NO-SPLIT: split.mlir:258:8: error: '{' nests 257 levels deep
