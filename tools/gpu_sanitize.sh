#!/usr/bin/env bash
# The GPU half of the sanitizer job (issue 16), for a machine with a GPU: compute-sanitizer's memcheck,
# racecheck and synccheck over the "[gpu]" test cases of every tests/test_* binary, then the
# data-parallel GPU path with NCCL's network transport forced (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1).
# Usage: tools/gpu_sanitize.sh [BUDGET_SECONDS] [BUILD_DIR]   (default 3600 s, build-gpu; builds it if absent)
# Environment: CNN_GPU_SANITIZE_TOOLS (default "memcheck racecheck synccheck"), CNN_GPU_SANITIZE_SUITES
# (suite binaries in order), CNN_GPU_SANITIZE_RUN_TIMEOUT (seconds a run, default 1200),
# CNN_GPU_SANITIZE_NCCL=0 skips the NCCL network-transport runs; CNN_GPU_SANITIZE_NCCL_TOOLS (default "memcheck",
# "" none) are the tools the two-rank runs are repeated under, each rank's program under the tool (mpirun's
# MPMD line wraps each one). CNN_GPU_SANITIZE_JOBS=N (default 1): with N > 1
# each test case of a suite is its own compute-sanitizer run, N at a time (a summary line per case, then
# one per suite), so a large suite finishes inside a call and a slow case is named; each case gets its
# own XDG_CACHE_HOME (autotune cache) so parallel runs share no files. With CNN_GPU_SANITIZE_JOBS > 1,
# CNN_GPU_SANITIZE_ONLY=REGEX runs only the cases whose names match REGEX (grep -E).
# racecheck checks our own kernels only (mangled names in namespace cnn, "3cnn"; cuDNN's and cuBLAS's
# shared-memory use is NVIDIA's, and instrumenting it made single test cases outlast 130 s), and
# runs each harness row on its first CNN_GPU_SANITIZE_RACECHECK_CASES cases (default 2; 0 = all,
# through the tests' CNN_TEST_CASES_PER_ROW). CNN_GPU_SANITIZE_RACECHECK_ALL=1 checks every kernel.
# Every tool runs with CNN_TEST_QUICK=1 (set it to 0 for full size): the heavy GPU cases sized for
# instrumented runs, each assertion kept (tests/support/quick.h lists what each shrinks: the hidden
# vgg_fer conv benchmark 1 warm-up and 1 timed run, the autotuner's accuracy case 1 timed run a
# candidate at batch 8, test_app's GPU training cases fewer epochs or images).
# Trap: the budget is checked before each run and also caps each run's timeout, so the last runs of a
# short budget are cut short ("timeout") or not started ("skipped"); the summary says which.
set -uo pipefail
budget=${1:-3600}
b=${2:-build-gpu}
out=${OUT:-gpu-sanitize-out}
per_run=${CNN_GPU_SANITIZE_RUN_TIMEOUT:-1200}
jobs_n=${CNN_GPU_SANITIZE_JOBS:-1}
tools=${CNN_GPU_SANITIZE_TOOLS:-memcheck racecheck synccheck}
mkdir -p "$out/logs"
sum=$out/summary.txt
csv=$out/summary.csv
: >"$sum"
echo "tool,suite,result,exit,errors,seconds,tests" >"$csv"
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
say() { echo "$*" | tee -a "$sum"; }

command -v compute-sanitizer >/dev/null || { say "compute-sanitizer is not on PATH (it ships with the CUDA toolkit)"; exit 2; }
say "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
say "$(compute-sanitizer --version | tail -1); budget ${budget} s, at most ${per_run} s a run"
# The kernel filter option's name changed across compute-sanitizer releases.
kernel_filter=--kernel-name
[[ $(compute-sanitizer --help 2>&1) == *"--kernel-name "* ]] || kernel_filter=--kernel-regex
export CNN_TEST_CASES_PER_ROW=0
export CNN_TEST_QUICK=${CNN_TEST_QUICK:-1}
# Configured once (Release, sm_90, -lineinfo so reports name source lines); then only what this run
# needs is brought up to date: the suites named in CNN_GPU_SANITIZE_SUITES (else every target) and
# the apps test_app and the NCCL runs start. (Trap: a build dir built for some targets only is
# completed here, not rebuilt whole.)
if [[ ! -f $b/CMakeCache.txt ]]; then
  say "configuring $b (Release, sm_90, -lineinfo)"
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo \
    >"$out/logs/configure.log" 2>&1 || { say "configure failed: see $out/logs/configure.log"; exit 1; }
