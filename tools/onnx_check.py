#!/usr/bin/python3
"""onnxruntime against our probabilities and our inference speed, for models written by `cnn-ckpt export`.

Usually on two machines:

  prepare RUN_DIR --out DIR   (a machine with our OpenCV build: python3-numpy, python3-opencv,
                               python3-onnx) exports RUN_DIR to DIR/model.onnx, writes its config
                               DIR/config.yaml, draws uint8 test images DIR/images.npy (N, C, H, W)
                               at the model's input size, and writes our probabilities DIR/probs.npy
                               (N, K) from `cnn-eval --predict`.
  slim DIR --out SLIM         (python3-onnx) a copy of DIR small enough to travel: every float
                               initializer over --limit-mb becomes ONNX external data (a file
                               slim.bin that SLIM does not hold) and a recipe (shape, mean, std,
                               seed, offset) in SLIM/slim.json; `check` writes slim.bin from the
                               recipes (normal, seeded; numpy alone), so SLIM is for timing only
                               (no probs.npy).
  check DIR [DIR ...]         (the GPU machine: python3 + numpy + onnxruntime; slim DIRs too) runs
                               each DIR/model.onnx on the CPU and, where available,
                               CUDA execution providers, compares with DIR/probs.npy (max
                               |difference| <= 1e-4), runs the README's Python snippet (Deployment)
                               as printed, and times batch 1 and 256: onnxruntime, and with
                               --cnn-bench PATH ours beside it (`cnn-bench model DIR/config.yaml
                               --inference`: the same model, on the CPU and the GPU, in the
                               precisions --ours names), every figure the median and min-max of
                               --repeats repeats, at --threads CPU threads on both sides.

Exit status: 0 all comparisons pass, 1 one fails (or one of our timings fails), 2 usage, 3 onnxruntime
(or numpy) is missing (our timings are still run and printed). `check --json FILE` writes the numbers
for bench/RESULTS.md.
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
SLIM_DATA = "slim.bin"  # a slim model's external data: not in the slim folder, written by check from slim.json


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
    with open(os.path.join(args.out, "config.yaml"), "w", encoding="utf-8") as f:
        f.write(meta["config"])  # the run's resolved config: our side of `check --cnn-bench`
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
    # --no-ten-crop: the exported model takes the centre crop (the mean over ten crops is not part of it)
    subprocess.run([args.cnn_eval, args.run, "--device", "cpu", "--no-ten-crop", "--quiet", "--json", report,
                    "--predict", *paths], check=True, stdout=subprocess.DEVNULL)
    preds = json.load(open(report))["predictions"]
    probs = np.zeros((args.n, len(classes)), dtype=np.float32)
    for i, p in enumerate(preds):
        ranked = p["probabilities"] if "probabilities" in p else p["faces"][0]["probabilities"]
        for entry in ranked:
            probs[i, classes.index(entry["name"])] = entry["probability"]
    np.save(os.path.join(args.out, "images.npy"), images)
    np.save(os.path.join(args.out, "probs.npy"), probs)
    print(f"wrote {model}, config.yaml, images.npy {images.shape}, probs.npy {probs.shape} in {args.out}")
    return 0


def slim(args):
    import shutil
    import onnx
    from onnx import numpy_helper

    model = onnx.load(os.path.join(args.dir, "model.onnx"))
    recipe, offset = {}, 0
    for i, t in enumerate(model.graph.initializer):
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        a = numpy_helper.to_array(t)
        if a.nbytes <= args.limit_mb * 2**20:
            continue
        recipe[t.name] = {"shape": list(a.shape), "mean": float(a.mean()), "std": float(a.std()), "seed": i,
                          "offset": offset}
        # The tensor keeps its name, type and dims; its data moves to SLIM_DATA, which check writes (numpy alone).
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", SLIM_DATA), ("offset", str(offset)), ("length", str(a.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        offset += -(-a.nbytes // 4096) * 4096  # page-aligned offsets
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.onnx"), "wb") as f:  # serialised as is: SLIM_DATA is check's to write
        f.write(model.SerializeToString())
    for name in ("config.yaml", "images.npy"):
        if os.path.exists(os.path.join(args.dir, name)):
            shutil.copy(os.path.join(args.dir, name), os.path.join(args.out, name))
    with open(os.path.join(args.out, "slim.json"), "w") as f:
        json.dump({"from": os.path.abspath(args.dir), "tensors": recipe}, f, indent=1)
    print(f"wrote {args.out}: {len(recipe)} initializers to regenerate (timing only: no probs.npy)")
    return 0


def inflated_model(d, tmp):
    """DIR/model.onnx, or for a slim DIR a copy in a folder of tmp beside the SLIM_DATA its recipes make."""
    import shutil
    import numpy as np

    model = os.path.join(d, "model.onnx")
    recipe = os.path.join(d, "slim.json")
    if not os.path.exists(recipe):
        return model
    tensors = json.load(open(recipe))["tensors"]
    if any("offset" not in r for r in tensors.values()):
        sys.exit(f"onnx_check: error: {d} was slimmed by an older onnx_check.py (no offsets): run slim again")
    folder = tempfile.mkdtemp(dir=tmp)
    with open(os.path.join(folder, SLIM_DATA), "wb") as f:
        for r in tensors.values():
            a = np.random.default_rng(r["seed"]).standard_normal(r["shape"], dtype=np.float32) * r["std"] + r["mean"]
            f.seek(r["offset"])
            f.write(a.astype("<f4").tobytes())
    path = os.path.join(folder, "model.onnx")
    shutil.copy(model, path)
    return path


def model_config(model, ort):
    """The run's resolved config that `cnn-ckpt export` keeps in metadata_props["config"]."""
    try:
        import onnx
        return {p.key: p.value for p in onnx.load(model, load_external_data=False).metadata_props}["config"]
    except ImportError:
        if not ort:
            sys.exit(f"onnx_check: error: reading {model}'s config needs python3-onnx or onnxruntime")
        meta = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_modelmeta()
        return meta.custom_metadata_map["config"]


