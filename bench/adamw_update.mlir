// One AdamW update of a 5632 x 2048 bf16 parameter (the 1B LLaMA's MLP
// weight), as torch.compile(opt.step) imports a foreach AdamW step (lr 1e-4,
// betas (0.9, 0.999), eps 1e-8, weight decay 0.01): the step counter, the
// bias corrections from it, exp_avg = lerp(exp_avg, g, 0.1), exp_avg_sq =
// 0.999 exp_avg_sq + 0.001 g^2, p = p (1 - lr wd) - step_size exp_avg /
// (sqrt(exp_avg_sq) / sqrt(bc2) + eps). The parameter, both moments and the
// step are donated with the results they become (llm.aliasing_output), so
// the update kernel writes over them (|exp_avg_sq| is taken first, since
// llmc-run's random inputs may be negative):
//
//   llmc-run bench/adamw_update.mlir --bench --check=ref
//
// (its bytes: 4 reads + 3 writes of 23 MB per call).
func.func @adamw(%p: tensor<5632x2048xbf16> {llm.donate, llm.aliasing_output = 1 : i64}, %g: tensor<5632x2048xbf16>, %m: tensor<5632x2048xbf16> {llm.donate, llm.aliasing_output = 2 : i64},
                 %v: tensor<5632x2048xbf16> {llm.donate, llm.aliasing_output = 3 : i64}, %step: tensor<f32> {llm.donate, llm.aliasing_output = 0 : i64})
    -> (tensor<f32>, tensor<5632x2048xbf16>, tensor<5632x2048xbf16>, tensor<5632x2048xbf16>) {
  %one = llm.constant dense<1.0> : tensor<f32>
  %s = llm.add %step, %one : tensor<f32>
  %d = llm.sub %g, %m : tensor<5632x2048xbf16>
  %c01 = llm.constant dense<0.1> : tensor<bf16>
  %b01 = llm.broadcast %c01 : tensor<bf16> to tensor<5632x2048xbf16>
  %d1 = llm.mul %d, %b01 : tensor<5632x2048xbf16>
  %m1 = llm.add %m, %d1 : tensor<5632x2048xbf16>
  %c999 = llm.constant dense<0.999> : tensor<bf16>
  %b999 = llm.broadcast %c999 : tensor<bf16> to tensor<5632x2048xbf16>
  %va = llm.abs %v : tensor<5632x2048xbf16>
  %v0 = llm.mul %va, %b999 : tensor<5632x2048xbf16>
  %gg = llm.mul %g, %g : tensor<5632x2048xbf16>
  %c001 = llm.constant dense<0.001> : tensor<bf16>
  %b001 = llm.broadcast %c001 : tensor<bf16> to tensor<5632x2048xbf16>
  %gg1 = llm.mul %gg, %b001 : tensor<5632x2048xbf16>
  %v1 = llm.add %v0, %gg1 : tensor<5632x2048xbf16>
  %cwd = llm.constant dense<0.999999> : tensor<bf16>
  %bwd = llm.broadcast %cwd : tensor<bf16> to tensor<5632x2048xbf16>
  %pd = llm.mul %p, %bwd : tensor<5632x2048xbf16>
  %sq = llm.sqrt %v1 : tensor<5632x2048xbf16>
  %c0999 = llm.constant dense<0.999> : tensor<f32>
  %pw2 = llm.pow %c0999, %s : tensor<f32>
  %c1 = llm.constant dense<1.0> : tensor<f32>
  %bc2 = llm.sub %pw2, %c1 : tensor<f32>
  %nbc2 = llm.neg %bc2 : tensor<f32>
  %sbc2 = llm.sqrt %nbc2 : tensor<f32>
  %sbc2h = llm.cast %sbc2 : tensor<f32> to tensor<bf16>
  %bsb = llm.broadcast %sbc2h : tensor<bf16> to tensor<5632x2048xbf16>
  %den0 = llm.div %sq, %bsb : tensor<5632x2048xbf16>
  %ceps = llm.constant dense<1.0e-08> : tensor<bf16>
  %beps = llm.broadcast %ceps : tensor<bf16> to tensor<5632x2048xbf16>
  %den1 = llm.add %den0, %beps : tensor<5632x2048xbf16>
  %c09 = llm.constant dense<0.9> : tensor<f32>
  %pw1 = llm.pow %c09, %s : tensor<f32>
  %bc1 = llm.sub %pw1, %c1 : tensor<f32>
  %clr = llm.constant dense<0.0001> : tensor<f32>
  %ss = llm.div %bc1, %clr : tensor<f32>
  %rss = llm.div %c1, %ss : tensor<f32>
  %rssh = llm.cast %rss : tensor<f32> to tensor<bf16>
  %brs = llm.broadcast %rssh : tensor<bf16> to tensor<5632x2048xbf16>
  %den2 = llm.div %den1, %brs : tensor<5632x2048xbf16>
  %upd = llm.div %m1, %den2 : tensor<5632x2048xbf16>
  %p1 = llm.add %pd, %upd : tensor<5632x2048xbf16>
  return %s, %p1, %m1, %v1 : tensor<f32>, tensor<5632x2048xbf16>, tensor<5632x2048xbf16>, tensor<5632x2048xbf16>
}
