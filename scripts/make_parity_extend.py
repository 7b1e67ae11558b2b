#!/usr/bin/env python3
"""Writes PyTorch parity cases for the layers PyTorch 1.13 does not have as modules: RMSNorm and
grouped-query / multi-query attention, alone, inside encoder and decoder layers, and in a whole
translator. The references are written out here as formulas, as a reader would check them:

  RMSNorm:  x * rsqrt(mean(x^2, -1) + eps) * weight                      (no bias, no centring)
  GQA:      q = q_proj(x) in H heads; k = k_proj(m), v = v_proj(m) in KV heads, each repeated
            H / KV times with repeat_interleave (query head h uses key/value head h // (H / KV));
            weights = softmax(q k^T / sqrt(d_k), masked -inf); out_proj(concat(weights v))

Uses run_case(), f32() and the masks of the shared generator (../shared/parity/make_parity.py by
default); needs Debian's python3-torch:
  /usr/bin/python3 scripts/make_parity_extend.py tests/parity/extend
"""
import math, os, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import parity_generator  # scripts/parity_generator.py (the script's folder is on sys.path)

mp = parity_generator.load()
torch.set_default_dtype(torch.float64)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ScaleNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.scale = nn.Parameter(torch.full((1,), math.sqrt(d)))
        self.eps = eps

    def forward(self, x):
        return x * self.scale * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)


def make_norm(kind, d):
    return RMSNorm(d) if kind == "rmsnorm" else nn.LayerNorm(d, eps=1e-5)


class GroupedQueryAttention(nn.Module):
    """Hugging Face's layout: q_proj, k_proj, v_proj (KV * d_k outputs), out_proj."""

    def __init__(self, d, heads, kv_heads, bias=True):
        super().__init__()
        self.h, self.kv, self.dk = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias)
        self.k_proj = nn.Linear(d, kv_heads * self.dk, bias)
        self.v_proj = nn.Linear(d, kv_heads * self.dk, bias)
        self.out_proj = nn.Linear(d, d, bias)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        B, L, D = query.shape
        S = key.size(1)
        q = self.q_proj(query).view(B, L, self.h, self.dk).transpose(1, 2)             # (B, H, L, dk)
        k = self.k_proj(key).view(B, S, self.kv, self.dk).transpose(1, 2)              # (B, KV, S, dk)
        v = self.v_proj(value).view(B, S, self.kv, self.dk).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.kv, dim=1)                              # (B, H, S, dk)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)                         # (B, H, L, S)
        blocked = torch.zeros(B, 1, L, S, dtype=torch.bool)
        if key_padding_mask is not None:
            blocked = blocked | key_padding_mask[:, None, None, :]
        if attn_mask is not None:
            blocked = blocked | attn_mask[None, None, :, :]
        w = F.softmax(scores.masked_fill(blocked, float("-inf")), -1)
        out = (w @ v).transpose(1, 2).reshape(B, L, D)
        return self.out_proj(out), w


def ffn(layer, x):
    act = F.relu if layer.activation == "relu" else F.gelu
    return layer.linear2(act(layer.linear1(x)))


class EncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer's structure and names with a chosen norm and grouped attention."""

    def __init__(self, d, h, kv, ff, activation, norm_first, norm):
        super().__init__()
        self.self_attn = GroupedQueryAttention(d, h, kv)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2 = make_norm(norm, d), make_norm(norm, d)
        self.activation, self.norm_first = activation, norm_first

    def forward(self, src, src_key_padding_mask=None):
        sa = lambda x: self.self_attn(x, x, x, key_padding_mask=src_key_padding_mask)[0]
        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + ffn(self, self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + ffn(self, x))


