#!/usr/bin/env python3
"""The cuDNN peer of `bench_gemm --conv`: torch.nn.functional.conv2d (cuDNN, FP16) on the same ResNet-50 layers.

Layers (NCHW, fp16, batch --batch, default 8), as bench/gemm_bench.cu lists them:
  conv2_3x3    64 -> 64,   56x56, 3x3 stride 1 pad 1
  conv2_1x1    64 -> 256,  56x56, 1x1
  conv3_3x3s2  128 -> 128, 56x56 -> 28x28, 3x3 stride 2 pad 1
  conv4_3x3    256 -> 256, 14x14, 3x3 stride 1 pad 1
  conv5_1x1    2048 -> 512, 7x7, 1x1
Each launch is timed on its own with CUDA events behind a torch.cuda._sleep hold (median of --iters after
--warmup); cudnn.benchmark picks the fastest algorithm first. Inputs are random, not zeros.

With --qdec-json (the JSON that `bench_gemm --conv --json` wrote in the same run) it prints the ratio
cuDNN us / qdec us per layer and format, so > 1 means qdec is faster.

Usage (on the GPU machine, after building):
  build/bench_gemm --conv-only --json qdec_conv.json
  python3 bench/torch_conv.py --qdec-json qdec_conv.json --json torch_conv.json
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

LAYERS = [
    ("conv2_3x3", 64, 56, 64, 3, 1, 1),
    ("conv2_1x1", 64, 56, 256, 1, 1, 0),
    ("conv3_3x3s2", 128, 56, 128, 3, 2, 1),
    ("conv4_3x3", 256, 14, 256, 3, 1, 1),
    ("conv5_1x1", 2048, 7, 512, 1, 1, 0),
]


def time_launches(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    torch.cuda._sleep(2_000_000)  # hold the stream while the host enqueues every timed launch
    for i in range(iters):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, stops))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--qdec-json", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}")
    qdec = {}
    if args.qdec_json:
        with open(args.qdec_json) as f:
            for c in json.load(f).get("conv", []):
                qdec[(c["layer"], c["format"])] = c["us"]
    rows = []
    print(f"{'layer':>12} {'cuDNN us':>9} {'TFLOP/s':>8}   qdec us (x = cuDNN / qdec)")
    for name, ci, h, co, k, s, p in LAYERS:
        x = torch.rand(args.batch, ci, h, h, device=dev, dtype=torch.float16) * 2 - 1
        w = (torch.rand(co, ci, k, k, device=dev, dtype=torch.float16) * 2 - 1) * 0.05
        b = torch.rand(co, device=dev, dtype=torch.float16)
        us = time_launches(lambda: F.conv2d(x, w, b, stride=s, padding=p), args.warmup, args.iters)
        oh = (h + 2 * p - k) // s + 1
        flops = 2.0 * args.batch * co * oh * oh * ci * k * k
        extra = "  ".join(
            f"{fmt} {qdec[(name, fmt)]:.1f} ({us / qdec[(name, fmt)]:.2f}x)"
            for fmt in ("int4-g32", "int8")
            if (name, fmt) in qdec
        )
        print(f"{name:>12} {us:>9.2f} {flops / us / 1e6:>8.2f}   {extra}")
        rows.append(dict(layer=name, batch=args.batch, us=us, tflops=flops / us / 1e6))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(0), cudnn=torch.backends.cudnn.version(), conv=rows), f,
                      indent=1)


if __name__ == "__main__":
    main()
