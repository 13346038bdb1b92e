"""A gpt-fast-style decoder (https://github.com/pytorch-labs/gpt-fast) for
generation tests and benchmarks: a static KV cache per layer in registered
buffers written with `cache[:, :, input_pos] = k`, RoPE tables and causal
mask rows indexed by `input_pos`, pre-norm RMSNorm, SwiGLU, greedy argmax of
the last position's logits. Shapes: tokens [B, T] int64, input_pos [T]
int64 (the positions of the T tokens); returns next tokens [B] int64.
Random weights (no downloads)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class KVCache(nn.Module):
    def __init__(self, batch, heads, max_seq, head_dim, dtype):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(batch, heads, max_seq, head_dim, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(batch, heads, max_seq, head_dim, dtype=dtype))

    def update(self, input_pos, k, v):
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Block(nn.Module):
    def __init__(self, dim, heads, ffn, batch, max_seq, dtype):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.attn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.kv = KVCache(batch, heads, max_seq, dim // heads, dtype)

    def forward(self, x, input_pos, cos, sin, mask):
        b, t, c = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).split(c, -1)
        q, k, v = (z.view(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        k, v = self.kv.update(input_pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, c))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class GptFast(nn.Module):
    def __init__(self, vocab=1000, dim=64, heads=4, ffn=176, layers=2, max_seq=64, batch=1,
                 dtype=torch.float32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, ffn, batch, max_seq, dtype) for _ in range(layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(max_seq).float(), inv)
        ang = torch.cat((ang, ang), -1)
        self.register_buffer("cos", ang.cos().to(dtype))
        self.register_buffer("sin", ang.sin().to(dtype))
        self.register_buffer("causal", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)))
        self.to(dtype)

    def forward(self, tokens, input_pos):
        mask = self.causal[None, None, input_pos]
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, input_pos, cos, sin, mask)
        logits = self.output(self.norm(x))
        return torch.argmax(logits[:, -1], dim=-1)


def generate(model, prompt, steps):
    """Greedy tokens after `prompt` [B, T]: one prefill call, then one call
    per token at positions T, T+1, ... Returns [B, steps]."""
    t = prompt.shape[1]
    dev = prompt.device
    with torch.no_grad():
        tok = model(prompt, torch.arange(t, device=dev))
        out = [tok]
        for i in range(steps - 1):
            tok = model(tok[:, None], torch.tensor([t + i], device=dev))
            out.append(tok)
    return torch.stack(out, 1)