class DecoderLayer(nn.Module):
    def __init__(self, d, h, kv, ff, activation, norm_first, norm):
        super().__init__()
        self.self_attn = GroupedQueryAttention(d, h, kv)
        self.multihead_attn = GroupedQueryAttention(d, h, kv)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2, self.norm3 = make_norm(norm, d), make_norm(norm, d), make_norm(norm, d)
        self.activation, self.norm_first = activation, norm_first

    def forward(self, tgt, memory, tgt_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None):
        sa = lambda x: self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask, attn_mask=tgt_mask)[0]
        ca = lambda x: self.multihead_attn(x, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            return x + ffn(self, self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + ca(x))
        return self.norm3(x + ffn(self, x))


class Stack(nn.Module):
    def __init__(self, layers, norm, d):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = make_norm(norm, d)


class Transformer(nn.Module):
    def __init__(self, d, h, kv, ff, n, activation, norm_first, norm):
        super().__init__()
        self.encoder = Stack([EncoderLayer(d, h, kv, ff, activation, norm_first, norm) for _ in range(n)], norm, d)
        self.decoder = Stack([DecoderLayer(d, h, kv, ff, activation, norm_first, norm) for _ in range(n)], norm, d)


class Seq2Seq(nn.Module):
    """The reference translator (embeddings * sqrt(d) + sinusoids, final norm after each stack)."""

    def __init__(self, nsrc, ntgt, d, h, kv, ff, n, activation, norm_first, norm):
        super().__init__()
        self.d = d
        self.src_emb = nn.Embedding(nsrc, d, padding_idx=0)
        self.tgt_emb = nn.Embedding(ntgt, d, padding_idx=0)
        self.transformer = Transformer(d, h, kv, ff, n, activation, norm_first, norm)
        self.out = nn.Linear(d, ntgt)
        pos = torch.arange(512).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        self.pe = torch.zeros(512, d)
        self.pe[:, 0::2], self.pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)

    def forward(self, src, tgt_in):
        embed = lambda emb, x: emb(x) * math.sqrt(self.d) + self.pe[: x.size(1)]
        src_pad, tgt_pad = src == 0, tgt_in == 0
        x = embed(self.src_emb, src)
        for layer in self.transformer.encoder.layers:
            x = layer(x, src_key_padding_mask=src_pad)
        memory = self.transformer.encoder.norm(x)
        y = embed(self.tgt_emb, tgt_in)
        for layer in self.transformer.decoder.layers:
            y = layer(y, memory, tgt_mask=mp.causal_bool(tgt_in.size(1)), tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad)
        return self.out(self.transformer.decoder.norm(y))


