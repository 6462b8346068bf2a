#!/usr/bin/env bash
# Times pav-templates against the original PaV's Jinja2 templating on the
# same phases of the same examples, on this machine, in one run, and checks
# that both produce identical output (exit status 1 if not).
#
#   bash benches/compare-jinja2.sh [--quick] [extra args for both timers]
#
# --quick: shorter samples (numbers noisier). Everything runs on one core
# (taskset, when available), Rust first, then Python, never concurrently.
# Installs jinja2 and pyyaml with pip if missing. About a minute once built.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

args=()
for arg in "$@"; do
    case "$arg" in
        --quick) args+=(--sample-ms 25 --samples 5) ;;
        *) args+=("$arg") ;;
    esac
done

python="${PYTHON:-python3}"
if ! "$python" -c 'import jinja2, yaml' 2>/dev/null; then
    echo "installing jinja2 and pyyaml with pip" >&2
    "$python" -m pip install --quiet --user jinja2 pyyaml 2>/dev/null ||
        "$python" -m pip install --quiet --break-system-packages jinja2 pyyaml
fi

echo "building render-timing (cargo build --release -p pav-benches)" >&2
cargo build --release --quiet -p pav-benches --bin render-timing
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac

pin=()
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
    cpu="${PIN_CPU:-$(($(nproc) - 1))}"
    pin=(taskset -c "$cpu")
    echo "pinned to CPU $cpu" >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"${pin[@]}" "$target_dir/release/render-timing" "${args[@]}" >"$work/rust.json"
"${pin[@]}" "$python" "$root/benches/jinja2_pav.py" "$work/rust.json" "${args[@]}"
