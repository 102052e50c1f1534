#!/usr/bin/python3
"""onnxruntime against our probabilities, for a model written by `cnn-ckpt export`.

Two steps, usually on two machines:

  prepare RUN_DIR --out DIR   (a machine with our OpenCV build: python3-numpy, python3-opencv,
                               python3-onnx) exports RUN_DIR to DIR/model.onnx, draws uint8 test
                               images DIR/images.npy (N, C, H, W) at the model's input size, and
                               writes our probabilities DIR/probs.npy (N, K) from `cnn-eval --predict`.
  check DIR                   (the GPU machine: plain python3 + numpy + onnxruntime) runs
                               DIR/model.onnx on the CPU and, where available, CUDA execution
                               providers, compares with DIR/probs.npy (max |difference| <= 1e-4),
                               runs the README's Python snippet (Deployment) as printed, and times
                               batch 1 and 256 (images per second, median of --repeat runs).

Exit status: 0 all comparisons pass, 1 one fails, 2 usage, 3 onnxruntime (or numpy) is missing.
`check --json FILE` writes the numbers for bench/RESULTS.md.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

README_MARK = "<!-- deploy-onnxruntime-python -->"


def readme_snippet(readme):
    """The ```python block right after README_MARK, as printed."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(re.escape(README_MARK) + r"\n```python\n(.*?)```", text, re.S)
    if not m:
        sys.exit(f"onnx_check: error: {readme} has no ```python block after {README_MARK}")
    return m.group(1)


def prepare(args):
    import numpy as np
    import cv2
    import onnx

    os.makedirs(args.out, exist_ok=True)
    model = os.path.join(args.out, "model.onnx")
    subprocess.run([args.cnn_ckpt, "export", args.run, "-o", model], check=True)
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    classes = json.loads(meta["classes"])
    dims = [d.dim_value for d in onnx.load(model).graph.input[0].type.tensor_type.shape.dim]
    c, h, w = dims[1], dims[2], dims[3]
    rng = np.random.default_rng(args.seed)
    images = rng.integers(0, 256, (args.n, c, h, w), dtype=np.uint8)
    paths = []
    for i, img in enumerate(images):
        path = os.path.join(args.out, f"image{i:03d}.png")
        hwc = img[0] if c == 1 else img.transpose(1, 2, 0)[:, :, ::-1]  # RGB planes -> OpenCV's BGR
        cv2.imwrite(path, np.ascontiguousarray(hwc))
        paths.append(path)
    report = os.path.join(args.out, "predict.json")
    subprocess.run([args.cnn_eval, args.run, "--device", "cpu", "--quiet", "--json", report, "--predict", *paths],
                   check=True, stdout=subprocess.DEVNULL)
    preds = json.load(open(report))["predictions"]
    probs = np.zeros((args.n, len(classes)), dtype=np.float32)
    for i, p in enumerate(preds):
        ranked = p["probabilities"] if "probabilities" in p else p["faces"][0]["probabilities"]
        for entry in ranked:
            probs[i, classes.index(entry["name"])] = entry["probability"]
    np.save(os.path.join(args.out, "images.npy"), images)
    np.save(os.path.join(args.out, "probs.npy"), probs)
    print(f"wrote {model}, images.npy {images.shape}, probs.npy {probs.shape} in {args.out}")
    return 0


def timed(session, batch, repeat):
    """Median seconds of one run of `batch` (float32) and the images per second it means."""
    session.run(["probabilities"], {"input": batch})  # warm-up (CUDA: kernels, memory)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        session.run(["probabilities"], {"input": batch})
        times.append(time.perf_counter() - t)
    times.sort()
    median = times[len(times) // 2]
    return median, batch.shape[0] / median


def check(args):
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnx_check: onnxruntime or numpy is not installed ({e}): nothing checked")
        return 3
    model = os.path.join(args.dir, "model.onnx")
    images = np.load(os.path.join(args.dir, "images.npy"))
    ours = np.load(os.path.join(args.dir, "probs.npy"))
    x = images.astype(np.float32)
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    providers = [p for p in wanted if p in ort.get_available_providers()]
    results = {"model": model, "onnxruntime": ort.__version__, "n": int(images.shape[0]), "providers": {}}
    failed = False
    for provider in providers:
        session = ort.InferenceSession(model, providers=[provider])
        if session.get_providers()[0] != provider:
            print(f"{provider}: onnxruntime fell back to {session.get_providers()[0]}; not counted")
            continue
        fixed = session.get_inputs()[0].shape[0]
        fixed = fixed if isinstance(fixed, int) else None
        r = {}
        if fixed is None or fixed == x.shape[0]:
            probs = session.run(["probabilities"], {"input": x})[0]
            r["max_abs_diff"] = float(np.abs(probs - ours).max())
            r["ok"] = r["max_abs_diff"] <= args.tolerance
            failed |= not r["ok"]
        if not args.no_bench:
            for b in (1, 256):
                if fixed is not None and fixed != b:
                    continue
                batch = np.ascontiguousarray(np.resize(x, (b,) + x.shape[1:]))
                seconds, per_s = timed(session, batch, args.repeat)
                r[f"batch{b}_ms"] = seconds * 1e3
                r[f"batch{b}_img_per_s"] = per_s
        results["providers"][provider] = r
        line = " ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items())
        print(f"{provider}: {line}")

    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "snippet.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(readme_snippet(args.readme))
        run = subprocess.run([sys.executable, script, model, os.path.join(args.dir, "images.npy")],
                             capture_output=True, text=True)
    if run.returncode != 0:
        print(f"README snippet: exit {run.returncode}\n{run.stderr}")
        failed = True
    else:
        printed = np.array([[float(v) for v in line.split()[1:]] for line in run.stdout.splitlines()],
                           dtype=np.float32)
        diff = float(np.abs(printed - ours).max()) if printed.shape == ours.shape else float("inf")
        results["readme_snippet_max_abs_diff"] = diff
        print(f"README snippet: max_abs_diff {diff:.6g}")
        failed |= not diff <= args.tolerance
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print("FAILED" if failed else "ok")
    return 1 if failed else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export a run, draw images, write our probabilities")
    p.add_argument("run", help="run directory or checkpoint")
    p.add_argument("--out", required=True, help="folder for model.onnx, images.npy, probs.npy")
    p.add_argument("--n", type=int, default=16, help="images (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cnn-ckpt", default=os.path.join(root, "build", "app", "cnn-ckpt"))
    p.add_argument("--cnn-eval", default=os.path.join(root, "build", "app", "cnn-eval"))
    c = sub.add_parser("check", help="onnxruntime against probs.npy, the README snippet, timings")
    c.add_argument("dir", help="the folder prepare wrote")
    c.add_argument("--readme", default=os.path.join(root, "README.md"))
    c.add_argument("--tolerance", type=float, default=1e-4)
    c.add_argument("--repeat", type=int, default=20, help="timed runs per batch size (default 20)")
    c.add_argument("--no-bench", action="store_true", help="compare only, no timings")
    c.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    return prepare(args) if args.command == "prepare" else check(args)


if __name__ == "__main__":
    sys.exit(main())