def randomise_norms(module, g):
    """Norm weights away from 1 (and LayerNorm biases away from 0), so a mix-up would show."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if ".norm" in "." + name or name.startswith("norm"):
                p.copy_((1 + mp.f32(*p.shape, scale=0.1, g=g)) if name.endswith("weight") else mp.f32(*p.shape, scale=0.1, g=g))


def make_cases(out, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    B, L, S, D, H, ff, vocab = 3, 5, 7, 16, 4, 32, 23
    lens_s, lens_t = [7, 4, 6], [5, 3, 4]

    m = RMSNorm(D)
    with torch.no_grad():
        m.weight.copy_(1 + mp.f32(D, scale=0.1, g=g))
    mp.run_case("rms_norm", "norm", {"norm": "rmsnorm", "normalized_shape": D, "eps": 1e-5}, m,
                {"input": mp.f32(B, L, D, scale=3.0, g=g) + 1.5}, lambda m, i: {"output": m(i["input"])}, out, g)

    # Grouped-query self-attention (causal + padding, 2 key/value heads) and multi-query
    # cross-attention (padding only, 1 key/value head).
    for name, kv, self_attn in (("gqa_self_causal_kv2", 2, True), ("mqa_cross_kv1", 1, False)):
        m = GroupedQueryAttention(D, H, kv); mp.round_params(m)
        with torch.no_grad():
            for lin in (m.q_proj, m.k_proj, m.v_proj, m.out_proj):
                lin.bias.copy_(mp.f32(*lin.bias.shape, scale=0.1, g=g))
        cfg = {"embed_dim": D, "num_heads": H, "kv_heads": kv, "self_attention": self_attn}
        if self_attn:
            ins = {"query": mp.f32(B, L, D, g=g), "key_padding_mask": mp.pad_mask(lens_t, L), "attn_mask": mp.causal_bool(L)}
            fwd = lambda m, i: dict(zip(("output", "weights"), m(i["query"], i["query"], i["query"],
                                    key_padding_mask=i["key_padding_mask"], attn_mask=i["attn_mask"])))
        else:
            mem = mp.f32(B, S, D, g=g)
            ins = {"query": mp.f32(B, L, D, g=g), "key": mem, "value": mem, "key_padding_mask": mp.pad_mask(lens_s, S)}
            fwd = lambda m, i: dict(zip(("output", "weights"), m(i["query"], i["key"], i["value"],
                                    key_padding_mask=i["key_padding_mask"])))
        mp.run_case(name, "grouped_query_attention", cfg, m, ins, fwd, out, g)

    # Layers: RMSNorm with grouped-query attention, post- and pre-norm; LayerNorm with multi-query.
    for norm, kv in (("rmsnorm", 2), ("layernorm", 1)):
        for norm_first in (False, True):
            tag = f"{norm}_kv{kv}_{'pre' if norm_first else 'post'}norm"
            cfg = {"d_model": D, "nhead": H, "kv_heads": kv, "dim_feedforward": ff, "activation": "relu",
                   "norm": norm, "norm_first": norm_first, "layer_norm_eps": 1e-5}
            m = EncoderLayer(D, H, kv, ff, "relu", norm_first, norm); mp.round_params(m); randomise_norms(m, g)
            mp.run_case(f"encoder_layer_{tag}", "transformer_encoder_layer", cfg, m,
                        {"src": mp.f32(B, S, D, g=g), "src_key_padding_mask": mp.pad_mask(lens_s, S)},
                        lambda m, i: {"output": m(i["src"], src_key_padding_mask=i["src_key_padding_mask"])}, out, g)
            m = DecoderLayer(D, H, kv, ff, "relu", norm_first, norm); mp.round_params(m); randomise_norms(m, g)
            mp.run_case(f"decoder_layer_{tag}", "transformer_decoder_layer", cfg, m,
                        {"tgt": mp.f32(B, L, D, g=g), "memory": mp.f32(B, S, D, g=g), "tgt_mask": mp.causal_bool(L),
                         "tgt_key_padding_mask": mp.pad_mask(lens_t, L), "memory_key_padding_mask": mp.pad_mask(lens_s, S)},
                        lambda m, i: {"output": m(i["tgt"], i["memory"], tgt_mask=i["tgt_mask"],
                                                  tgt_key_padding_mask=i["tgt_key_padding_mask"],
                                                  memory_key_padding_mask=i["memory_key_padding_mask"])}, out, g)

    # The whole translator with RMSNorm and grouped-query attention, pre-norm, GELU.
    nsrc, ntgt, n, kv = vocab, vocab + 3, 2, 2
    m = Seq2Seq(nsrc, ntgt, D, H, kv, ff, n, "gelu", True, "rmsnorm"); mp.round_params(m); randomise_norms(m, g)
    src = torch.randint(4, nsrc, (B, S), generator=g)
    src[mp.pad_mask(lens_s, S)] = 0
    tgt = torch.randint(4, ntgt, (B, L + 1), generator=g)
    tgt[:, 0] = 2
    for b, k in enumerate(lens_t):
        tgt[b, k] = 3
        tgt[b, k + 1:] = 0

    def loss_fn(m, i):
        logits = m(i["src"], i["tgt"][:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), i["tgt"][:, 1:].reshape(-1), ignore_index=0,
                               label_smoothing=0.1)
        return {"loss": loss, "logits": logits}
    mp.run_case("seq2seq_rmsnorm_kv2_prenorm", "seq2seq",
                {"src_vocab": nsrc, "tgt_vocab": ntgt, "d_model": D, "nhead": H, "kv_heads": kv, "num_layers": n,
                 "dim_feedforward": ff, "activation": "gelu", "norm": "rmsnorm", "norm_first": True, "pad": 0,
                 "label_smoothing": 0.1}, m, {"src": src, "tgt": tgt}, loss_fn, out, g)

    # Added later, last, so that the cases above keep their random draws.
    m = ScaleNorm(D)
    with torch.no_grad():
        m.scale.copy_(torch.tensor([3.25]))
    mp.run_case("scale_norm", "norm", {"norm": "scalenorm", "normalized_shape": D, "eps": 1e-5}, m,
                {"input": mp.f32(B, L, D, scale=3.0, g=g) + 1.5}, lambda m, i: {"output": m(i["input"])}, out, g)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/extend"
    os.makedirs(out, exist_ok=True)
    make_cases(out, 2024)
