#!/usr/bin/env python3
"""The report of scripts/soak: restarts, memory and node series from the
samples it kept, with the verdicts scripts/soak wrote (volumes, mounts,
schedule). Exit 1 if any verdict is FAIL.

    python3 scripts/soak.d/report.py OUT WARMUP_MIN WINDOW_MIN "DRIVERS"

OUT/samples.tsv, one line per sample of each container:
    C  time  elapsed  namespace  pod  uid  container  restarts  pid  VmRSS_KiB  RssAnon_KiB  fds
and one per sample of the node:
    N  time  elapsed  publish_mounts  staging_mounts_local  staging_mounts_sparse
       pav_pod_mounts  pav_pod_dirs  loops_local  loops_sparse  files_local
       files_sparse  pav_step_pods
"""

import os
import sys
from collections import defaultdict

out, warmup, window, drivers = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split()
MIB = 1024  # KiB

# The processes whose memory is judged: pav's and sparse-file's own
# containers. Sidecars (Go) are printed only.
JUDGED = {("pav", "pav"), ("sparse-file", "sparse-file")}
# Growth allowed from the first window to the last: the larger of these.
ALLOWED_FRACTION = 0.10
ALLOWED_KIB = 2 * MIB


def read_lines(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


params = dict(line.split(" ", 1) for line in read_lines("params"))
containers = defaultdict(list)  # (ns, pod, uid, container) -> [(elapsed, restarts, rss, anon, fds)]
pods_at = defaultdict(set)  # elapsed -> {(ns, pod, uid)}
node = []
for line in read_lines("samples.tsv"):
    f = line.split("\t")
    if f[0] == "C":
        _, _, el, ns, pod, uid, c, restarts, _pid, rss, anon, fds = f
        num = lambda v: int(v) if v not in ("-", "") else None
        containers[(ns, pod, uid, c)].append((int(el), int(restarts), num(rss), num(anon), num(fds)))
        pods_at[int(el)].add((ns, pod, uid))
    elif f[0] == "N":
        node.append([int(x) for x in f[2:]])

verdicts = [line.split("\t") for line in read_lines("verdicts")]


def verdict(ok, what, detail):
    verdicts.append(["PASS" if ok else "FAIL", what, detail])


def mib(kib):
    return kib / MIB


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


times = sorted(pods_at)
minutes = (times[-1] - times[0]) / 60 if times else 0
print()
print("==== soak report")
print(f"date {params.get('date', '?')}, commit {params.get('commit', '?')}")
start, end = int(params.get("start", 0)), int(params.get("end", 0))
print(f"schedule {params.get('minutes')} min, a cycle every {params.get('period')} s per driver; "
      f"run {(end - start) / 60:.1f} min (install before it {params.get('install_seconds', '?')} s), "
      f"{len(times)} samples over {minutes:.1f} min")

# ---------------------------------------------------------------- schedule
print()
print("== schedule")
for d in drivers:
    cycles = [tuple(map(int, l.split())) for l in read_lines(f"cycles-{d}")]
    ops = defaultdict(int)
    for op in read_lines(f"ops-{d}"):
        ops[op] += 1
    took = [c[2] for c in cycles]
    over = sum(1 for t in took if t > int(params.get("period", 0)))
    if took:
        print(f"{d}: {len(cycles)} cycles completed, duration mean {mean(took):.0f} s, max {max(took)} s, "
              f"{over} longer than the period")
    else:
        print(f"{d}: no cycle completed")
    print("   " + ", ".join(f"{k} {ops[k]}" for k in
                             ["create", "stage", "read", "grow", "snapshot", "restore", "delete-snapshot", "unstage", "delete"]))

# ---------------------------------------------------------------- restarts
print()
print("== restarts (namespaces pav, sparse-file, kube-system; PaV's step pods aside)")
first_pods = pods_at[times[0]] if times else set()
last_pods = pods_at[times[-1]] if times else set()
restarted = []
for key in sorted(containers):
    series = containers[key]
    ns, pod, uid, c = key
    r0, r1 = series[0][1], series[-1][1]
    seen = f"{(series[-1][0] - series[0][0]) / 60:.0f} min"
    print(f"  {ns}/{pod} {c}: restarts {r0} -> {r1} (sampled over {seen})")
    if r1 != r0:
        restarted.append(f"{ns}/{pod} {c} ({r1 - r0})")
gone = sorted(f"{ns}/{pod}" for ns, pod, _ in first_pods - last_pods)
new = sorted(f"{ns}/{pod}" for ns, pod, _ in last_pods - first_pods)
ok = bool(times) and not restarted and not gone and not new
detail = (f"{len(containers)} containers in {len(last_pods)} pods, 0 restarts, no pod replaced, over {minutes:.1f} min"
          if ok else
          f"restarted: {', '.join(restarted) or 'none'}; pods gone: {', '.join(gone) or 'none'}; "
          f"pods new: {', '.join(new) or 'none'}" + ("" if times else "; no samples"))
verdict(ok, "restarts", detail)

# ---------------------------------------------------------------- memory
print()
end_el = times[-1] if times else 0
w0, w1 = warmup * 60, (warmup + window) * 60
note = ""
if end_el - window * 60 < w1:
    # A short run: two equal windows after the warm-up, touching.
    half = max((end_el - warmup * 60) / 2, 60)
    w1 = w0 + half
    note = f" (short run: windows of {half / 60:.1f} min)"
    last_from = end_el - half
else:
    last_from = end_el - window * 60
print(f"== memory: VmRSS in MiB per sample; first window {w0 / 60:.0f}-{w1 / 60:.0f} min, "
      f"last window {last_from / 60:.0f}-{end_el / 60:.0f} min{note}; "
      f"judged: growth <= max({ALLOWED_FRACTION:.0%}, {mib(ALLOWED_KIB):.0f} MiB)")
failed_memory = []
judged_lines = []
for key in sorted(containers, key=lambda k: ((k[0], k[3]) not in JUDGED, k)):
    ns, pod, uid, c = key
    series = [(el, rss, anon, fds) for el, _, rss, anon, fds in containers[key] if rss is not None]
    if not series:
        continue
    first = [rss for el, rss, _, _ in series if w0 <= el < w1]
    last = [rss for el, rss, _, _ in series if el >= last_from]
    judged = (ns, c) in JUDGED
    base, final = mean(first), mean(last)
    growth = final - base
    allowed = max(ALLOWED_FRACTION * base, ALLOWED_KIB)
    fds = [x for _, _, _, x in series if x is not None]
    anon = [x for _, _, x, _ in series if x is not None]
    if judged and first and last:
        good = growth <= allowed
        mark = "PASS" if good else "FAIL"
        if not good:
            failed_memory.append(f"{ns}/{pod} {c} +{mib(growth):.1f} MiB")
        judged_lines.append(f"{pod} {c} {mib(base):.1f} -> {mib(final):.1f} MiB")
    elif judged:
        mark = "FAIL"
        failed_memory.append(f"{ns}/{pod} {c}: too few samples")
    else:
        mark = "info"
    print(f"  [{mark}] {ns}/{pod} {c}: first window {mib(base):.1f}, last {mib(final):.1f} "
          f"({mib(growth):+.1f}, allowed +{mib(allowed):.1f}); min {mib(min(r for _, r, _, _ in series)):.1f}, "
          f"max {mib(max(r for _, r, _, _ in series)):.1f}; RssAnon {mib(anon[0]):.1f} -> {mib(anon[-1]):.1f}; "
          f"fds {fds[0]} -> {fds[-1]} (max {max(fds)})")
    print("      " + " ".join(f"{mib(r):.1f}" for _, r, _, _ in series))
verdict(bool(judged_lines) and not failed_memory, "memory",
        "; ".join(judged_lines) if not failed_memory else "grew: " + "; ".join(failed_memory))

# ---------------------------------------------------------------- node
print()
print("== node, per sample: CSI publish mounts / staging mounts local, sparse / PaV pod mounts, dirs / "
      "loop devices local, sparse / image files local, sparse / PaV step pods")
names = ["publish", "staged-local", "staged-sparse", "pav-mounts", "pav-dirs",
         "loops-local", "loops-sparse", "files-local", "files-sparse", "pav-pods"]
for i, name in enumerate(names):
    col = [row[i + 1] for row in node]
    if col:
        print(f"  {name:>13}: max {max(col):2d}, last {col[-1]:2d}: " + " ".join(map(str, col)))

# ---------------------------------------------------------------- verdicts
print()
print("==== verdicts")
for v, what, detail in verdicts:
    print(f"{v} {what}: {detail}")
sys.exit(1 if any(v[0] == "FAIL" for v in verdicts) else 0)
