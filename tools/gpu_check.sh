#!/usr/bin/env bash
# The whole GPU check of a tree in one go (CONTRIBUTING.md, "The test suite"): the test
# suite on the GPU, scipy's own CSR and BSR tests with sparsegpu's classes, and, with
# --ranks, the distributed tests under mpiexec on the GPUs there are. Every step has a time
# limit, so a hang costs that step's limit and not the rest of the run, and a test still
# running after HANG seconds writes every thread's stack to the output folder by itself
# (SPARSEGPU_TEST_HANG_SECONDS). Logs and JSON summaries go to the output folder ($OUT,
# else ./gpu-check); the last lines printed are one summary line per step.
#
#   tools/gpu_check.sh [--ranks "2 4"] [--only suite,scipy,distributed] [--workers 16]
#                      [--distributed-tests "tests/distributed/test_x.py::test_y ..."]
#
# Run it from the repository root with the package importable (an editable install, or
# PYTHONPATH=$PWD) and CuPy, pytest-xdist and mpi4py installed.
set -uo pipefail
cd "$(dirname "$0")/.."

ranks=""
only="suite,scipy,distributed"
workers=16
distributed_tests="tests/distributed"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --distributed-tests) distributed_tests="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out="${OUT:-gpu-check}"
mkdir -p "$out"
python="${PYTHON:-python3}"
# seconds: each step's limit, and how long a test runs before its stacks are written
SUITE_LIMIT="${SUITE_LIMIT:-420}"
SCIPY_LIMIT="${SCIPY_LIMIT:-300}"
# (the distributed tests under mpiexec -n 2 on 2 x H200 reached 62% in 200 s, none hung)
RANKS_LIMIT="${RANKS_LIMIT:-420}"
HANG="${HANG:-60}"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}" PYTHONUNBUFFERED=1
# Every pytest worker opens a stacks file and writes each test's name in it: they are kept
# outside $out and only those holding a stack dump (a hang's) are copied there, so that the
# output folder holds the logs (a device run brings back at most 8 files, and sixteen
# workers' stacks files crowded the suite's log out).
stacks_dir="$(mktemp -d)"
trap 'rm -rf "$stacks_dir"' EXIT
export SPARSEGPU_TEST_STACKS="$stacks_dir/stacks" SPARSEGPU_TEST_HANG_SECONDS="$HANG"
: >"$out/summary.txt"
status=0

wants() { [[ ",$only," == *",$1,"* ]]; }

# run NAME LIMIT COMMAND...: the command's output to $out/NAME.log, its last line kept
run() {
  local name="$1" limit="$2"
  shift 2
  echo "=== $name (at most ${limit} s)"
  timeout -k 20 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local last
  last="$(grep -a -E "passed|failed|error|tests with sparsegpu" "$out/$name.log" | tail -1)"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && last="TIMED OUT after ${limit} s (stacks: $out/stacks.rank*) ${last}"
  [ "$rc" -ne 0 ] && status=1
  for stacks in "$stacks_dir"/stacks*; do
    # every test's name is written as it starts; only a file with a dump (a test past the
    # hang limit) is worth a place among the 8 files a device run brings back
    grep -q "most recent call first" "$stacks" 2>/dev/null && cp "$stacks" "$out/"
  done
  rm -f "$stacks_dir"/stacks*
  # each step's line written as it ends: a run cut short keeps the steps it finished
  echo "$name: rc=$rc ${last}" >>"$out/summary.txt"
}

if wants suite; then
  run suite "$SUITE_LIMIT" "$python" -m pytest -q -n "$workers" -p no:cacheprovider
fi
if wants scipy; then
  for format in csr bsr; do
    run "scipy_$format" "$SCIPY_LIMIT" "$python" tools/scipy_suite.py --format "$format" \
      --out "$out/scipy_$format.json"
  done
fi
if wants distributed && [ -n "$ranks" ]; then
  mpiexec="${MPIEXEC:-mpiexec}"
  passed=(PYTHONPATH NCCL_NVLS_ENABLE PYTHONUNBUFFERED SPARSEGPU_TEST_STACKS SPARSEGPU_TEST_HANG_SECONDS)
  export PYTHONPATH="${PYTHONPATH:-}"
  # the device machines' Open MPI (which, run as root, says so only with the root flag)
  if "$mpiexec" --allow-run-as-root --version 2>&1 | grep -qiE "open ?mpi|openrte"; then
    flags=(--allow-run-as-root)
    for variable in "${passed[@]}"; do flags+=(-x "$variable"); done
  else  # MPICH (the mpi extra's wheel)
    flags=(-genvlist "$(IFS=,; echo "${passed[*]}")")
  fi
  for n in $ranks; do
    run "distributed_$n" "$RANKS_LIMIT" "$mpiexec" "${flags[@]}" -n "$n" \
      "$python" -m pytest -q -p no:cacheprovider $distributed_tests
  done
fi

echo
cat "$out/summary.txt"
exit "$status"