fi
targets=()
if [[ -n ${CNN_GPU_SANITIZE_SUITES:-} ]]; then
  for s in $CNN_GPU_SANITIZE_SUITES; do [[ $s == none ]] || targets+=("$s"); done
  targets+=(cnn-train cnn-bench)
fi
cmake --build "$b" -j"$(nproc)" ${targets[@]:+--target "${targets[@]}"} >"$out/logs/build.log" 2>&1 ||
  { say "build failed: see $out/logs/build.log"; tail -30 "$out/logs/build.log" >>"$sum"; exit 1; }

# The compute-sanitizer command of TOOL, into the array san. API errors are not reported by the tool:
# every CUDA call of ours is checked (CUDA_CHECK) and fails its test, and the out-of-memory tests
# provoke cudaErrorMemoryAllocation on purpose.
san_prefix() {
  san=(compute-sanitizer --tool "$1" --error-exitcode 99 --print-limit 200 --report-api-errors no)
  if [[ $1 == racecheck && ${CNN_GPU_SANITIZE_RACECHECK_ALL:-0} != 1 ]]; then
    san+=("$kernel_filter" kns=3cnn)
  fi
}

# One checked run: TOOL SUITE LOG COMMAND... (COMMAND starts the tool itself); one summary line and one CSV row.
checked_run() {
  local tool=$1 suite=$2 log=$3
  shift 3
  local t
  t=$(left)
  if ((t <= 10)); then
    say "$tool $suite: skipped (budget spent)"
    echo "$tool,$suite,skipped,,,0," >>"$csv"
    return
  fi
  ((t > per_run)) && t=$per_run
  local s0
  s0=$(date +%s)
  timeout -k 30 "$t" "$@" >"$log" 2>&1
  local rc=$? secs=$(($(date +%s) - s0))
  # One "ERROR SUMMARY" line per checked process: add them up.
  local errors
  errors=$(grep -o 'ERROR SUMMARY: [0-9]*' "$log" | awk '{s += $3} END {print s + 0}')
  local tests
  tests=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -1 | tr ',' ';')
  local result=clean
  if ((rc == 124 || rc == 137)); then result=timeout; elif ((errors > 0)); then result=errors
  elif ((rc == 4)) && [[ $tests == *skipped* && $tests != *failed* ]]; then result=skipped  # Catch2 3: all skipped
  elif ((rc != 0)); then result=failed; fi
  say "$tool $suite: $result (exit $rc, $errors errors, ${secs} s) $tests"
  echo "$tool,$suite,$result,$rc,$errors,$secs,$tests" >>"$csv"
  if [[ $result != clean ]]; then
    # The first reports with their stacks, and the test case that was running (Catch2 -d yes lists each as it ends).
    { echo "== $tool $suite: $result"; grep -m 1 -B2 -A25 '^========= [A-Z]' "$log"; tail -5 "$log"; } \
      >>"$out/reports.txt"
  fi
}

# One compute-sanitizer run of a test binary: TOOL SUITE LOG COMMAND...
sanitize() {
  local tool=$1 suite=$2 log=$3 san
  shift 3
  san_prefix "$tool"
  # --target-processes all: the end-to-end cases run cnn-train as a child; it is checked too.
  checked_run "$tool" "$suite" "$log" "${san[@]}" --target-processes all "$@"
}

# CNN_GPU_SANITIZE_SUITES: which suites, in that order (default every tests/test_* binary, the
# end-to-end suite test_app last: its cases run whole training processes, the slowest under a tool).
if [[ -n ${CNN_GPU_SANITIZE_SUITES:-} ]]; then
  suites=($CNN_GPU_SANITIZE_SUITES)
