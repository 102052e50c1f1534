#!/usr/bin/env python3
"""Loads a safetensors file with the reference implementation (Python `safetensors` + numpy)
and prints its tensors; checks "checksum.<tensor>" metadata (CRC-32C, recomputed here
independently of the C++ code); with --fixture, also checks the exact values of the fixture
that tests/checkpoint/test_safetensors.cpp writes. Trap: numpy has no bfloat16; BF16 tensors are
loaded through torch when it is installed and skipped (said so) when not.
"""
import argparse
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def load_with_torch(path, name):
    try:
        from safetensors import safe_open
        import torch  # noqa: F401
    except ImportError:
        return None
    with safe_open(path, framework="pt") as f:
        return f.get_tensor(name)


def torch_int16():
    import torch
    return torch.int16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--fixture", action="store_true", help="compare with the C++ test fixture's values")
    args = ap.parse_args()
    try:
        import numpy as np
        from safetensors import safe_open
    except ImportError as e:
        print(f"check_safetensors: needs numpy and safetensors: {e}", file=sys.stderr)
        return 2

    failures = []
    with safe_open(args.file, framework="numpy") as f:
        meta = f.metadata() or {}
        tensors = {}
        for name in f.keys():
            try:
                t = f.get_tensor(name)
                raw = np.ascontiguousarray(t).tobytes()
            except (TypeError, ValueError) as e:  # a dtype numpy lacks (BF16)
                t = load_with_torch(args.file, name)
                if t is None:
                    print(f"{name}: not loadable by numpy ({e}) and torch is not installed: skipped")
                    continue
                raw = t.contiguous().view(torch_int16()).numpy().tobytes()
            tensors[name] = t
            print(f"{name}: {t.dtype} {list(t.shape)}")
            key = "checksum." + name
            if key in meta:
                got = f"{crc32c(raw):08x}"
                if got != meta[key]:
                    failures.append(f"{name}: crc32c {got}, metadata says {meta[key]}")

    if args.fixture:
        expect = {
            "conv1.weight": np.array([[-1.25, -0.75, -0.25], [0.25, 0.75, 1.25]], dtype=np.float32),
            "scalar.f64": np.array(-3.5, dtype=np.float64),
            "steps.i64": np.array([-2, 0, 7, 1 << 40], dtype=np.int64),
            "half.f16": np.array([1.0, -2.0, 0.33325195], dtype=np.float16),
            "byte.u8": np.array(200, dtype=np.uint8),
            "mask.bool": np.array([True, False, True]),
            "empty.f32": np.zeros((0, 3), dtype=np.float32),
        }
        for name, want in expect.items():
            got = tensors.get(name)
            if got is None:
                failures.append(f"{name}: missing")
            elif got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                failures.append(f"{name}: got {got.dtype} {got.shape} {got!r}, want {want.dtype} {want.shape} {want!r}")
        bf16 = tensors.get("brain.bf16")
        if bf16 is not None and (str(bf16.dtype) != "torch.bfloat16" or bf16.float().tolist() != [[1.0, 3.140625]]):
            failures.append(f"brain.bf16: got {bf16!r}, want bfloat16 [[1.0, 3.140625]]")
        for key, value in {"format": "cnn-train/1", "epoch": "3"}.items():
            if meta.get(key) != value:
                failures.append(f"metadata {key}: got {meta.get(key)!r}, want {value!r}")
        if not any(k.startswith("checksum.") for k in meta):
            failures.append("no checksum.* metadata")

    for line in failures:
        print("FAIL " + line, file=sys.stderr)
    print(f"{len(tensors)} tensors, {len(meta)} metadata entries, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
