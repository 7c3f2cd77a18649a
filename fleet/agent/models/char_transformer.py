"""The character transformer, in plain PyTorch: a decoder-only model with hand-written causal
attention that predicts the next character at every position.

The paper's size is 6 layers, 6 heads, a 256-d embedding and sequence length 64; the registry
(``fleet.agent.models.registry``) also builds a CPU-scale variant of the same class.

Why separate: the text model shares no layer or initialisation with the image models
(``fleet.agent.models.convnets``). Torch 1.10 APIs (no SDPA) and Python 3.6 syntax only.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from fleet.agent.models.inputs import DEFAULT_VOCAB_SIZE

# --------------------------------------------------------------------------------------------
# Character transformer


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, by hand (no SDPA in torch 1.10).

    The paper's 6 heads over a 256-d embedding do not divide evenly, so each head gets
    ``ceil(256 / 6) = 43`` dims: q/k/v project 256 -> 6*43 = 258 and the output projects 258
    back to 256. That keeps every head the same width and the residual stream at 256, at the
    cost of 2 extra inner dims (< 1% of the attention parameters).
    """

    mask: torch.Tensor  # a buffer (register_buffer): the causal mask, not a parameter

    def __init__(self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0) -> None:
        super(CausalSelfAttention, self).__init__()
        self.n_heads = n_heads
        self.head_dim = -(-d_model // n_heads)
        self.inner = self.head_dim * n_heads
        self.qkv = nn.Linear(d_model, 3 * self.inner)
        self.proj = nn.Linear(self.inner, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(self.inner, dim=2)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, self.inner)
        return self.resid_drop(self.proj(y))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: trains stably without warm-up, which matters for short fine-tunes."""

    def __init__(self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0) -> None:
        super(TransformerBlock, self).__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, max_len, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Decoder-only character model: tokens [b, T] -> logits [b, T, vocab] (next char per slot)."""

    def __init__(
        self,
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        seq_len: int = 64,
        n_layers: int = 6,
        n_heads: int = 6,
        d_model: int = 256,
        dropout: float = 0.0,
    ) -> None:
        super(CharTransformer, self).__init__()
        if vocab_size < 2 or seq_len < 1:
            raise ValueError("char_transformer needs vocab_size >= 2 and seq_len >= 1")
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[TransformerBlock(d_model, n_heads, seq_len, dropout) for _ in range(n_layers)]
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(_init_transformer_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.seq_len:
            raise ValueError("sequence length {} exceeds the model's {}".format(t, self.seq_len))
        pos = torch.arange(t, device=idx.device).unsqueeze(0)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        return self.head(self.ln_f(self.blocks(x)))


def _init_transformer_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, 0.0, 0.02)
