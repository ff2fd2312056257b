#!/usr/bin/env python3
"""PyTorch twin of galley's CPU benchmark models (tests/bench/run.sh).

Usage: torch_bench.py MODEL --threads T [--batch B] [--steps N | --seconds S] [--warmup W]

MODEL is one of:
  small_cnn  3x32x32 -> conv3x3 32 (pad 1) relu maxpool2 -> conv3x3 64 (pad 1) relu maxpool2
             -> flatten -> dense 128 relu -> dense 6; batch 64; softmax cross-entropy
             (tests/bench/small_cnn.yaml)
  mlp        784-512-512-10 ReLU; batch 128; softmax cross-entropy (recipes/mlp.yaml)
  cosmoflow  4x32x32x32 -> 5 x [conv3d k3 same (32..512), leaky_relu 0.3, maxpool3d 2] -> flatten
             -> dense 128 -> dropout 0.5 -> dense 64 -> dropout 0.5 -> dense 4 -> tanh x 1.2;
             batch 8; MSE (recipes/cosmoflow.yaml with data.synthetic.size=32)
  cnn3d      1x40x40x40 -> 3 x [conv3d k3 same (16, 32, 64), relu, maxpool3d 2] -> flatten -> dense 4;
             batch 8; MSE (tests/bench/cnn3d.yaml: a 3D CNN at sizes the recipes do not use, with a
             one-channel first layer)
  vit_tiny   3x32x32 -> patch 4 -> 64 tokens of 192 -> pos -> 6 pre-norm blocks (3 heads, MLP 768,
             exact GELU) -> layer_norm -> token mean -> dense 6; batch 64; softmax cross-entropy;
             AdamW (recipes/vit-tiny.yaml; tests/bench/torch_vit.py; SDPA where torch has it)

fp32, SGD momentum 0.9 (vit_tiny: AdamW lr 3e-4, weight decay 0.05), synthetic data held in memory as tensors; each step gathers a batch of
rows by a shuffled index (as galley gathers its batches). After W warm-up steps it times only
the training steps (batch gather, forward, loss, backward, optimizer.step, zero_grad): N steps,
or with --seconds as many as fill about S seconds (at least --min-steps). Prints one JSON line:
  {"model", "torch", "threads", "batch", "steps", "seconds", "samples_per_s", "peak_rss_mib",
   "cpu_util"}
peak_rss_mib is the process's peak resident set (getrusage ru_maxrss), taken after the run;
cpu_util is (user + system CPU time) / (wall time x threads) over the timed steps: well below 1
means the process did not get its cores (another load on the machine) or left them idle.
"""

import argparse
import json
import math
import os
import resource
import sys
import time
import warnings

# The PyPI build warns at import that NumPy is missing; the benchmark does not need NumPy.
warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_vit import ViT  # noqa: E402


class Cosmo(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        layers = []
        c = channels
        for f in (32, 64, 128, 256, 512):
            # kernel 3, stride 1: padding 1 is TensorFlow's 'same'
            layers += [nn.Conv3d(c, f, 3, padding=1), nn.LeakyReLU(0.3), nn.MaxPool3d(2)]
            c = f
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(512, 128), nn.LeakyReLU(0.3), nn.Dropout(0.5),
            nn.Linear(128, 64), nn.LeakyReLU(0.3), nn.Dropout(0.5),
            nn.Linear(64, 4),
        )

    def forward(self, x):
        return torch.tanh(self.head(self.features(x))) * 1.2


def build(model):
    """-> (module, input shape per sample, default batch, train size, loss name, classes)"""
    if model == "small_cnn":
        net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 6),
        )
        return net, (3, 32, 32), 64, 4096, "ce", 6
    if model == "mlp":
        net = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10),
        )
        return net, (784,), 128, 8192, "ce", 10
    if model == "cosmoflow":
        return Cosmo(4), (4, 32, 32, 32), 8, 64, "mse", 4
    if model == "cnn3d":
        net = nn.Sequential(
            nn.Conv3d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2),
            nn.Conv3d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2),
            nn.Conv3d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2),
            nn.Flatten(), nn.Linear(64 * 5 * 5 * 5, 4),
        )
        return net, (1, 40, 40, 40), 8, 64, "mse", 4
    if model == "vit_tiny":
        net = ViT(3, (32, 32), 4, 192, 6, 3, head="classes", classes=6, sdpa=True)
        return net, (3, 32, 32), 64, 4096, "ce", 6
    raise SystemExit(f"torch_bench.py: unknown model {model!r} (small_cnn, mlp, cosmoflow, cnn3d, vit_tiny)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=0, help="0: the model's own batch")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (0: use --seconds)")
    ap.add_argument("--seconds", type=float, default=5.0, help="timed seconds to aim for")
    ap.add_argument("--min-steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    net, shape, batch, n_train, loss_kind, classes = build(args.model)
    if args.batch > 0:
        batch = args.batch
    n_train = max(n_train, batch)
    net.train()
    x_all = torch.randn(n_train, *shape)
    if loss_kind == "ce":
        y_all = torch.randint(0, classes, (n_train,))
        loss_fn = nn.CrossEntropyLoss()
    else:
        y_all = torch.rand(n_train, classes) * 2 - 1
        loss_fn = nn.MSELoss()
    if args.model == "vit_tiny":
        opt = torch.optim.AdamW(net.parameters(), lr=3e-4, weight_decay=0.05)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)

    per_epoch = n_train // batch
    state = {"perm": torch.randperm(n_train), "i": 0}

    def step():
        if state["i"] == per_epoch:
            state["perm"] = torch.randperm(n_train)
            state["i"] = 0
        idx = state["perm"][state["i"] * batch:(state["i"] + 1) * batch]
        state["i"] += 1
        x = x_all.index_select(0, idx)
        y = y_all.index_select(0, idx)
        out = net(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(max(args.warmup, 1) - 1):
        step()
    t0 = time.perf_counter()
    step()
    t_step = time.perf_counter() - t0  # the last warm-up step sizes the timed run
    steps = args.steps
    if steps <= 0:
        steps = max(args.min_steps, math.ceil(args.seconds / max(t_step, 1e-6)))

    c0 = os.times()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss = float(loss.detach())
    dt = time.perf_counter() - t0
    c1 = os.times()
    if not math.isfinite(loss):
        print(f"torch_bench.py: non-finite loss {loss}", file=sys.stderr)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(json.dumps({
        "model": args.model,
        "torch": torch.__version__,
        "threads": args.threads,
        "batch": batch,
        "steps": steps,
        "seconds": round(dt, 3),
        "samples_per_s": round(steps * batch / dt, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "cpu_util": round(cpu / (dt * args.threads), 3),
    }))


if __name__ == "__main__":
    main()
