#!/usr/bin/env bash
# Times pav-templates' phase evaluations at two revisions side by side, on
# this machine, in one run: render-timing is built at each revision (a git
# worktree each, target directories kept under ${AB_TARGET:-/tmp/pav-ab}),
# then both binaries run alternately, pinned to one CPU, and every (example,
# phase, measurement) keeps the fastest median of its runs. Prints one row
# per measurement with the ratio after / before and the worst ratio.
#
#   bash benches/ab-render.sh BEFORE [AFTER] [ROUNDS]
#
# AFTER defaults to HEAD, ROUNDS (runs of each side) to 8: about 20 s per run
# once built. Run it on an idle machine: it measures the machine as well.
# With valgrind installed it then counts the instructions of one render of
# each phase at both revisions (callgrind; a few minutes), which, unlike
# the times, do not move between runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
before="${1:?usage: ab-render.sh BEFORE [AFTER] [ROUNDS]}"
after="${2:-HEAD}"
rounds="${3:-${AB_ROUNDS:-8}}"
work="${AB_TARGET:-/tmp/pav-ab}"
mkdir -p "$work"

build() { # build <side> <rev>: a worktree at <rev>, render-timing in $work/target-<side>
    local side="$1" rev="$2" tree="$work/$1"
    git -C "$root" worktree remove --force "$tree" 2>/dev/null || true
    git -C "$root" worktree add --force --detach "$tree" "$rev" >/dev/null 2>&1
    echo "building render-timing at $rev ($side)" >&2
    (cd "$tree" && CARGO_TARGET_DIR="$work/target-$side" \
        cargo build --release --quiet -p pav-benches --bin render-timing)
}
build before "$before"
build after "$after"

cpu="${PIN_CPU:-$(($(nproc) - 1))}"
[ "$rounds" -gt 0 ] && python3 - "$work" "$rounds" "$cpu" "$before" "$after" <<'EOF'
import json, subprocess, sys

work, rounds, cpu, revs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:6]
sides = {side: (f"{work}/{side}", f"{work}/target-{side}/release/render-timing")
         for side in ("before", "after")}
best = {side: {} for side in sides}
for i in range(rounds):
    # alternate which side runs first, so drifts of the machine hit both
    order = list(sides.items()) if i % 2 == 0 else list(reversed(sides.items()))
    for side, (tree, binary) in order:
        out = subprocess.run(["taskset", "-c", cpu, binary, "--sample-ms", "100", "--samples", "5"],
                             cwd=tree, capture_output=True, text=True, check=True).stdout
        for case in json.loads(out)["cases"]:
            if not case.get("timed"):
                continue
            for t in case["timings"] + [case["compile"]]:
                key = (case["example"], case["label"], t["what"])
                best[side][key] = min(best[side].get(key, float("inf")), t["median_ns"])
print(f"before {revs[0]}, after {revs[1]}, {rounds} runs each, CPU {cpu}; fastest median, µs")
print(f"| example | phase | what | before | after | after / before |")
print(f"|---|---|---|--:|--:|--:|")
worst = 0.0
for key in sorted(best["before"]):
    if key not in best["after"]:
        continue
    b, a = best["before"][key] / 1000, best["after"][key] / 1000
    if key[2] != "compile":
        worst = max(worst, a / b)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {b:.2f} | {a:.2f} | {a / b:.2f} |")
print(f"worst ratio after / before of a phase evaluation: {worst:.2f}")
EOF

# Timings of a few µs move by ±10 % between runs even on an idle machine;
# instructions executed do not. Per phase, what one typed render (`render::<S>`)
# executes, from two callgrind runs of different lengths (their difference
# leaves out compiling and setting up). AB_ROUNDS=0 skips the timing above.
command -v valgrind >/dev/null || { echo "valgrind not installed: no instruction counts"; exit 0; }
python3 - "$work" "$before" "$after" <<'EOF'
import json, re, subprocess, sys

work, revs = sys.argv[1], sys.argv[2:4]
SHORT, LONG = 1000, 3000


def instructions(side, case, iterations):
    tree, binary = f"{work}/{side}", f"{work}/target-{side}/release/render-timing"
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          binary, "--profile", case, str(iterations)],
                         cwd=tree, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


listed = subprocess.run([f"{work}/target-after/release/render-timing", "--sample-ms", "1", "--samples", "1"],
                        cwd=f"{work}/after", capture_output=True, text=True, check=True).stdout
cases = [f"{c['example']}/{c['label']}" for c in json.loads(listed)["cases"] if c.get("timed")]
print()
print(f"instructions per typed render (callgrind), before {revs[0]}, after {revs[1]}")
print("| example/phase | before | after | after / before |")
print("|---|--:|--:|--:|")
worst = 0.0
for case in cases:
    per = {side: (instructions(side, case, LONG) - instructions(side, case, SHORT)) / (LONG - SHORT)
           for side in ("before", "after")}
    ratio = per["after"] / per["before"]
    worst = max(worst, ratio)
    print(f"| {case} | {per['before']:.0f} | {per['after']:.0f} | {ratio:.3f} |")
print(f"worst ratio after / before: {worst:.3f}")
EOF
