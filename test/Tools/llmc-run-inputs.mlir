// llmc-run --input: FILE.f32 / FILE.i64 values converted to the argument's
// type, FILE.bin or FILE.<its dtype> its raw storage; the file must be a
// regular file of exactly the argument's size, integer arguments take
// integral values in range. Before: every name other than .i64 was read as
// float32 (raw i32 data turned into zeros), a FIFO blocked, /dev/zero was
// read until memory ran out.
// RUN: rm -rf %t && mkdir %t
// RUN: python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<4i',1,2,3,4))" %t/ints.bin
// RUN: python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<4H',0x3f80,0x4000,0x4040,0x4080))" %t/h.bf16
// RUN: python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<4f',1,2,3,4.5))" %t/v.f32
// RUN: python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<4q',1,2,3,2**40))" %t/v.i64
// RUN: python3 -c "import sys; open(sys.argv[1],'wb').write(bytes([1,0,1]))" %t/mask.bin
// RUN: python3 -c "import sys; open(sys.argv[1],'wb').write(bytes([1,0,2]))" %t/badmask.bin
// RUN: mkfifo %t/fifo.bin && ln -s /dev/zero %t/zero.bin && mkdir %t/dir.bin
// NumPy arrays (.npy, written here without numpy: magic, version 1.0, a
// header dict padded so the data starts at byte 128, then the data).
// RUN: python3 -c "import struct,sys; d=\"{'descr': '%%s', 'fortran_order': %%s, 'shape': %%s, }\"; w=lambda p,descr,shape,data,fo='False': open(p,'wb').write(b'\x93NUMPY\x01\x00'+struct.pack('<H',118)+(d %% (descr,fo,shape)).ljust(117).encode()+b'\n'+data); w(sys.argv[1]+'/h.npy','<f4','(4,)',struct.pack('<4f',1,2,3,4.5)); w(sys.argv[1]+'/i.npy','<i8','(4,)',struct.pack('<4q',1,2,3,4)); w(sys.argv[1]+'/m.npy','|b1','(3,)',bytes([1,0,1])); w(sys.argv[1]+'/f8.npy','<f8','(4,)',struct.pack('<4d',1,2,3,4.25)); w(sys.argv[1]+'/shape.npy','<f4','(2, 2)',struct.pack('<4f',1,2,3,4)); w(sys.argv[1]+'/frac.npy','<f4','(4,)',struct.pack('<4f',1,2,3,4.5)); w(sys.argv[1]+'/ft.npy','<f4','(4,)',struct.pack('<4f',1,2,3,4),'True'); w(sys.argv[1]+'/c8.npy','<c8','(4,)',bytes(32)); w(sys.argv[1]+'/short.npy','<f4','(4,)',bytes(8)); w(sys.argv[1]+'/big.npy','<i8','(4,)',struct.pack('<4q',1,2,3,2**53+1)); open(sys.argv[1]+'/bad.npy','wb').write(b'PK')" %t
// RUN: llmc-run %s --fn=halves --input arg0=%t/h.npy --backend=ref | FileCheck %s --check-prefix=F32
// RUN: llmc-run %s --fn=halves --input arg0=%t/f8.npy --backend=ref | FileCheck %s --check-prefix=F8NPY
// RUN: llmc-run %s --fn=ints --input arg0=%t/i.npy --backend=ref | FileCheck %s --check-prefix=INTNPY
// RUN: llmc-run %s --fn=mask --input arg0=%t/m.npy --backend=ref | FileCheck %s --check-prefix=MASK
// RUN: not llmc-run %s --fn=halves --input arg0=%t/shape.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYSHAPE
// RUN: not llmc-run %s --fn=ints --input arg0=%t/frac.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYFRAC
// RUN: not llmc-run %s --fn=halves --input arg0=%t/ft.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYF
// RUN: not llmc-run %s --fn=halves --input arg0=%t/c8.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYTYPE
// RUN: not llmc-run %s --fn=halves --input arg0=%t/short.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYSHORT
// RUN: not llmc-run %s --fn=halves --input arg0=%t/bad.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYBAD
// RUN: not llmc-run %s --fn=longs --input arg0=%t/big.npy --backend=ref 2>&1 | FileCheck %s --check-prefix=NPYBIG
// Raw storage of the argument's own dtype.
// RUN: llmc-run %s --fn=ints --input arg0=%t/ints.bin --backend=ref | FileCheck %s --check-prefix=INTS
// RUN: llmc-run %s --fn=halves --input arg0=%t/h.bf16 --backend=ref | FileCheck %s --check-prefix=HALVES
// RUN: llmc-run %s --fn=mask --input arg0=%t/mask.bin --backend=ref | FileCheck %s --check-prefix=MASK
// Converted values, still checked against an integer argument's range.
// RUN: llmc-run %s --fn=halves --input arg0=%t/v.f32 --backend=ref | FileCheck %s --check-prefix=F32
// RUN: not llmc-run %s --fn=ints --input arg0=%t/v.f32 --backend=ref 2>&1 | FileCheck %s --check-prefix=FRAC
// RUN: not llmc-run %s --fn=ints --input arg0=%t/v.i64 --backend=ref 2>&1 | FileCheck %s --check-prefix=BIG
// RUN: not llmc-run %s --fn=mask --input arg0=%t/badmask.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=BADMASK
// Wrong names, sizes and kinds of file.
// RUN: not llmc-run %s --fn=halves --input arg0=%t/ints.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: not llmc-run %s --fn=ints --input arg0=%t/h.bf16 --backend=ref 2>&1 | FileCheck %s --check-prefix=EXT
// RUN: not llmc-run %s --fn=ints --input arg0=%t/zero.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=DEV
// RUN: not llmc-run %s --fn=ints --input arg0=%t/fifo.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=FIFO
// RUN: not llmc-run %s --fn=ints --input arg0=%t/dir.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=DIR
// RUN: not llmc-run %s --fn=ints --input arg0=/dev/zero --backend=ref 2>&1 | FileCheck %s --check-prefix=NOEXT
// RUN: not llmc-run %s --fn=ints --input arg0=%t/none.bin --backend=ref 2>&1 | FileCheck %s --check-prefix=NONE
// INTS: result0: tensor<4xi32> checksum 2.000000e+01
// INTNPY: result0: tensor<4xi32> checksum 2.000000e+01
// F8NPY: result0: tensor<4xbf16> checksum 2.050000e+01
// NPYSHAPE: llmc-run: error: --input arg0={{.*}}shape.npy: the .npy array has shape (2, 2), the argument (4)
// NPYFRAC: llmc-run: error: --input arg0={{.*}}frac.npy: value #3: argument 0 (tensor<4xi32>) takes integers in [-2147483648, 2147483647], found 4.5
// NPYF: llmc-run: error: --input arg0={{.*}}ft.npy: the .npy array is in Fortran order
// NPYTYPE: llmc-run: error: --input arg0={{.*}}c8.npy: the .npy element type '<c8' is not one llmc reads
// NPYSHORT: llmc-run: error: --input arg0={{.*}}short.npy: the .npy data has 8 bytes, expected 16
// NPYBAD: llmc-run: error: --input arg0={{.*}}bad.npy: not an .npy file
// NPYBIG: llmc-run: error: --input arg0={{.*}}big.npy: value #3 is 9007199254740993, beyond the 2^53 that llmc-run's values hold exactly
// HALVES: result0: tensor<4xbf16> checksum 2.000000e+01
// MASK: result0: tensor<3xf32> checksum 2.000000e+00
// F32: result0: tensor<4xbf16> checksum 2.100000e+01
// FRAC: llmc-run: error: --input arg0={{.*}}v.f32: value #3: argument 0 (tensor<4xi32>) takes integers in [-2147483648, 2147483647], found 4.5
// BIG: llmc-run: error: --input arg0={{.*}}v.i64: value #3: argument 0 (tensor<4xi32>) takes integers in [-2147483648, 2147483647], found 1099511627776
// BADMASK: llmc-run: error: --input arg0={{.*}}badmask.bin: byte #2 is 2; argument 0 (tensor<3xi1>) takes 0 or 1
// SIZE: llmc-run: error: --input arg0={{.*}}ints.bin: '{{.*}}ints.bin' has 16 bytes, expected exactly 8 (argument 0 (tensor<4xbf16>) holds 4 values of 2 bytes as raw bf16)
// EXT: llmc-run: error: --input arg0={{.*}}h.bf16: unknown input file type '.bf16'; name it FILE.npy (a NumPy array of the argument's shape), FILE.f32 (float32 values), FILE.i64 (int64 values), FILE.bin or FILE.i32 (raw i32 storage of argument 0)
// DEV: llmc-run: error: --input arg0={{.*}}zero.bin: '{{.*}}zero.bin' is a character device, not a regular file; llmc reads regular files only
// FIFO: llmc-run: error: --input arg0={{.*}}fifo.bin: '{{.*}}fifo.bin' is a FIFO, not a regular file; llmc reads regular files only
// DIR: llmc-run: error: --input arg0={{.*}}dir.bin: '{{.*}}dir.bin' is a directory, not a regular file; llmc reads regular files only
// NOEXT: llmc-run: error: --input arg0=/dev/zero: no file extension; name it FILE.npy
// NONE: llmc-run: error: --input arg0={{.*}}none.bin: file '{{.*}}none.bin' does not exist
func.func @ints(%x: tensor<4xi32>) -> tensor<4xi32> {
  %y = llm.add %x, %x : tensor<4xi32>
  return %y : tensor<4xi32>
}
func.func @halves(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %y = llm.add %x, %x : tensor<4xbf16>
  return %y : tensor<4xbf16>
}
func.func @longs(%x: tensor<4xi64>) -> tensor<4xi64> {
  %y = llm.add %x, %x : tensor<4xi64>
  return %y : tensor<4xi64>
}
func.func @mask(%m: tensor<3xi1>) -> tensor<3xf32> {
  %y = llm.cast %m : tensor<3xi1> to tensor<3xf32>
  return %y : tensor<3xf32>
}
