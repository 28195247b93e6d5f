#!/usr/bin/env bash
# Set-up as a new user meets it: a fresh clone of this checkout's HEAD with an empty build cache, then
# `make setup` and `make demo`, each timed (docs/BENCHMARKS.md, "Set-up"). Usage: scripts/setup_time.sh [DIR]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-/tmp/tandem-setup-time}"
rm -rf "$dir" && mkdir -p "$dir"
git clone -q "$src" "$dir/clone"
cd "$dir/clone"
export TANDEM_CACHE="$dir/cache"
t0=$(date +%s)
make setup > "$dir/setup.log" 2>&1
t1=$(date +%s)
make demo > "$dir/demo.log" 2>&1
t2=$(date +%s)
echo "make setup: $((t1 - t0)) s; make demo: $((t2 - t1)) s; both: $((t2 - t0)) s (logs in $dir)"
grep -h "built llama-server in" "$dir/setup.log" || true