def steps_for(batch, args):
    """Batches per repeat: --steps, else about 20 images' worth (20 at batch 1, 1 at batch 256)."""
    return args.steps if args.steps else max(1, 20 // batch)


def spread(ms):
    """Median, min and max of the repeats' mean batch times (ms)."""
    o, m = sorted(ms), len(ms) // 2
    return {"ms": o[m] if len(o) % 2 else 0.5 * (o[m - 1] + o[m]), "ms_min": o[0], "ms_max": o[-1]}  # as cnn-bench


def time_session(session, batch, args):
    """onnxruntime's batch time (host arrays in, host arrays out), as cnn-bench times ours."""
    steps = steps_for(batch.shape[0], args)
    for _ in range(args.warmup):  # CUDA: kernels, memory
        session.run(["probabilities"], {"input": batch})
    repeats = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        for _ in range(steps):
            session.run(["probabilities"], {"input": batch})
        repeats.append((time.perf_counter() - t) * 1e3 / steps)
    r = spread(repeats)
    r["img_per_s"] = batch.shape[0] * 1e3 / r["ms"]
    r["steps"] = steps
    return r


def time_ours(config, device, precision, batch, args, tmp):
    """`cnn-bench model CONFIG --inference` at one batch size: its JSON, or {"error": ...}."""
    out = os.path.join(tmp, "ours.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [args.cnn_bench, "--quiet", "model", config, "--inference", "--device", device, "--precision", precision,
           "--batch", str(batch), "--steps", str(steps_for(batch, args)), "--repeats", str(args.repeats),
           "--warmup", str(args.warmup), "--json", out]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        lines = (run.stderr or run.stdout).strip().splitlines()
        return {"error": f"exit {run.returncode}: {lines[-1] if lines else ''}", "command": " ".join(cmd)}
    j = json.load(open(out))
    return {"ms": j["step_ms"], "ms_min": j["step_ms_min"], "ms_max": j["step_ms_max"], "img_per_s": j["img_per_s"],
            "end_to_end": {"ms": j["end_to_end"]["step_ms"], "ms_min": j["end_to_end"]["step_ms_min"],
                           "ms_max": j["end_to_end"]["step_ms_max"], "img_per_s": j["end_to_end"]["img_per_s"]},
            "device": j["device"], "threads": j["threads"], "cuda_graph": j["cuda_graph"],
            "steps": steps_for(batch, args), "command": " ".join(cmd)}


def fmt_time(r):
    return f"{r['ms']:9.3f} ({r['ms_min']:.3f}-{r['ms_max']:.3f})"


def print_table(name, rows):
    """One line per (batch, runtime): on-device time where there is one, and host-to-host time."""
    print(f"{name}: ms per batch, median (min-max) of the repeats; img/s from the median")
    print(f"  {'batch':>5}  {'runtime':<26} {'precision':<9}  {'on device (batch already there)':<31} {'img/s':>9}"
          f"  {'host to host (copies included)':<31} {'img/s':>9}")
    for r in rows:
        if "error" in r:
            print(f"  {r['batch']:>5}  {r['runtime']:<26} {r['precision']:<9}  not run: {r['error']}")
            continue
        host = r["end_to_end"] if "end_to_end" in r else r
        on_dev = f"{fmt_time(r):<31} {r['img_per_s']:>9.0f}" if "end_to_end" in r else f"{'-':<31} {'':>9}"
        print(f"  {r['batch']:>5}  {r['runtime']:<26} {r['precision']:<9}  {on_dev}  {fmt_time(host):<31}"
              f" {host['img_per_s']:>9.0f}")


def check_one(d, args, ort, np, tmp, results):
    """The comparisons and timings of one DIR; True when every comparison passed."""
    ok = True
    config = os.path.join(d, "config.yaml")
    images = np.load(os.path.join(d, "images.npy")) if np and os.path.exists(os.path.join(d, "images.npy")) else None
    ours = np.load(os.path.join(d, "probs.npy")) if np and os.path.exists(os.path.join(d, "probs.npy")) else None
    model = inflated_model(d, tmp) if ort else os.path.join(d, "model.onnx")
    if not os.path.exists(config):  # not written by prepare: the run's config from the model's metadata
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(model_config(model, ort))
    name = os.path.basename(os.path.abspath(d))
    r = {"dir": d, "model": model, "checks": {}, "timings": []}
    results["models"][name] = r
    if ort and ours is None:
        print(f"{name}: no probs.npy (a slim copy, or not prepared): timing only")
    batches = [] if args.no_bench else args.batches
    x = images.astype(np.float32) if images is not None else None
    if ort:
        wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        for provider in [p for p in wanted if p in ort.get_available_providers()]:
            options = ort.SessionOptions()
            if provider == "CPUExecutionProvider":
                options.intra_op_num_threads = args.threads
            session = ort.InferenceSession(model, options, providers=[provider])
            if session.get_providers()[0] != provider:
                print(f"{name} {provider}: onnxruntime fell back to {session.get_providers()[0]}; not counted")
                continue
            fixed = session.get_inputs()[0].shape[0]
            fixed = fixed if isinstance(fixed, int) else None
            if ours is not None and x is not None and (fixed is None or fixed == x.shape[0]):
                probs = session.run(["probabilities"], {"input": x})[0]
                c = {"max_abs_diff": float(np.abs(probs - ours).max())}
                c["ok"] = c["max_abs_diff"] <= args.tolerance
                ok &= c["ok"]
                r["checks"][provider] = c
                print(f"{name} {provider}: max_abs_diff {c['max_abs_diff']:.6g} {'ok' if c['ok'] else 'FAILED'}")
            shape = tuple(d_ if isinstance(d_, int) else 1 for d_ in session.get_inputs()[0].shape[1:])
            sample = x if x is not None else np.random.default_rng(0).uniform(0, 255, (1,) + shape).astype(np.float32)
            for b in batches:
                if fixed is not None and fixed != b:
                    continue
                batch = np.ascontiguousarray(np.resize(sample, (b,) + sample.shape[1:]))
                t = time_session(session, batch, args)
                t.update({"batch": b, "runtime": f"onnxruntime {provider.replace('ExecutionProvider', '')}",
                          "precision": "fp32", "threads": args.threads if provider == "CPUExecutionProvider" else 0})
                r["timings"].append(t)
        if ours is not None:
            snippet = os.path.join(tmp, "snippet.py")
            with open(snippet, "w", encoding="utf-8") as f:
                f.write(readme_snippet(args.readme))
            run = subprocess.run([sys.executable, snippet, model, os.path.join(d, "images.npy")], capture_output=True,
                                 text=True)
            if run.returncode != 0:
                print(f"{name} README snippet: exit {run.returncode}\n{run.stderr}")
                ok = False
            else:
                printed = np.array([[float(v) for v in line.split()[1:]] for line in run.stdout.splitlines()],
                                   dtype=np.float32)
                diff = float(np.abs(printed - ours).max()) if printed.shape == ours.shape else float("inf")
                r["checks"]["readme_snippet"] = {"max_abs_diff": diff, "ok": diff <= args.tolerance}
                print(f"{name} README snippet: max_abs_diff {diff:.6g}")
                ok &= diff <= args.tolerance
    if args.cnn_bench and batches:
        for b in batches:
            for device, precision in (o.split(":") for o in args.ours):
                if device in results["unavailable"]:
                    continue
                t = time_ours(config, device, precision, b, args, tmp)
                t.update({"batch": b, "runtime": f"ours {device}", "precision": precision})
                if "error" in t and device == "cuda" and "no NVIDIA driver or GPU" in t["error"]:
                    results["unavailable"][device] = t["error"]  # said once, not a failure
                    print(f"ours on cuda: not run here ({t['error']})")
                    continue
                if "error" in t:
                    print(f"{name} ours {device} {precision} batch {b}: {t['error']}")
                    ok = False
                r["timings"].append(t)
    r["timings"].sort(key=lambda t: (t["batch"], not t["runtime"].startswith("onnxruntime")))
    if r["timings"]:
        print_table(name, r["timings"])
    return ok


def check(args):
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnx_check: onnxruntime or numpy is not installed ({e}): nothing of onnxruntime checked or timed")
        np = ort = None
        if not args.cnn_bench:
            return 3
    results = {"onnxruntime": ort.__version__ if ort else None, "threads": args.threads, "repeats": args.repeats,
               "warmup": args.warmup, "unavailable": {}, "models": {}}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for d in args.dirs:
            ok &= check_one(d, args, ort, np, tmp, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print("ok" if ok else "FAILED")
    return 1 if not ok else 0 if ort else 3


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export a run, draw images, write our probabilities")
    p.add_argument("run", help="run directory or checkpoint")
    p.add_argument("--out", required=True, help="folder for model.onnx, config.yaml, images.npy, probs.npy")
    p.add_argument("--n", type=int, default=16, help="images (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cnn-ckpt", default=os.path.join(root, "build", "app", "cnn-ckpt"))
    p.add_argument("--cnn-eval", default=os.path.join(root, "build", "app", "cnn-eval"))
    s = sub.add_parser("slim", help="a copy of a prepared folder without its large weights, for timing only")
    s.add_argument("dir", help="the folder prepare wrote")
    s.add_argument("--out", required=True, help="the slim copy")
    s.add_argument("--limit-mb", type=float, default=1.0, help="regenerate float initializers over this (default 1)")
    c = sub.add_parser("check", help="onnxruntime against probs.npy, the README snippet, timings beside ours")
    c.add_argument("dirs", nargs="+", metavar="dir", help="folders prepare (or slim) wrote")
    c.add_argument("--readme", default=os.path.join(root, "README.md"))
    c.add_argument("--tolerance", type=float, default=1e-4)
    c.add_argument("--batches", type=int, nargs="+", default=[1, 256], help="batch sizes to time (default 1 256)")
    c.add_argument("--repeats", type=int, default=5, help="timed repeats per figure (default 5)")
    c.add_argument("--steps", type=int, default=0, help="batches per repeat (default: 20 / batch, at least 1)")
    c.add_argument("--warmup", type=int, default=2, help="untimed batches first (default 2)")
    c.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="CPU threads of both sides: our OMP_NUM_THREADS, onnxruntime's intra-op threads (default: "
                        "the cores this process may run on)")
    c.add_argument("--cnn-bench", help="time ours too with this cnn-bench (e.g. build/app/cnn-bench)")
    c.add_argument("--ours", nargs="+", default=["cpu:fp32", "cuda:fp32", "cuda:bf16"], metavar="DEVICE:PRECISION",
                   help="our runs, device cpu|cuda and precision fp32|tf32|bf16|fp16 (default cpu:fp32 cuda:fp32 "
                        "cuda:bf16; cuda is skipped, saying so, where there is no GPU; onnxruntime runs the exported "
                        "model, which is FP32)")
    c.add_argument("--no-bench", action="store_true", help="compare only, no timings")
    c.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.command == "check" and (args.repeats < 1 or args.warmup < 0 or args.steps < 0 or args.threads < 1
                                    or min(args.batches) < 1):
        ap.error("--repeats, --threads and --batches must be >= 1, --warmup and --steps >= 0")
    for o in getattr(args, "ours", []):
        if o.count(":") != 1 or o.split(":")[0] not in ("cpu", "cuda") or \
                o.split(":")[1] not in ("fp32", "tf32", "bf16", "fp16"):
            ap.error(f"--ours: expected DEVICE:PRECISION (cpu|cuda : fp32|tf32|bf16|fp16), found '{o}'")
    return {"prepare": prepare, "slim": slim, "check": check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
