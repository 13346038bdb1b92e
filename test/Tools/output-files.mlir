// Files llmc-compile and llmc-run write: atomically (a temporary file in the
// target's directory renamed over it), regular files only, never into a
// directory that does not exist. Before: the rename replaced whatever the
// target was (as root, -o /dev/null turned the device node into a regular
// file holding the executable) and missing directories were created.
// RUN: rm -rf %t && mkdir %t
// RUN: not llmc-compile %s -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEVNULL
// RUN: test -c /dev/null
// RUN: not llmc-compile %s -o %t/missing/out.llmcx 2>&1 | FileCheck %s --check-prefix=NODIR
// RUN: not test -e %t/missing
// RUN: not llmc-compile %s -o %t 2>&1 | FileCheck %s --check-prefix=ISDIR
// RUN: mkfifo %t/fifo
// RUN: not llmc-compile %s -o %t/fifo 2>&1 | FileCheck %s --check-prefix=FIFO
// RUN: test -p %t/fifo
// A file, a symbolic link to one (written through, the link kept), stdout.
// RUN: llmc-compile %s -o %t/out.llmcx
// RUN: head -c 8 %t/out.llmcx | FileCheck %s --check-prefix=FILE
// RUN: ln -s out.llmcx %t/link.llmcx && llmc-compile %s -o %t/link.llmcx
// RUN: test -L %t/link.llmcx && cmp %t/link.llmcx %t/out.llmcx
// RUN: llmc-compile %s -o - > %t/stdout.llmcx && cmp %t/stdout.llmcx %t/out.llmcx
// RUN: not llmc-compile %s -o - --print-stats 2>&1 | FileCheck %s --check-prefix=STATS
// RUN: not llmc-compile %s -o %t/a.llmcx -o %t/b.llmcx 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not llmc-compile %s --arch=sm_80 --arch=sm_90a --arch=sm_80 2>&1 | FileCheck %s --check-prefix=ARCH
// RUN: not llmc-compile %s --shape seq=8 --shape seq=9 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: not llmc-compile %s --arch=sm_90a,sm_80 2>&1 | FileCheck %s --check-prefix=BADARCH
// RUN: not llmc-compile %s --arch=sm_75 2>&1 | FileCheck %s --check-prefix=OLDARCH
// RUN: not llmc-compile %s --arch=sm_9 2>&1 | FileCheck %s --check-prefix=ONEDIGIT
// RUN: ls %t | FileCheck %s --check-prefix=NOTEMP
// llmc-run: --output-dir must exist; --profile is checked before anything runs.
// RUN: not llmc-run %s --backend=ref --output-dir=%t/nodir 2>&1 | FileCheck %s --check-prefix=OUTDIR
// RUN: not test -e %t/nodir
// RUN: not llmc-run %s --backend=ref --output-dir=/dev/null 2>&1 | FileCheck %s --check-prefix=OUTDEV
// RUN: llmc-run %s --backend=ref --output-dir=%t
// RUN: test -f %t/result0.f32
// RUN: not llmc-run %s --bench --profile=/dev/null 2>&1 | FileCheck %s --check-prefix=PROFILE
// RUN: test -c /dev/null
// RUN: not llmc-run %s --bench --profile=%t/nodir/trace.json 2>&1 | FileCheck %s --check-prefix=PROFDIR
// RUN: not llmc-run %s --bench --profile=- 2>&1 | FileCheck %s --check-prefix=PROFSTDOUT
// DEVNULL: llmc-compile: error: -o: '/dev/null' is a character device, not a regular file; llmc writes regular files only
// NODIR: llmc-compile: error: -o: cannot write '{{.*}}/missing/out.llmcx': directory '{{.*}}/missing' does not exist (llmc does not create directories for the files it is asked to write)
// ISDIR: llmc-compile: error: -o: '{{.*}}' is a directory, not a regular file; llmc writes regular files only
// FIFO: llmc-compile: error: -o: '{{.*}}fifo' is a FIFO, not a regular file; llmc writes regular files only
// FILE: LLMCX 2
// STATS: llmc-compile: error: -o - writes the executable to stdout, where --print-stats prints too; write the executable to a file
// TWICE: llmc-compile: error: -o is given 2 times (-o={{.*}}a.llmcx, then -o={{.*}}b.llmcx); give it once
// ARCH: llmc-compile: error: --arch=sm_80 is given twice; give each arch once
// BADARCH: llmc-compile: error: --arch=sm_90a,sm_80: expected sm_<NN> or compute_<NN>, optionally with an 'a' suffix from sm_90 on or an 'f' suffix from sm_100 on (sm_90a, sm_80, sm_100f, compute_90)
// ONEDIGIT: llmc-compile: error: --arch=sm_9: expected sm_<NN> or compute_<NN>
// OLDARCH: llmc-compile: error: --arch=sm_75: llmc's kernels need sm_80 or newer (bf16, cp.async, mma.sync); give sm_80, sm_89 or sm_90a
// SHAPE: llmc-compile: error: --shape seq=9: 'seq' is already bound by --shape seq=8 (bind each dynamic dimension once)
// NOTEMP-NOT: .tmp.
// OUTDIR: llmc-run: error: --output-dir '{{.*}}nodir': the directory does not exist (llmc-run does not create it)
// OUTDEV: llmc-run: error: --output-dir '/dev/null' is a character device, not a directory
// PROFILE: llmc-run: error: --profile: '/dev/null' is a character device, not a regular file; llmc writes regular files only
// PROFDIR: llmc-run: error: --profile: cannot write '{{.*}}nodir/trace.json': directory '{{.*}}nodir' does not exist
// PROFSTDOUT: llmc-run: error: --profile='-': name a file (llmc-run prints its report on stdout)
func.func @f(%x: tensor<4x128xf32>) -> tensor<4x128xf32> {
  %z = llm.silu %x : tensor<4x128xf32>
  return %z : tensor<4x128xf32>
}
