#!/usr/bin/env python3
"""PyTorch twins of galley's GPU benchmark models (tests/bench/gpu/run.sh), one mode per run.

Usage: torch_gpu_bench.py MODEL --mode MODE [--device cuda|cpu] [--batch B] [--size S]
                          [--seconds T] [--budget S] [--warmup W] [--expect-params N] [--check]

MODEL (the same layers, shapes and parameter count as the galley recipe; --expect-params makes
a different count an error):
  unet3d    recipes/unet3d.yaml, the SC22 tutorial 3D U-Net: 4 x S^3 -> 6 x [conv3d k4 s2 p1 ->
            leaky_relu 0.2] (64, 128, 256, 512, 512, 512) -> 6 x [conv_transpose3d k4 s2 p1]
            (512, 512, 256, 128, 64, 5), each but the last followed by leaky_relu and concatenated
            [up, skip] with the matching down output -> tanh; L1 loss; AdamW (lr 5e-4 x
            sqrt(B/64), betas 0.9/0.999, eps 1e-8, no weight decay). Default S 64, batch 64.
  resnet18  recipes/resnet18.yaml, ResNet-18 in the CIFAR form: 3 x S^2 -> conv3x3 64 (no
            bias) + batch-norm + relu -> 4 stages x 2 basic blocks (64, 128, 256, 512; stages 2-4
            start with stride 2 and a 1x1 conv + batch-norm shortcut) -> global average pool ->
            dense 6; softmax cross-entropy; SGD lr 0.1, momentum 0.9, Nesterov, weight decay
            5e-4 on the weights with 2 or more axes (exclude_1d). Default S 32, batch 128.
  vit       recipes/vit.yaml, the NERSC tutorial's weather ViT: 20 x S x 2S -> patch 8 -> 12 pre-norm
            blocks (dim 384, 8 heads, MLP 1536, LayerNorm eps 1e-6) -> the tutorial's unpatch head;
            relative L2 loss; Adam (lr 5e-4, betas 0.9/0.95). Attention through
            F.scaled_dot_product_attention (tests/bench/torch_vit.py). Default S 360 (4,050
            tokens), batch 16. Its FLOPs count leaves out the attention products (4 T^2 D per
            block and sample), which the hooks below do not see.
  The recipes' learning-rate schedules are left out: a scalar per step, no measurable time.

MODE:
  fp32     eager, strict fp32 (TF32 off in cuDNN and cuBLAS, as galley's fp32), NC(D)HW.
  amp      eager under torch.autocast(bfloat16), channels-last (NVIDIA's advice for tensor cores).
  compile  torch.compile(forward + loss, mode=--compile-mode, default max-autotune: Inductor
           with autotuning and CUDA graphs) under autocast(bfloat16), channels-last.
  (--layout ncdhw|channels_last overrides the layout of any mode.)

One batch of random inputs and targets lives on the device (no data pipeline is timed). The
optimizer is PyTorch's fused one where it exists (fused=True), else its default. cuDNN picks
its algorithms (torch.backends.cudnn.benchmark). W warm-up steps (compile and CUDA-graph
capture happen there), then one timed step sizes the timed run: as many steps as fill --seconds
(cut short so that the whole process stays inside --budget seconds), at least --min-steps, timed
with the device synchronised at both ends. Peak memory (torch.cuda.max_memory_allocated and
max_memory_reserved) is over the timed steps only (the stats are reset after warm-up).

FLOPs per sample forward are counted from the layer shapes (a forward with hooks): conv
2 x Cin/groups x Cout x prod(kernel) x output positions, transposed conv 2 x Cin x Cout/groups
x prod(kernel) x input positions, dense 2 x in x out; a training step counts 3 x forward.

Prints a one-line summary on stderr and one JSON line on stdout (run.sh reads the last line
that starts with '{'): model, mode, torch, device, gpu, batch, size, layout, compile_mode,
params, fwd_flops_per_sample, warmup_s, steps, seconds, samples_per_s, train_tflops,
max_alloc_mib, max_reserved_mib, loss; or, when the run failed, model, mode and error.
Exit status: 0 ran, 1 failed, 3 the parameter count differs from --expect-params.

Smoke test on a CPU (tiny sizes; the U-Net needs S a multiple of 64):
  torch_gpu_bench.py resnet18 --mode fp32 --device cpu --size 16 --batch 2 --steps 2
  torch_gpu_bench.py unet3d --mode fp32 --device cpu --size 64 --batch 1 --steps 2
"""

