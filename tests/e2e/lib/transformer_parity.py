#!/usr/bin/env python3
"""Galley's transformer layers against PyTorch on shared weights (tests/e2e/test_transformer_parity.sh).

  transformer_parity.py data DIR       write DIR/train.h5 and DIR/val.h5: x [N, C, H, W], y [N, C, H, W]
  transformer_parity.py compare CKPT LOSS LOSSKIND
        CKPT: galley's checkpoint after one SGD step with lr 1e-30 (so /params holds the weights
        the step started from, and /optim/velocity the step's gradient: momentum's first velocity
        is the gradient itself); LOSS: galley's loss of that step (metrics.jsonl); LOSSKIND mse or
        l2_relative. Builds the same model in PyTorch (tests/bench/torch_vit.py) from the
        checkpoint's weights, runs the same batch, and compares the loss (1e-5 relative) and every
        parameter's gradient (1e-4 relative, in the norm of the tensor). Exit 0 when all agree.

The model (the test's recipe): patch_embed (patch P, dim D) -> pos_embed -> pre-norm block
(layer_norm, attention, add, layer_norm, dense 4D, gelu, dense D, add) x DEPTH -> layer_norm ->
unpatch (channels C). Layer names: pe, pos, blk.<i>.{n1, attn, n2, fc1, fc2}, norm, head.
"""

import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_vit import ViT, rel_l2  # noqa: E402

N, C, H, W = 4, 3, 8, 12
P, D, HEADS, DEPTH = 2, 16, 4, 2


def write_data(d):
    rng = np.random.default_rng(7)
    for name, n in (("train", N), ("val", N)):
        with h5py.File(os.path.join(d, name + ".h5"), "w") as f:
            f["x"] = rng.standard_normal((n, C, H, W)).astype(np.float32)
            f["y"] = rng.standard_normal((n, C, H, W)).astype(np.float32)


def model_params(m):
    """(galley layer, galley param) -> the PyTorch tensor holding it."""
    out = {("pe", "weight"): m.patch_embed.weight, ("pe", "bias"): m.patch_embed.bias, ("pos", "pos"): m.pos,
           ("norm", "weight"): m.norm.weight, ("norm", "bias"): m.norm.bias, ("head", "weight"): m.head.weight}
    for i, b in enumerate(m.blocks):
        p = "blk.%d." % i
        out.update({
            (p + "n1", "weight"): b.norm1.weight, (p + "n1", "bias"): b.norm1.bias,
            (p + "attn", "in_proj_weight"): b.attn.qkv.weight, (p + "attn", "in_proj_bias"): b.attn.qkv.bias,
            (p + "attn", "out_proj.weight"): b.attn.proj.weight, (p + "attn", "out_proj.bias"): b.attn.proj.bias,
            (p + "n2", "weight"): b.norm2.weight, (p + "n2", "bias"): b.norm2.bias,
            (p + "fc1", "weight"): b.fc1.weight, (p + "fc1", "bias"): b.fc1.bias,
            (p + "fc2", "weight"): b.fc2.weight, (p + "fc2", "bias"): b.fc2.bias,
        })
    return out


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def compare(ckpt, galley_loss, loss_kind):
    torch.set_default_dtype(torch.float64)  # the reference in double: galley's fp32 error is what is measured
    m = ViT(C, (H, W), P, D, DEPTH, HEADS, head="unpatch", out_chans=C)
    params = model_params(m)
    ok = True
    with h5py.File(ckpt, "r") as f:
        names = set()
        f["params"].visit(lambda k: names.add(k) if isinstance(f["params"][k], h5py.Dataset) else None)
        want = {"%s/%s" % k for k in params}
        if names != want:
            print("parameter names differ: galley only %s, PyTorch only %s" % (sorted(names - want),
                                                                               sorted(want - names)))
            return 1
        with torch.no_grad():
            for (layer, name), t in params.items():
                a = f["params/%s/%s" % (layer, name)][()]
                if tuple(a.shape) != tuple(t.shape):
                    print("%s/%s: galley shape %s, PyTorch %s" % (layer, name, a.shape, tuple(t.shape)))
                    return 1
                t.copy_(torch.from_numpy(a.astype(np.float64)))
        grads = {k: f["optim/velocity/%s/%s" % k][()].astype(np.float64) for k in params}
    with h5py.File(os.path.join(os.path.dirname(os.path.abspath(ckpt)), "..", "train.h5"), "r") as f:
        x = torch.from_numpy(f["x"][()].astype(np.float64))
        y = torch.from_numpy(f["y"][()].astype(np.float64))
    out = m(x)
    loss = torch.mean((out - y) ** 2) if loss_kind == "mse" else rel_l2(out, y)
    loss.backward()
    r = abs(float(loss) - galley_loss) / abs(float(loss))
    print("loss: galley %.9g, PyTorch %.9g, relative difference %.2e (limit 1e-5)" % (galley_loss, float(loss), r))
    ok &= r <= 1e-5
    worst = 0.0
    for k, t in params.items():
        e = rel(grads[k], t.grad.numpy())
        worst = max(worst, e)
        if e > 1e-4:
            print("gradient of %s/%s: relative difference %.2e (limit 1e-4)" % (k[0], k[1], e))
            ok = False
    print("gradients: %d tensors, worst relative difference %.2e (limit 1e-4)" % (len(params), worst))
    return 0 if ok else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "data":
        write_data(sys.argv[2])
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "compare":
        return compare(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
