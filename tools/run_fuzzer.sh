#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and fuzzes it for SECONDS (default 60),
# starting from seed files the target writes itself (CNN_FUZZ_WRITE_SEEDS).
# Usage: tools/run_fuzzer.sh [TARGET] [SECONDS] [extra libFuzzer flags...]
#   TARGET: safetensors (default) or checkpoint_meta, i.e. tests/fuzz/fuzz_<TARGET>.cpp.
#   CNN_FUZZ_BUILD_DIR overrides build-fuzz.
# Trap: the corpus in <build>/corpus/<TARGET> keeps growing across runs; findings land in <build>/crashes/<TARGET>/.
set -euo pipefail
target=safetensors
if [[ $# -gt 0 && ! $1 =~ ^[0-9]+$ ]]; then
  target=$1
  shift
fi
seconds=${1:-60}
[[ $# -gt 0 ]] && shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CNN_FUZZ_BUILD_DIR:-$root/build-fuzz}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCNN_WITH_CUDA=OFF -DCNN_BUILD_FUZZERS=ON \
  -DCNN_BUILD_TESTS=OFF -DCNN_WITH_OPENCV=OFF -DCNN_WITH_MPI=OFF >/dev/null
cmake --build "$build" --target "fuzz_$target" -j2
fuzzer=$build/tests/fuzz/fuzz_$target

corpus=$build/corpus/$target
seeds=$build/seeds/$target
crashes=$build/crashes/$target
mkdir -p "$corpus" "$seeds" "$crashes"
CNN_FUZZ_WRITE_SEEDS=$seeds "$fuzzer"

# Tokens of the input's grammar, so mutations reach the validation code past the parsers.
case $target in
  safetensors)
    tokens=('{' '}' '[' ']' ':' ',' '"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"checksum.'
            '"F64"' '"F32"' '"F16"' '"BF16"' '"F8_E4M3"' '"F8_E5M2"' '"I64"' '"I32"' '"I16"' '"I8"'
            '"U64"' '"U32"' '"U16"' '"U8"' '"BOOL"' '-1' '0' '4294967296' '9223372036854775807'
            '18446744073709551615' '1.5' 'null' 'true') ;;
  checkpoint_meta)
    tokens=('format' 'format_version' 'config' 'epoch' 'next_batch' 'step' 'optimizer_steps' 'schedule' 'rng'
            'dataset_fingerprint' 'world_size' 'metrics' 'epoch_progress' 'normalization' 'elapsed_s'
            'best_metric' '"seed"' '"loss_sum"' '"correct"' '"seen"' '"mean"' '"std"' '{' '}' '[' ']' ':' ','
            '-1' '0' '1e308' 'nan' 'inf' '4294967296' '281474976710656' '9223372036854775807'
            '18446744073709551615' 'null' 'true') ;;
  *) tokens=() ;;
esac
dict=$build/$target.dict
: >"$dict"
for tok in "${tokens[@]}"; do
  printf '"%s"\n' "$(printf '%s' "$tok" | sed 's/\\/\\\\/g; s/"/\\"/g')" >>"$dict"
done

echo "fuzzing $fuzzer for ${seconds}s: corpus $corpus, seeds $seeds, findings in $crashes/"
exec "$fuzzer" "$corpus" "$seeds" -dict="$dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 "$@"