import argparse
import json
import math
import os
import sys
import time
import warnings

T_START = time.perf_counter()

warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_vit import ViT, rel_l2  # noqa: E402

MODELS = ("unet3d", "resnet18", "vit")
MODES = ("fp32", "amp", "compile")


class UNet3D(nn.Module):
    """recipes/unet3d.yaml (NERSC sc22-dl-tutorial networks/UNet.py)."""

    def __init__(self, cin=4, cout=5):
        super().__init__()
        downs = (64, 128, 256, 512, 512, 512)
        self.down = nn.ModuleList()
        c = cin
        for f in downs:
            self.down.append(nn.Conv3d(c, f, 4, stride=2, padding=1))
            c = f
        # u6 takes d6's output; u5..u2 take [up, skip] (twice the channels); u1 maps to cout.
        ups = (512, 512, 256, 128, 64)
        self.up = nn.ModuleList()
        c = downs[-1]
        for i, f in enumerate(ups):
            self.up.append(nn.ConvTranspose3d(c, f, 4, stride=2, padding=1))
            c = f + downs[-2 - i]  # concat [ua_i, a_(i-1)]
        self.last = nn.ConvTranspose3d(c, cout, 4, stride=2, padding=1)
        self.act = nn.LeakyReLU(0.2)

    def forward(self, x):
        skips = []
        for conv in self.down:
            x = self.act(conv(x))
            skips.append(x)
        skips.pop()  # d6's output feeds u6 directly
        for conv in self.up:
            x = torch.cat([self.act(conv(x)), skips.pop()], dim=1)
        return torch.tanh(self.last(x))


class BasicBlock(nn.Module):
    """conv3x3 -> bn -> relu -> conv3x3 -> bn -> add(shortcut) -> relu"""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.n1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.n2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.n2(self.c2(self.relu(self.n1(self.c1(x)))))
        return self.relu(y + (x if self.sc is None else self.sc(x)))


class ResNet18(nn.Module):
    """recipes/resnet18.yaml: the CIFAR form (3x3 stem, no max-pool)."""

    def __init__(self, cin=3, classes=6):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(cin, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        blocks, c = [], 64
        for f, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(c, f, stride), BasicBlock(f, f, 1)]
            c = f
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def build(model, size, batch):
    """-> (net, per-sample input shape, loss kind, outputs, optimizer factory)"""
    if model == "unet3d":
        if size < 64 or size % 64:
            raise SystemExit(f"torch_gpu_bench.py: unet3d needs --size a multiple of 64 (6 stride-2 "
                             f"downsamplings), not {size}")
        lr = 5e-4 * math.sqrt(batch / 64)  # optimizer.schedule.scaling sqrt, base_batch 64

        def opt(params, fused):
            return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **fused)

        return UNet3D(4, 5), (4, size, size, size), "l1", 5, opt
    if model == "resnet18":
        def opt(params, fused):
            params = list(params)
            groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 5e-4},
                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # exclude_1d
            return torch.optim.SGD(groups, lr=0.1, momentum=0.9, nesterov=True, **fused)

        return ResNet18(3, 6), (3, size, size), "ce", 6, opt
    if model == "vit":
        def opt(params, fused):
            return torch.optim.Adam(params, lr=5e-4, betas=(0.9, 0.95), **fused)

        net = ViT(20, (size, 2 * size), 8, 384, 12, 8, head="unpatch", out_chans=20, eps=1e-6, sdpa=True)
        return net, (20, size, 2 * size), "rel_l2", 20, opt
    raise SystemExit(f"torch_gpu_bench.py: unknown model {model!r} ({', '.join(MODELS)})")


