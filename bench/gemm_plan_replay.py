#!/usr/bin/env python3
"""Replay the fused weight-only GEMM's launch-shape planner over measured grids of forced split counts.

The planner (plan_fused in src/gemm/gemm.cu, M <= 16) scores every (K parts, X staging, split count) candidate
by an estimate in µs and launches the cheapest. This script mirrors that estimate and the candidate loop, reads
grids measured on the GPU with the same binary, and reports, for the tree's constants and for candidate values of
the split-K terms (kSplitUs, kSplitUsPerMB), which launch shape the planner would take in each cell and what that
shape measured. It only scores shapes whose time the grid holds; a choice outside the grid is counted, not guessed.

A grid is the output of one bench_gemm run per forced split count, each preceded by a '######## splits S' line
(S = 0: the planner's own choice), e.g. on the GPU machine:

  for s in 0 1 2 3 4 5 6 8 10 13 16 26 32; do echo "######## splits $s"
    bench_gemm --formats int8,int4-g128 --shapes all --m 1,4,8,16 --graph-reps 0 --read-bound 0 --splits $s; done

Usage: gemm_plan_replay.py GRID [GRID ...] [--fit] [--split US --split-mb US_PER_MB [--keep-m1]]
  --fit        search kSplitUs x kSplitUsPerMB and print the best pairs (every grid scored separately)
  --split ...  print every cell whose choice changes against the tree's constants, with both measured times;
               --keep-m1 keeps the tree's constants at M = 1.

Mirrors the tree at session 34 (docs/gemm.md, "Session 34"); keep it in step with plan_fused when that changes.
"""
import argparse
import collections
import itertools
import math
import re

SMS = 132  # H100 / H200
SMEM_PER_SM = 228 * 1024
SMEM_LIMIT = min(227 * 1024, SMEM_PER_SM - 1024)  # per-block opt-in limit, and one SM less the reserve
TREE = dict(stream=3.6e6, tile=0.28, mt2=0.89, fixed=1.46, cta=1.0, xst=0.41, ring=0.3, ringpart=0.1, ringmb=0.3,
            split=2.75, splitmb=0.0)


