"""A GPT-2-style decoder written once against ops.Ops: PyTorch's operations or the learner's kernels.

Pre-norm blocks (layer norm, causal self-attention, residual add; layer norm, GELU feed-forward, residual
add), bias-free linears (one matmul each), learned positions, a byte vocabulary. The residual stream is
in `ops.act` (float32); the matmuls, attention, GELU and the logits in `ops.low` (bfloat16 on a GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from grader.capstone.ops import Ops

VOCAB = 256  # bytes


@dataclass
class ModelConfig:
    layers: int
    heads: int
    d_model: int
    context: int
    vocab: int = VOCAB


def _weight(rows: int, cols: int, std: float = 0.02) -> nn.Parameter:
    return nn.Parameter(torch.randn(rows, cols) * std)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, ops: Ops):
        super().__init__()
        c, self.heads, self.ops = config.d_model, config.heads, ops
        scaled = 0.02 / math.sqrt(2 * config.layers)  # GPT-2's scaling of the projections into the residual
        self.ln1_w, self.ln1_b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.qkv, self.proj = _weight(3 * c, c), _weight(c, c, scaled)
        self.ln2_w, self.ln2_b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.fc, self.fc2 = _weight(4 * c, c), _weight(c, 4 * c, scaled)

    def attention_part(self, x: torch.Tensor) -> torch.Tensor:
        """Layer norm, causal self-attention and its output projection, on x of shape (B, T, C)."""
        b, t, c = x.shape
        ops, d = self.ops, c // self.heads
        h = ops.layer_norm(x.reshape(b * t, c), self.ln1_w, self.ln1_b)
        qkv = ops.linear(h, self.qkv).view(b, t, 3, self.heads, d)
        y = ops.attention(qkv)  # (B*T, C): each position's heads side by side
        return ops.linear(y, self.proj).view(b, t, c)

    def ffn_part(self, x: torch.Tensor) -> torch.Tensor:
        """Layer norm, then the feed-forward network: linear to 4C, GELU, linear back to C."""
        b, t, c = x.shape
        ops = self.ops
        h = ops.layer_norm(x.reshape(b * t, c), self.ln2_w, self.ln2_b)
        return ops.linear(ops.gelu(ops.linear(h, self.fc)), self.fc2).view(b, t, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention_part(x).to(x.dtype)  # the residual connections: PyTorch's adds
        return x + self.ffn_part(x).to(x.dtype)


class GPT(nn.Module):
    def __init__(self, config: ModelConfig, ops: Ops):
        super().__init__()
        self.config, self.ops = config, ops
        c = config.d_model
        self.wte, self.wpe = _weight(config.vocab, c), _weight(config.context, c)
        self.blocks = nn.ModuleList(Block(config, ops) for _ in range(config.layers))
        self.lnf_w, self.lnf_b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
        self.head = _weight(config.vocab, c)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-byte cross-entropy of ids (B, T) against targets (B, T)."""
        b, t = ids.shape
        ops = self.ops
        x = (ops.embedding(ids, self.wte) + self.wpe[:t]).to(ops.act)
        for block in self.blocks:
            x = block(x)
        h = ops.layer_norm(x.reshape(b * t, -1), self.lnf_w, self.lnf_b)
        return ops.cross_entropy(ops.linear(h, self.head), targets.reshape(b * t))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