def count_fwd_flops(net, x):
    """Forward FLOPs per sample of the conv, transposed-conv and dense layers, from one forward."""
    total = [0]

    def hook(m, inp, out):
        k = math.prod(m.kernel_size) if hasattr(m, "kernel_size") else 1
        if isinstance(m, nn.Linear):
            total[0] += 2 * m.in_features * out.numel()
        elif isinstance(m, (nn.ConvTranspose2d, nn.ConvTranspose3d)):
            total[0] += 2 * (m.out_channels // m.groups) * k * inp[0].numel()
        elif isinstance(m, (nn.Conv2d, nn.Conv3d)):
            total[0] += 2 * (m.in_channels // m.groups) * k * out.numel()

    kinds = (nn.Linear, nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    hooks = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, kinds)]
    was_training = net.training
    net.eval()  # batch-norm on one sample of a 1x1 map would refuse in training mode
    try:
        with torch.no_grad():
            net(x)
    finally:
        net.train(was_training)
        for h in hooks:
            h.remove()
    return total[0] // x.shape[0]


def set_fp32_strict():
    """TF32 off in cuDNN convolutions and cuBLAS matmuls: fp32 as galley computes it. (Only the
    fp32 mode calls it: the other modes keep PyTorch's defaults, and mixing the two TF32 APIs
    below in one process is an error in recent PyTorch.)"""
    try:  # PyTorch 2.9 and later; the allow_tf32 flags are deprecated there
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    except (AttributeError, RuntimeError):
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


def make_optimizer(factory, params, device):
    if device.type == "cuda":
        try:
            return factory(params, {"fused": True}), "fused"
        except (TypeError, RuntimeError, ValueError):
            pass
    return factory(params, {}), "default"


def mib(n):
    return round(n / 2**20, 1)


def run(args, result):
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: no GPU for this PyTorch "
                               f"({torch.__version__})")
        if dev.index is not None:  # set_device refuses a bare "cuda"
            torch.cuda.set_device(dev)
        result["gpu"] = torch.cuda.get_device_name(dev)
        if args.mode == "fp32":
            set_fp32_strict()
    torch.manual_seed(42)

    net, shape, loss_kind, outs, opt_factory = build(args.model, args.size, args.batch)
    params = sum(p.numel() for p in net.parameters())
    result["params"] = params
    if args.expect_params and params != args.expect_params:
        result["error"] = (f"PARAMETER COUNT MISMATCH: torch twin has {params}, galley has "
                           f"{args.expect_params}: the models differ")
        return 3
    layout = args.layout or ("ncdhw" if args.mode == "fp32" else "channels_last")
    result["layout"] = layout
    fmt = torch.channels_last_3d if len(shape) == 4 else torch.channels_last
    net = net.to(dev)
    if layout == "channels_last":
        net = net.to(memory_format=fmt)
    net.train()

    # One batch on the device: inputs N(0, 1); targets in the model's range.
    x = torch.randn(args.batch, *shape, device=dev)
    if layout == "channels_last":
        x = x.contiguous(memory_format=fmt)
    if loss_kind == "l1":
        y = torch.rand(args.batch, outs, *shape[1:], device=dev) * 2 - 1
        loss_fn = nn.L1Loss()
    elif loss_kind == "rel_l2":
        y = torch.randn(args.batch, outs, *shape[1:], device=dev)
        loss_fn = rel_l2
    else:
        y = torch.randint(0, outs, (args.batch,), device=dev)
        loss_fn = nn.CrossEntropyLoss()

    result["fwd_flops_per_sample"] = count_fwd_flops(net, x[:1])
    if args.check:
        return 0
    # cuDNN times its algorithms for each new shape; on only now, so not for the count's batch of 1
    torch.backends.cudnn.benchmark = dev.type == "cuda"

    amp = args.mode in ("amp", "compile")
    opt, result["optimizer"] = make_optimizer(opt_factory, net.parameters(), dev)

    def fwd_loss(xb, yb):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            out = net(xb)
        return loss_fn(out.float(), yb)

    f = fwd_loss
    graphs = False
    if args.mode == "compile":
        result["compile_mode"] = args.compile_mode
        f = torch.compile(fwd_loss, mode=args.compile_mode)
        graphs = dev.type == "cuda" and args.compile_mode in ("reduce-overhead", "max-autotune")

    def step():
        if graphs and hasattr(torch.compiler, "cudagraph_mark_step_begin"):
            torch.compiler.cudagraph_mark_step_begin()
        loss = f(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    t0 = time.perf_counter()
    for _ in range(max(args.warmup, 1)):
        step()
    sync()
    result["warmup_s"] = round(time.perf_counter() - t0, 2)

    if args.steps > 0:
        steps = args.steps
    else:
        t0 = time.perf_counter()
        step()
        sync()
        t_step = max(time.perf_counter() - t0, 1e-6)
        want = args.seconds
        if args.budget > 0:  # stay inside the budget, with a little left to exit
            want = min(want, args.budget - (time.perf_counter() - T_START) - 1.5)
        steps = max(args.min_steps, int(want / t_step))
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    dt = time.perf_counter() - t0
    loss = float(loss.detach())

    sps = steps * args.batch / dt
    result.update({
        "steps": steps,
        "seconds": round(dt, 3),
        "samples_per_s": round(sps, 2),
        "train_tflops": round(sps * 3 * result["fwd_flops_per_sample"] / 1e12, 3),
        "loss": loss if math.isfinite(loss) else str(loss),
    })
    if dev.type == "cuda":
        result["max_alloc_mib"] = mib(torch.cuda.max_memory_allocated(dev))
        result["max_reserved_mib"] = mib(torch.cuda.max_memory_reserved(dev))
    if not math.isfinite(loss):
        result["error"] = f"non-finite loss {loss}"
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=MODELS)
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (smoke test)")
    ap.add_argument("--batch", type=int, default=0, help="0: the recipe's (unet3d 64, resnet18 128)")
    ap.add_argument("--size", type=int, default=0, help="spatial size; 0: the recipe's (64, 32)")
    ap.add_argument("--layout", choices=("ncdhw", "channels_last"), default=None,
                    help="default: ncdhw for fp32, channels_last for amp and compile")
    ap.add_argument("--compile-mode", default="max-autotune",
                    help="torch.compile mode (max-autotune, reduce-overhead, default, ...)")
    ap.add_argument("--warmup", type=int, default=0, help="warm-up steps; 0: 3 eager, 5 compiled")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (0: fill --seconds)")
    ap.add_argument("--seconds", type=float, default=5.0, help="timed seconds to aim for")
    ap.add_argument("--min-steps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0, help="seconds the whole process may take "
                    "(the timed run is cut to fit; 0: no limit)")
    ap.add_argument("--expect-params", type=int, default=0, help="galley's parameter count: "
                    "exit 3 when the twin's differs")
    ap.add_argument("--check", action="store_true", help="only build the model and count its "
                    "parameters and FLOPs")
    args = ap.parse_args()
    if args.batch <= 0:
        args.batch = {"unet3d": 64, "vit": 16}.get(args.model, 128)
    if args.size <= 0:
        args.size = {"unet3d": 64, "vit": 360}.get(args.model, 32)
    if args.warmup <= 0:
        args.warmup = 5 if args.mode == "compile" else 3

    result = {"model": args.model, "mode": args.mode, "torch": torch.__version__, "device": args.device,
              "batch": args.batch, "size": args.size}
    try:
        rc = run(args, result)
    except Exception as e:  # noqa: BLE001  (reported in the JSON line; run.sh shows it)
        msg = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
        if "out of memory" in msg.lower():
            msg = "out of memory: " + msg
        result["error"] = msg[:600]
        rc = 1
    if "error" in result:
        print(f"torch_gpu_bench.py {args.model} {args.mode}: {result['error']}", file=sys.stderr)
    elif args.check:
        print(f"torch_gpu_bench.py {args.model}: {result['params']} parameters, "
              f"{result['fwd_flops_per_sample'] / 1e6:.1f} MFLOPs forward per sample", file=sys.stderr)
    else:
        print(f"torch_gpu_bench.py {args.model} {args.mode} batch {args.batch}: "
              f"{result['samples_per_s']} samples/s, {result['train_tflops']} TFLOP/s, "
              f"{result['params']} parameters, warm-up {result['warmup_s']} s, "
              f"{result['steps']} steps in {result['seconds']} s", file=sys.stderr)
    print(json.dumps(result), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