def shape_consts(n, k, fmt):
    int4 = fmt.startswith("int4")
    chunk = 64 if int4 else 32
    gs = 128 if fmt.endswith("g128") else 0  # the grids hold int4-g128 and int8 per channel
    per_channel = gs == 0
    align = chunk if per_channel else max(chunk, gs)
    tpg = 1 if per_channel else gs // chunk
    n_pad = (n + 15) // 16 * 16
    k_pad = (k + chunk - 1) // chunk * chunk
    code = n_pad * k_pad // (2 if int4 else 1)
    meta = (k_pad // gs) * n_pad * 4 if int4 else n_pad * 2
    return chunk, gs, per_channel, align, tpg, n_pad, k_pad, code, meta


def smem_bytes(mt, xrows, kc, n_seg, cta_rows, ring_k):
    x = 2 * (128 // cta_rows) * (ring_k + 8) if ring_k else kc + 8
    return 4 * 8 * 512 + xrows * x * 2 + n_seg * cta_rows * 4


def plan(n, k, m, fmt, c):
    """The planner's choice (splits, parts, ring) at M <= 16 with constants c."""
    chunk, gs, per_channel, align, tpg, n_pad, k_pad, code, meta = shape_consts(n, k, fmt)
    units = (k_pad + align - 1) // align
    mt = 1 if m <= 8 else 2
    cap = 4 if mt == 1 else 2
    xrows = min(m, 8) if mt == 1 else 16
    max_auto = max(1, min(units, int(0.5 * code / (m * n_pad * 4.0))))
    ring_k = 4 * chunk

    def n_seg(kc, parts):
        return parts if per_channel else (kc + gs - 1) // gs

    def even(tiles, parts):
        return parts == 1 or ((tiles + tpg - 1) // tpg + parts - 1) // parts * tpg * parts == tiles

    best = None
    for parts, ring in itertools.product((1, 2, 4, 8), (False, True)):
        cta_rows = 128 // parts
        kc_max, kc = 0, align
        while kc < k_pad + align and smem_bytes(mt, xrows, kc, n_seg(kc, parts), cta_rows,
                                                ring_k if ring else 0) <= SMEM_LIMIT:
            kc_max, kc = kc, kc + align
        last = -1
        for s in range(1, max_auto + 1):
            kc = min(kc_max, min(units, (units + s - 1) // s) * align)
            if kc == last or kc == 0:
                continue
            last = kc
            splits = (k_pad + kc - 1) // kc
            slice_tiles = kc // chunk
            slice_groups = (slice_tiles + tpg - 1) // tpg
            if slice_groups < parts:
                continue
            if ring and not (even(slice_tiles, parts) and even((k_pad - (splits - 1) * kc) // chunk, parts)):
                continue
            smem = smem_bytes(mt, xrows, kc, n_seg(kc, parts), cta_rows, ring_k if ring else 0)
            resident = min(cap, SMEM_PER_SM // (smem + 1024))
            n_blocks = (n_pad // 16 + 8 // parts - 1) // (8 // parts)
            ctas = n_blocks * splits
            waves = (ctas + resident * SMS - 1) // (resident * SMS)
            part_tiles = (slice_groups + parts - 1) // parts * tpg
            per_warp = part_tiles * c["tile"] * (c["mt2"] if mt == 2 else 1.0)
            busiest = (ctas + waves * SMS - 1) // (waves * SMS)
            stream = busiest * ((code + meta) / ctas) / (c["stream"] / SMS)
            x_mb = ctas * kc * xrows * 2 / 1e6
            cost = waves * (max(stream, per_warp) + c["fixed"]) + (ctas + SMS - 1) // SMS * c["cta"]
            cost += c["ring"] + c["ringpart"] * (parts - 1) + c["ringmb"] * x_mb if ring else c["xst"] * x_mb
            if splits > 1:
                cost += c["split"] + c["splitmb"] * m * n_pad * splits * 4 / 1e6
            if best is None or cost < best[0] - 1e-9:
                best = (cost, (splits, parts, ring))
    return best[1]


def load(path):
    """{(n, k, m, fmt): {(splits, parts, ring): best µs}} from a grid log."""
    grid = collections.defaultdict(dict)
    for line in open(path):
        f = line.split()
        if len(f) < 10 or not re.match(r"\d+x\d+$", f[0]) or f[8] != "fused":
            continue
        mm = re.match(r"s(\d+)p(\d+)(r?)", f[9].rstrip("*"))
        n, k = map(int, f[0].split("x"))
        cell, shape = (n, k, int(f[1]), f[2]), (int(mm.group(1)), int(mm.group(2)), mm.group(3) == "r")
        grid[cell][shape] = min(float(f[3]), grid[cell].get(shape, 1e9))
    return grid


def score(grid, consts, keep_m1=False):
    """(cells whose choice the grid lacks, geomean chosen/best, worst chosen/best, geomean chosen/tree's choice)."""
    missing, to_best, to_tree, worst = 0, [], [], 1.0
    for cell, times in grid.items():
        chosen = plan(*cell, TREE if keep_m1 and cell[2] == 1 else consts)
        tree = plan(*cell, TREE)
        if chosen not in times or tree not in times:
            missing += 1
            continue
        r = times[chosen] / min(times.values())
        to_best.append(math.log(r))
        to_tree.append(math.log(times[chosen] / times[tree]))
        worst = max(worst, r)
    gm = lambda v: math.exp(sum(v) / len(v)) if v else float("nan")
    return missing, gm(to_best), worst, gm(to_tree)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grids", nargs="+")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--split", type=float)
    ap.add_argument("--split-mb", type=float, default=0.0)
    ap.add_argument("--keep-m1", action="store_true")
    a = ap.parse_args()
    grids = [(g, load(g)) for g in a.grids]
    for name, grid in grids:
        mis = sum(1 for cell, t in grid.items() if plan(*cell, TREE) not in t)
        print("%s: %d cells; the tree's constants: chosen/best %.4f (worst %.3f), %d choices outside the grid"
              % (name, len(grid), *score(grid, TREE)[1:3], mis))
    if a.fit:
        rows = []
        for s, smb in itertools.product((0.5, 1.0, 1.5, 1.75, 2.0, 2.25, 2.56, 3.0), (0, 0.25, 0.5, 1.0, 1.5, 2.94)):
            c = dict(TREE, split=s, splitmb=smb)
            sc = [score(g, c, a.keep_m1) for _, g in grids]
            rows.append((sum(x[0] for x in sc), sum(math.log(x[1]) for x in sc), s, smb, sc))
        for miss, _, s, smb, sc in sorted(rows)[:10]:
            print("kSplitUs %.2f kSplitUsPerMB %.2f: %s" % (s, smb, "  ".join(
                "chosen/best %.4f worst %.3f vs tree %.4f (%d outside)" % (x[1], x[2], x[3], x[0]) for x in sc)))
    if a.split is not None:
        c = dict(TREE, split=a.split, splitmb=a.split_mb)
        fmt = lambda p: "s%dp%d%s" % (p[0], p[1], "r" if p[2] else "")
        for name, grid in grids:
            print("#### %s" % name)
            for cell in sorted(grid):
                new = plan(*cell, TREE if a.keep_m1 and cell[2] == 1 else c)
                old = plan(*cell, TREE)
                if new != old:
                    t0, t1 = grid[cell].get(old), grid[cell].get(new)
                    print("%5dx%-5d M=%-2d %-10s %-7s %7s -> %-7s %7s  %s" % (
                        *cell, fmt(old), "%.2f" % t0 if t0 else "-", fmt(new), "%.2f" % t1 if t1 else "-",
                        "%.3f" % (t1 / t0) if t0 and t1 else "outside the grid"))
            miss, tb, w, tt = score(grid, c, a.keep_m1)
            print("chosen/best %.4f (worst %.3f), chosen/tree's choice %.4f, %d cells outside the grid"
                  % (tb, w, tt, miss))


if __name__ == "__main__":
    main()