else
  suites=()
  for bin in "$b"/tests/test_*; do [[ $(basename "$bin") == test_app ]] || suites+=("$(basename "$bin")"); done
  suites+=(test_app)
fi
for tool in $tools; do
  export CNN_TEST_CASES_PER_ROW=0
  [[ $tool == racecheck ]] && CNN_TEST_CASES_PER_ROW=${CNN_GPU_SANITIZE_RACECHECK_CASES:-2}
  for suite in "${suites[@]}"; do
    bin=$b/tests/$suite
    [[ -x $bin && -f $bin ]] || continue
    # Only the suites that have [gpu] cases (Catch2 2 lists names with --list-test-names-only, 3 with
    # --list-tests --verbosity quiet).
    n=$({ "$bin" "[gpu]" --list-test-names-only 2>/dev/null || "$bin" "[gpu]" --list-tests --verbosity quiet; } |
      grep -c .)
    ((n > 0)) || continue
    # "[cupti]" cases trace kernels through CUPTI, which compute-sanitizer holds itself (CUPTI takes
    # one subscriber: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), so they run outside it.
    if ((jobs_n <= 1)); then
      sanitize "$tool" "$suite" "$out/logs/$tool.$suite.log" "$bin" "[gpu]~[cupti]" -d yes
      continue
    fi
    # One run per test case, jobs_n at a time; Catch2's --input-file takes the name as written.
    # (Catch2 2 lists names alone with --list-test-names-only and exits with their count; Catch2 3 has
    # --list-tests --verbosity quiet.)
    if [[ $("$bin" --help 2>&1) == *--list-test-names-only* ]]; then
      mapfile -t names < <("$bin" "[gpu]~[cupti]" --list-test-names-only | grep .)
    else
      mapfile -t names < <("$bin" "[gpu]~[cupti]" --list-tests --verbosity quiet | grep .)
    fi
    # CNN_GPU_SANITIZE_ONLY: an extended regular expression; only the cases whose names match it run
    # (to finish what an earlier, shorter run left). The case numbers stay those of the whole list.
    only=${CNN_GPU_SANITIZE_ONLY:-}
    mkdir -p "$out/cases"
    for i in "${!names[@]}"; do
      [[ -n $only ]] && ! grep -qE -- "$only" <<<"${names[i]}" && continue
      while (($(jobs -rp | wc -l) >= jobs_n)); do wait -n; done
      # Catch2 reads ',', '[', ']' and '\' in a name as test-spec syntax: escaped.
      printf '%s\n' "${names[i]}" | sed 's/[],[\\]/\\&/g' >"$out/cases/$suite.$i.txt"
      mkdir -p "$out/cache/$tool.$suite.$i"
      XDG_CACHE_HOME=$out/cache/$tool.$suite.$i sanitize "$tool" "$suite#$i" "$out/logs/$tool.$suite.$i.log" "$bin" \
        -f "$out/cases/$suite.$i.txt" -d yes &
    done
    wait
    # The suite's line: its cases' results added up.
    awk -F, -v t="$tool" -v s="$suite" '$1 == t && index($2, s "#") == 1 {n++; r[$3]++; e += $5; if ($6 > m) m = $6}
      END {printf "%s %s: %d cases:", t, s, n; for (k in r) printf " %d %s", r[k], k; printf "; %d errors; slowest %d s\n", e, m}' \
      "$csv" | tee -a "$sum"
  done
done

if [[ ${CNN_GPU_SANITIZE_NCCL:-1} == 0 ]]; then
  say "done in $(($(date +%s) - start)) s (NCCL runs skipped); logs in $out/logs, first reports in $out/reports.txt"
  exit 0
