#!/usr/bin/env python3
"""The peer of bench_attention: torch's scaled_dot_product_attention on the same decode shapes.

Runs torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True) with BF16
q [B, Hq, 1, D], k/v [B, Hkv, T, D] (random, not zeros) on the shapes of `bench_attention`:
  seed000  B in {32, 64, 128, 256, 512}, T = 8192, 8 query heads, 1 KV head, head_dim 128
  long     B = 1, T in {32768, 131072}, 32 query heads, 8 KV heads, head_dim 128
  smollm2  B = 64, T = 4096, 9 query heads, 3 KV heads, head_dim 64
once with torch's default backend choice and once per backend forced through
torch.nn.attention.sdpa_kernel (those that reject a shape are listed as such). Each launch is timed on its
own with CUDA events (median of --iters after --warmup); inputs are rotated over enough sets to exceed L2.

With --qdec-json (the JSON that `bench_attention --json` wrote in the same run, on the same GPU) it also
prints the ratio table: torch µs / qdec µs per format, so > 1 means qdec is faster.

Usage (on the GPU machine, after building):
  build/bench_attention --json qdec.json
  python3 bench/torch_sdpa.py --qdec-json qdec.json --json torch.json
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# Launches enqueued behind one torch.cuda._sleep hold (see time_launches).
LAUNCHES_PER_HOLD = 16


def key_of(s):
    """The case key shared with bench_attention's JSON."""
    return f"B{s['batch']}-T{s['t']}-Hq{s['hq']}-Hkv{s['hkv']}-D{s['d']}"


def label_of(s):
    return f"{s['family']} B={s['batch']} T={s['t']} {s['hq']}/{s['hkv']}x{s['d']}"


def make_shapes(families, batches):
    shapes = []
    if "seed000" in families:
        for b in batches:
            shapes.append(dict(family="seed000", batch=b, hq=8, hkv=1, d=128, t=8192))
    if "long" in families:
        for t in (32768, 131072):
            shapes.append(dict(family="long", batch=1, hq=32, hkv=8, d=128, t=t))
    if "smollm2" in families:
        shapes.append(dict(family="smollm2", batch=64, hq=9, hkv=3, d=64, t=4096))
    return shapes


def case_label(c):
    heads = f"{c['num_qo_heads']}/{c['num_kv_heads']}x{c['head_dim']}"
    return f"{c['family']} B={c['batch']} T={c['t_max']} {heads}"


def bytes_moved(s):
    """K + V read, Q read, O written: the same declaration as bench_attention's BF16 row."""
    kv = 2 * s["batch"] * s["hkv"] * s["t"] * s["d"] * 2
    qo = 2 * s["batch"] * s["hq"] * s["d"] * 2
    return kv + qo


