"""PyTorch twins of galley's transformer layers and recipes (recipes/vit.yaml, recipes/vit-tiny.yaml).

Used by tests/bench/torch_bench.py (the vit_tiny benchmark model) and by
tests/e2e/lib/transformer_parity.py (loss and gradients on shared weights). Each module mirrors one
galley layer, with galley's parameter layout:
  patch_embed  Conv2d/Conv3d(kernel = stride = patch) -> tokens [B, T, D] in raster order
  pos_embed    x + pos[T, D]
  layer_norm   LayerNorm(D) per token
  attention    qkv = Linear(D, 3D) packed (q, k, v) x heads, as nn.MultiheadAttention's in_proj;
               softmax(q k^T / sqrt(E)) v per head; out_proj Linear(D, D)
  dense        Linear per token; gelu is the exact (erf) GELU
  unpatch      Linear(D, p*p*C, bias=False) per token, then (h, w, p, q, c) -> [C, H, W] as the
               NERSC tutorial's forward_head
Works with Debian's torch 1.13 (no scaled_dot_product_attention: the attention is written out)
and with current PyPI torch (sdpa=True uses F.scaled_dot_product_attention when present).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads, qkv_bias=True, sdpa=False):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.sdpa = sdpa and hasattr(F, "scaled_dot_product_attention")

    def forward(self, x):
        b, t, d = x.shape
        h, e = self.heads, d // self.heads
        q, k, v = self.qkv(x).reshape(b, t, 3, h, e).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            a = (q @ k.transpose(-2, -1)) * (e ** -0.5)
            y = a.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x))))."""

    def __init__(self, dim, heads, mlp_ratio=4, eps=1e-5, qkv_bias=True, sdpa=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads, qkv_bias, sdpa)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, dim * mlp_ratio)
        self.fc2 = nn.Linear(dim * mlp_ratio, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """patch_embed -> pos_embed -> depth x Block -> layer_norm -> head.

    head "classes": token mean -> Linear(D, classes) (vit-tiny); head "unpatch": the tutorial's
    per-token Linear(D, p*p*C, bias=False) back to [C, H, W] (vit.yaml).
    """

    def __init__(self, in_chans, img, patch, dim, depth, heads, head="classes", classes=0, out_chans=0,
                 eps=1e-5, sdpa=False):
        super().__init__()
        self.patch, self.img, self.out_chans, self.head_kind = patch, img, out_chans, head
        self.grid = (img[0] // patch, img[1] // patch)
        self.patch_embed = nn.Conv2d(in_chans, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(self.grid[0] * self.grid[1], dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, eps=eps, sdpa=sdpa) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=eps)
        if head == "classes":
            self.head = nn.Linear(dim, classes)
        else:
            self.head = nn.Linear(dim, patch * patch * out_chans, bias=False)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        if self.head_kind == "classes":
            return self.head(x.mean(dim=1))
        return unpatch(self.head(x), self.grid, self.patch, self.out_chans)


def unpatch(tokens, grid, p, c):
    """tokens [B, h*w, p*p*c] ordered (p, q, c) -> [B, c, h*p, w*p] (the tutorial's forward_head)."""
    b = tokens.shape[0]
    x = tokens.reshape(b, grid[0], grid[1], p, p, c)
    x = torch.einsum("nhwpqc->nchpwq", x)
    return x.reshape(b, c, grid[0] * p, grid[1] * p)


def rel_l2(pred, target):
    """The NERSC tutorial's l2_loss: mean over samples of ||pred - target|| / ||target||."""
    n = pred.shape[0]
    diff = torch.norm(pred.reshape(n, -1) - target.reshape(n, -1), 2, 1)
    return torch.mean(diff / torch.norm(target.reshape(n, -1), 2, 1))
