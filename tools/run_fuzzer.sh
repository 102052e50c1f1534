#!/usr/bin/env bash
# Builds one libFuzzer target with clang (ASan + UBSan) and fuzzes it for SECONDS (default 60),
# starting from seed files the target writes itself (valid inputs made by our own writers).
# Usage: tools/run_fuzzer.sh [TARGET] [SECONDS] [extra libFuzzer flags...]
#   TARGET: safetensors (default), checkpoint_meta, fer2013_csv, idx, image_header, model_yaml (the fuzz_<TARGET>
#   executable). model_yaml's seeds are the bundled models, its dictionary every declared key and choice.
#   A first argument that is a number is SECONDS for the safetensors target (the old usage).
#   CNN_FUZZ_BUILD_DIR overrides build-fuzz.
# Trap: the corpus in <build>/corpus/<TARGET> keeps growing across runs; findings land in
# <build>/crashes/<TARGET>/.
set -euo pipefail
target=safetensors
if [[ $# -gt 0 && ! $1 =~ ^[0-9]+$ ]]; then
  target=$1
  shift
fi
seconds=${1:-60}
[[ $# -gt 0 ]] && shift
case $target in
  safetensors | checkpoint_meta | fer2013_csv | idx | image_header | model_yaml) ;;
  *) echo "run_fuzzer.sh: unknown target '$target' (safetensors, checkpoint_meta, fer2013_csv, idx, image_header, model_yaml)" >&2; exit 2 ;;
esac
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
if [[ $target == model_yaml ]]; then cp "$root"/models/*.yaml "$seeds"/; else CNN_FUZZ_WRITE_SEEDS=$seeds "$fuzzer"; fi

# Tokens of each format, so mutations reach the checks past the first bytes.
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
  fer2013_csv)
    tokens=('emotion' 'pixels' 'Usage' 'Training' 'PublicTest' 'PrivateTest' ',' ' ' '"' '255' '256' '0'
            '-1' '99999999999' '00000000000000000000007') ;;
  idx | image_header | model_yaml) tokens=() ;;
esac
# Binary tokens, written with libFuzzer's \xNN escapes.
case $target in
  fer2013_csv) binary=('\x1f\x8b\x08\x00' '\x0d\x0a' '\xef\xbb\xbf') ;;
  idx) binary=('\x00\x00\x08\x03' '\x00\x00\x08\x01' '\x1f\x8b\x08\x00' '\xff\xff\xff\xff' '\x00\x01\x00\x00'
               '\x01\x00\x00\x00') ;;
  image_header)
    binary=('\x89PNG\x0d\x0a\x1a\x0a' 'IHDR' '\xff\xd8\xff' '\xff\xc0' '\xff\xda' 'BM' 'P5\x0a' 'P7\x0a' 'WIDTH'
            'HEIGHT' 'ENDHDR' 'II*\x00' 'MM\x00*' 'II+\x00' 'RIFF' 'WEBP' 'VP8 ' 'VP8L' 'VP8X' '\x9d\x01\x2a'
            '\xff\xff\xff\xff') ;;
  *) binary=() ;;
esac
dict=$build/$target.dict
if [[ $target == model_yaml ]]; then CNN_FUZZ_WRITE_DICT=$dict "$fuzzer"; else
{
  for tok in "${tokens[@]}"; do
    printf '"%s"\n' "$(printf '%s' "$tok" | sed 's/\\/\\\\/g; s/"/\\"/g')"
  done
  for tok in "${binary[@]}"; do printf '"%s"\n' "$tok"; done
} >"$dict"
fi

echo "fuzzing $fuzzer for ${seconds}s: corpus $corpus, seeds $seeds, findings in $crashes/"
exec "$fuzzer" "$corpus" "$seeds" -dict="$dict" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 "$@"