def make_sets(s, l2_bytes, device):
    """Independent (q, k, v) sets whose total exceeds 2x L2 (4x, like bench_attention), capped by memory."""
    set_bytes = bytes_moved(s)
    want = max(1, math.ceil(4 * l2_bytes / set_bytes))
    free, _ = torch.cuda.mem_get_info(device)
    # Headroom: the output and whatever a backend allocates (the math backend expands K/V per query head).
    fit = max(1, int((free - (2 << 30)) // (2 * set_bytes)))
    n = min(want, fit, 64)
    sets = []
    for _ in range(n):
        q = torch.rand(s["batch"], s["hq"], 1, s["d"], device=device, dtype=torch.bfloat16) * 2 - 1
        k = torch.rand(s["batch"], s["hkv"], s["t"], s["d"], device=device, dtype=torch.bfloat16) * 2 - 1
        v = torch.rand(s["batch"], s["hkv"], s["t"], s["d"], device=device, dtype=torch.bfloat16) * 2 - 1
        sets.append((q, k, v))
    return sets


def sdpa(qkv):
    q, k, v = qkv
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def time_launches(sets, warmup, iters, hold_cycles, warmup_ms=5.0):
    """Per-launch CUDA-event times in µs.

    A torch.cuda._sleep spin holds the stream while a batch of launches is enqueued, so torch's host-side
    dispatch cost never appears as GPU idle time between a pair of events (the small long-context cases
    run in tens of µs, comparable to that cost).
    """
    n = len(sets)
    # Warm up with --warmup launches, then batches until --warmup-ms have passed, as bench_attention does: the SM
    # clock ramps up over the first ~1 ms of work after a case's set-up (docs/attention.md, v22).
    t0 = time.perf_counter()
    for i in range(warmup):
        sdpa(sets[i % n])
    torch.cuda.synchronize()
    while 1e3 * (time.perf_counter() - t0) < warmup_ms:
        for i in range(LAUNCHES_PER_HOLD):
            sdpa(sets[i % n])
        torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    have_sleep = hasattr(torch.cuda, "_sleep")
    for first in range(0, iters, LAUNCHES_PER_HOLD):
        if have_sleep:
            torch.cuda._sleep(hold_cycles)
        for i in range(first, min(iters, first + LAUNCHES_PER_HOLD)):
            qkv = sets[(warmup + i) % n]
            starts[i].record()
            sdpa(qkv)
            stops[i].record()
    torch.cuda.synchronize()
    return [1e3 * a.elapsed_time(b) for a, b in zip(starts, stops)]


def hold_cycles_for(sets):
    """Spin long enough to cover the host's enqueue of one batch: 4x its measured cost, 2 to 200 ms.

    Cycles assume a ~2 GHz SM clock; a slower clock only lengthens the hold.
    """
    sdpa(sets[0])  # first-call costs (kernel selection, plan building) are not enqueue costs
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(8):
        sdpa(sets[i % len(sets)])
    host_s = (time.perf_counter() - t0) / 8
    torch.cuda.synchronize()
    hold_s = min(0.2, max(2e-3, 4 * LAUNCHES_PER_HOLD * host_s))
    return int(hold_s * 2e9)


def stats(times_us, nbytes):
    med = statistics.median(times_us)
    return dict(
        median_us=med,
        min_us=min(times_us),
        mean_us=statistics.fmean(times_us),
        max_us=max(times_us),
        gbps=nbytes / (med * 1e-6) / 1e9,
        times_us=times_us,
    )


def kernels_of_default(qkv):
    """Names of the GPU kernels the default call launches (which backend torch picked), or []."""
    try:
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            sdpa(qkv)
            torch.cuda.synchronize()
        names = []
        for evt in prof.events():
            if str(getattr(evt, "device_type", "")).endswith("CUDA") and evt.name not in names:
                names.append(evt.name)
        return names
    except Exception:  # the profiler is a nicety; never fail the benchmark on it
        return []


def guess_backend(kernel_names):
    text = " ".join(kernel_names).lower()
    if not text:
        return "unknown"
    if "cudnn" in text:
        return "cudnn"
    if "flash" in text:
        return "flash"
    if "fmha" in text or "efficient" in text or "cutlass" in text:
        return "efficient"
    return "math"


def backend_list(include_math):
    from torch.nn.attention import SDPBackend

    out = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    if include_math:
        out.append(("math", SDPBackend.MATH))
    return out


def run_shape(s, args, l2_bytes, device):
    from torch.nn.attention import sdpa_kernel

    nbytes = bytes_moved(s)
    sets = make_sets(s, l2_bytes, device)
    hold = hold_cycles_for(sets)
    case = dict(
        family=s["family"],
        key=key_of(s),
        batch=s["batch"],
        num_qo_heads=s["hq"],
        num_kv_heads=s["hkv"],
        head_dim=s["d"],
        t_max=s["t"],
        bytes=nbytes,
        rotation_sets=len(sets),
    )
    default = stats(time_launches(sets, args.warmup, args.iters, hold, args.warmup_ms), nbytes)
    default["kernels"] = kernels_of_default(sets[0])
    default["backend_guess"] = guess_backend(default["kernels"])
    case["default"] = default
    backends = {}
    for name, backend in backend_list(args.math):
        try:
            with sdpa_kernel([backend]):
                sdpa(sets[0])
                torch.cuda.synchronize()
                backends[name] = stats(time_launches(sets, args.warmup, args.iters, hold, args.warmup_ms), nbytes)
                backends[name]["status"] = "ok"
        except RuntimeError as e:  # "No available kernel" and friends: this backend rejects the shape
            backends[name] = dict(status="unsupported", message=str(e).splitlines()[0][:200])
    case["backends"] = backends
    ok = {n: b for n, b in backends.items() if b.get("status") == "ok"}
    case["best_backend"] = min(ok, key=lambda n: ok[n]["median_us"]) if ok else None
    del sets
    torch.cuda.empty_cache()
    return case


def load_qdec(path):
    with open(path) as f:
        doc = json.load(f)
    by_key = {}
    formats = []
    for c in doc.get("cases", []):
        if c.get("status") != "ok":
            continue
        by_key.setdefault(c["key"], {})[c["format"]] = c
        if c["format"] not in formats:
            formats.append(c["format"])
    return doc, by_key, formats


def fmt_ratio(num, den):
    return f"{num / den:.2f}" if num and den else "-"


def print_ratio_tables(cases, qdec_doc, qdec_by_key, qdec_formats, torch_device):
    qdev = qdec_doc.get("device", {}).get("name", "?")
    if qdev != torch_device:
        print(f"WARNING: qdec JSON was measured on '{qdev}', torch on '{torch_device}'")
    if qdec_doc.get("options", {}).get("unequal"):
        print("WARNING: the qdec JSON used unequal sequence lengths; torch runs every sequence at full T")
    print("\nratio table: torch µs / qdec µs (> 1: qdec faster); torch = its default backend choice")
    head = (
        f"{'shape':<32} {'torch µs':>9} {'backend':>9} {'best µs':>9} {'best':>9} "
        f"{'bf16 µs':>9} {'int4 µs':>9} {'t/bf16':>7} {'t/int4':>7} {'best/int4':>9}"
    )
    print(head)
    for c in cases:
        q = qdec_by_key.get(c["key"], {})
        t_def = c["default"]["median_us"]
        best = c["best_backend"]
        t_best = c["backends"][best]["median_us"] if best else None
        bf16 = q.get("bf16", {}).get("median_us")
        int4 = q.get("int4", {}).get("median_us")
        label = case_label(c)
        print(
            f"{label:<32} {t_def:>9.2f} {c['default']['backend_guess']:>9} "
            f"{(f'{t_best:.2f}' if t_best else '-'):>9} {(best or '-'):>9} "
            f"{(f'{bf16:.2f}' if bf16 else '-'):>9} {(f'{int4:.2f}' if int4 else '-'):>9} "
            f"{fmt_ratio(t_def, bf16):>7} {fmt_ratio(t_def, int4):>7} {fmt_ratio(t_best, int4):>9}"
        )
    if not qdec_formats:
        return
    print("\nper format: torch default µs / qdec µs")
    widths = {f: max(8, len(f) + 1) for f in qdec_formats}
    print(f"{'shape':<32}" + "".join(f"{f:>{widths[f]}}" for f in qdec_formats))
    for c in cases:
        q = qdec_by_key.get(c["key"], {})
        label = case_label(c)
        row = "".join(
            f"{fmt_ratio(c['default']['median_us'], q.get(f, {}).get('median_us')):>{widths[f]}}"
            for f in qdec_formats
        )
        print(f"{label:<32}{row}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="all", help="comma list: seed000, long, smollm2, all")
    ap.add_argument("--batch", default="32,64,128,256,512", help="seed000 batch sizes (comma list)")
    ap.add_argument("--iters", type=int, default=30, help="timed launches per case (>= 30 recommended)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=5.0, help="keep warming up until this many ms have passed")
    ap.add_argument("--math", action="store_true", help="also time the math backend (slow, memory hungry)")
    ap.add_argument("--qdec-json", help="bench_attention's JSON from the same run: print the ratio table")
    ap.add_argument("--json", help="write the torch results here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("torch_sdpa: no CUDA device available; nothing was measured", file=sys.stderr)
        return 2
    families = {f.strip() for f in args.shapes.split(",") if f.strip()}
    if "all" in families:
        families = {"seed000", "long", "smollm2"}
    unknown = families - {"seed000", "long", "smollm2"}
    if unknown:
        print(f"torch_sdpa: unknown shape families {sorted(unknown)}", file=sys.stderr)
        return 1
    batches = [int(b) for b in args.batch.split(",") if b.strip()]
    torch.manual_seed(args.seed)
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20)

    qdec_doc, qdec_by_key, qdec_formats = (None, {}, [])
    if args.qdec_json:
        qdec_doc, qdec_by_key, qdec_formats = load_qdec(args.qdec_json)
    read_ceiling = qdec_doc["ceilings"]["read_gbps"] if qdec_doc else None

    print(
        f"device: {props.name} ({props.multi_processor_count} SMs, L2 {l2_bytes / 1e6:.1f} MB), "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    )
    if read_ceiling:
        print(f"read ceiling from the qdec JSON: {read_ceiling:.0f} GB/s")
    print(
        f"{args.iters} iterations after >= {args.warmup} warm-up launches and >= {args.warmup_ms} ms; "
        "BF16, enable_gqa=True\n"
    )
    print(
        f"{'shape':<32} {'backend':<10} {'median µs':>10} {'min µs':>9} {'bytes MB':>10} {'GB/s':>8} "
        f"{'% ceil':>7}  kernels / note"
    )

    cases = []
    for s in make_shapes(families, batches):
        c = run_shape(s, args, l2_bytes, device)
        cases.append(c)
        rows = [("default", c["default"])] + list(c["backends"].items())
        for name, r in rows:
            if r.get("status", "ok") != "ok":
                print(f"{label_of(s):<32} {name:<10} {'unsupported: ' + r['message']}")
                continue
            pct = f"{100 * r['gbps'] / read_ceiling:.1f}" if read_ceiling else "-"
            note = ""
            if name == "default":
                note = f"-> {c['default']['backend_guess']}: " + ", ".join(k[:60] for k in r["kernels"][:2])
            elif name == c["best_backend"]:
                note = "best"
            print(
                f"{label_of(s):<32} {name:<10} {r['median_us']:>10.2f} {r['min_us']:>9.2f} "
                f"{c['bytes'] / 1e6:>10.2f} {r['gbps']:>8.1f} {pct:>7}  {note}"
            )
        sys.stdout.flush()

    if qdec_doc is not None:
        print_ratio_tables(cases, qdec_doc, qdec_by_key, qdec_formats, props.name)

    if args.json:
        doc = dict(
            bench="torch_sdpa",
            units=dict(time="us", bandwidth="GB/s (1e9 bytes/s)"),
            device=dict(name=props.name, sm_count=props.multi_processor_count, l2_bytes=l2_bytes),
            torch_version=torch.__version__,
            cuda_version=torch.version.cuda,
            iters=args.iters,
            warmup=args.warmup,
            warmup_ms=args.warmup_ms,
            qdec_json=args.qdec_json,
            cases=cases,
        )
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
