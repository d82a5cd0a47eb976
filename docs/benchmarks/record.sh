#!/usr/bin/env bash
# Record one machine's benchmark results, as committed under docs/benchmarks/:
# `sparsegpu probe` and `sparsegpu bench` JSON (+ plots), and one quick asv run.
# Usage, from the repository root with sparsegpu importable:
#   docs/benchmarks/record.sh MACHINE OUTDIR [ASV RUN ARGUMENTS...]
# Environment: PYTHON (python3), BENCH_DTYPES (float32,float64), BENCH_TIMEOUT and
# ASV_TIMEOUT (seconds; 0, the default, is no limit).
set -uo pipefail
machine=${1:?machine name, e.g. h200}
out=${2:?output folder}
py=${PYTHON:-python3}
mkdir -p "$out"
status=0

echo "=== probe"
"$py" -m sparsegpu probe --json --plot "$out/probe_$machine.png" >"$out/probe_$machine.json" || status=1

echo "=== bench"
timeout "${BENCH_TIMEOUT:-0}" "$py" -m sparsegpu bench --dtypes "${BENCH_DTYPES:-float32,float64}" \
  --json "$out/bench_$machine.json" --plot "$out/bench_$machine.png" || status=1

echo "=== asv run --quick"
# asv needs a git repository holding the benchmarked tree; a copy without one gets a snapshot
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  git init -q && git checkout -q -b main && git add -A \
    && git -c user.name=asv -c user.email=asv@localhost commit -qm "benchmarked tree"
fi
"$py" -m asv machine --yes --machine "$machine" >/dev/null \
  && ASV_PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout "${ASV_TIMEOUT:-0}" \
    "$py" -m asv run --python=same --quick --machine "$machine" \
    --set-commit-hash "$(git rev-parse HEAD)" --show-stderr "${@:3}" || status=1
# whatever asv saved, also after a failure or a time limit
tar -C .asv -cf "$out/asv_results.tar" results || status=1
exit "$status"