fi
# NCCL's network transport on one host: with P2P and shared memory off, ranks on different GPUs
# talk over the socket (or IB) transport, the path ranks on different nodes take.
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
nccl_step() {
  local name=$1
  shift
  local t
  t=$(left)
  if ((t <= 10)); then say "nccl-net $name: skipped (budget spent)"; return; fi
  ((t > per_run)) && t=$per_run
  timeout -k 30 "$t" "$@" >"$out/logs/nccl-net.$name.log" 2>&1
  local rc=$?
  local via
  via=$(grep -o 'via NET/[A-Za-z]*' "$out/logs/nccl-net.$name.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  say "nccl-net $name: exit $rc; NCCL channels: ${via:-none through NET (one rank has no peer)}"
  ((rc == 0)) || tail -30 "$out/logs/nccl-net.$name.log" >>"$out/reports.txt"
}
nccl_step test_app "$b/tests/test_app" "[mpi][gpu]" -d yes
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if command -v mpirun >/dev/null; then
  # Two ranks. On one GPU NCCL refuses two ranks of one host on the same device, so each rank is
  # given a host of its own (NCCL_HOSTID): NCCL then sees two one-GPU nodes and joins them over its
  # network transport (sockets on the loopback interface), as ranks on two nodes are joined.
  # two_cmd PROGRAM ARGS...: the two-rank mpirun command into the array cmd, each rank's program
  # preceded by the words of the array wrap (a compute-sanitizer command, or nothing).
  if ((gpus >= 2)); then
    mp=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_DEBUG
        -x NCCL_DEBUG_SUBSYS)
    two_cmd() { cmd=("${mp[@]}" "${wrap[@]}" "$@"); }
  else
    e=(-x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_SOCKET_IFNAME=lo)
    two_cmd() {
      cmd=(mpirun --allow-run-as-root --oversubscribe "${e[@]}" -np 1 -x NCCL_HOSTID=cnn-node-a "${wrap[@]}" "$@" :
           "${e[@]}" -np 1 -x NCCL_HOSTID=cnn-node-b "${wrap[@]}" "$@")
    }
    say "nccl-net: one GPU: the two ranks share it, each its own NCCL host (NCCL_HOSTID)"
  fi
  two() {
    local name=$1
    shift
    wrap=()
    two_cmd "$@"
    nccl_step "$name" "${cmd[@]}"
  }
  # The same over compute-sanitizer: TOOL NAME PROGRAM ARGS...; a summary line and CSV row as the
  # suites' (errors summed over both ranks' "ERROR SUMMARY" lines), then the NCCL channels.
  two_sanitized() {
    local tool=$1 name=$2 san
    shift 2
    san_prefix "$tool"
    wrap=("${san[@]}")
    two_cmd "$@"
    local log=$out/logs/$tool.nccl-net.$name.log
    rm -f "$log"
    checked_run "$tool" "nccl-net-$name" "$log" "${cmd[@]}"
    [[ -f $log ]] || return 0
    local via
    via=$(grep -o 'via NET/[A-Za-z]*' "$log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    say "$tool nccl-net-$name: NCCL channels: ${via:-none through NET}"
  }
  two doctor "$b/app/cnn-train" doctor --device cuda --size-mb 64 --iters 5
  two train "$b/app/cnn-train" models/tiny.yaml --device cuda --set data.synthetic_size=4096 \
    --epochs 1 --out "$out/logs/run-nccl-net" --overwrite --quiet
  # Each rank under a tool: smaller payloads (an instrumented NCCL kernel is slow), and the
  # data-parallel watchdog (dist.timeout_s, 300 s) given the run's own limit, so a slow
  # instrumented phase is not taken for a stalled rank (the run's timeout still ends a hang).
  for tool in ${CNN_GPU_SANITIZE_NCCL_TOOLS-memcheck}; do
    two_sanitized "$tool" doctor "$b/app/cnn-train" doctor --device cuda --size-mb 8 --iters 2
    two_sanitized "$tool" train "$b/app/cnn-train" models/tiny.yaml --device cuda --set data.synthetic_size=1024 \
      --set dist.timeout_s="$per_run" --epochs 1 --out "$out/logs/run-nccl-net-$tool" --overwrite --quiet
  done
else
  say "nccl-net: no mpirun: the two-rank runs skipped"
fi
say "done in $(($(date +%s) - start)) s; logs in $out/logs, first reports in $out/reports.txt"
