#!/usr/bin/env bash
# The differential suite: every case of benches/fixtures/differential/
# rendered by pav-templates and by Jinja2 configured as PaV configured it,
# compared case by case (benches/differential.py). Fails on a difference not
# listed in known-differences.txt or deliberate.yaml, and on a listed case
# that no longer differs.
#
#   bash benches/differential.sh [--list] [--show CASE...]
#
# Installs Jinja2 3.1.6 and PyYAML with pip if missing. About 10 s once built.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python="${PYTHON:-python3}"
if ! "$python" -c 'import jinja2, yaml; assert jinja2.__version__ == "3.1.6"' 2>/dev/null; then
    echo "installing jinja2 3.1.6 and pyyaml with pip" >&2
    "$python" -m pip install --quiet --user jinja2==3.1.6 pyyaml 2>/dev/null ||
        "$python" -m pip install --quiet --break-system-packages jinja2==3.1.6 pyyaml
fi

# The workspace's examples, as `cargo test --workspace` builds them too:
# `-p pav-templates` would resolve features for that package alone and
# build its dependencies once more.
cargo build --quiet --locked --workspace --examples
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac

"$python" "$root/benches/differential.py" "$target_dir/debug/examples/render-cases" "$@"
