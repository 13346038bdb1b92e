// Three live arena buffers of 2^61 bytes each: the third does not fit
// below 2^62 (llmc-plan-arena.mlir).
exec.executable @huge {
  %b0 = exec.buffer arena 2305843009213693952 bytes live [0, 1]
  %b1 = exec.buffer arena 2305843009213693952 bytes live [0, 1]
  %b2 = exec.buffer arena 2305843009213693952 bytes live [0, 1]
}
