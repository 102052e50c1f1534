#!/usr/bin/env python3
"""Wall time from process start to a test accuracy: cnn-train against PyTorch eager, same model file.

Both sides train the model of one cnn-train YAML file (default models/fashion_cnn.yaml on
Fashion-MNIST's IDX files, Debian's dataset-fashion-mnist) with the file's optimizer, learning-rate
schedule (stepped per batch, warm-up included), batch size, epochs, loss, gradient clipping and
initial weights, evaluate the test split after every epoch, and report the time from the start of
their process to the end of the first epoch whose test accuracy reaches --target. Nothing is
excluded: library loading, data loading and decoding, device set-up, autotuning, CUDA graph capture
and the per-epoch evaluations all count.
 - ours: `cnn-train MODEL --set eval.test_every_epoch=true`, one process per run; each epoch line of
   metrics.jsonl carries test_acc and process_s (seconds since the OS started the process). The
   autotune cache (CNN_AUTOTUNE_CACHE) is --cache cold (a fresh, empty file every run), warm (a file
   filled by one untimed run first) or both. The end line's start-up breakdown is kept in the JSON.
 - PyTorch: this script in a child process (`--torch-worker`), timed from the parent's spawn on the
   same monotonic clock: imports torch, reads the IDX files, carves a random 10% val split off as
   ours does (not evaluated), normalises with the training split's mean and std, keeps the images
   on the device, shuffles per epoch; eager mode with cudnn.benchmark (its autotuner, in-process,
   so always cold). Model from tools/compare_pytorch.py's planner, starting from our initial
   weights (`cnn-bench model --dump` at the file's seed; --torch-init for PyTorch's own).
Not mirrored, so refused: data augmentation and the plateau schedule. --subset N trains on the
first N training images and tests on the first N/4 test images (both sides, a smoke test's size).
Needs /usr/bin/python3 with python3-numpy, python3-yaml and python3-torch (Debian); no safetensors.
Example (GPU machine):
    python3 tools/time_to_accuracy.py models/fashion_cnn.yaml --device cuda --target 0.92 \\
        --cache both --repeats 3 --data /path/to/fashion-mnist --json tta.json
"""
import argparse
import gzip
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None

IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


class ToolError(Exception):
    """A failure the tool reports as one line (exit 1)."""


def read_idx(folder, name):
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(path):
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            ndim = data[3]
            dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise ToolError(f"{folder}: neither {name} nor {name}.gz")


def write_idx(path, array):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape))
        f.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def make_subset(data_dir, n, out_dir):
    """The first n training and n/4 test images (at least 1) as uncompressed IDX files in out_dir."""
    for split, keep in (("train", n), ("test", max(1, n // 4))):
        for name in IDX_FILES[split]:
            write_idx(os.path.join(out_dir, name), read_idx(data_dir, name)[:keep])
    return out_dir


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32 tensors only; the format: an 8-byte header
    length, a JSON header of dtype, shape and data_offsets, then the raw little-endian data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype="<f4").reshape(info["shape"])
    return out


def lr_at(cfg, base, step, steps_per_epoch, epochs):
    """lib/optim/schedule.cpp's learning rate of `step` (0-based), warm-up included."""
    s = cp.get(cfg, "train.schedule", {}) or {}
    kind, e = s.get("type", "constant"), step // steps_per_epoch
    gamma, total = float(s.get("gamma", 0.1)), steps_per_epoch * epochs
    if kind == "constant":
        v = base
    elif kind == "step":
        v = base * gamma ** (e // int(s.get("step_size", 10)))
    elif kind == "multistep":
        v = base * gamma ** sum(1 for m in s.get("milestones", []) if m <= e)
    elif kind == "exponential":
        v = base * gamma ** e
    elif kind == "cosine":
        lo = float(s.get("min_lr", 0.0))
        v = lo + (base - lo) * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
    else:
        raise ToolError(f"train.schedule.type '{kind}' is not mirrored on the PyTorch side")
    warm = round(float(s.get("warmup_epochs", 0.0)) * steps_per_epoch)
    if step < warm:
        f = float(s.get("warmup_start_factor", 0.0))
        v *= f + (1 - f) * step / warm
    return v


def torch_worker(spec):
    """The PyTorch side, in its own process; prints one JSON line of per-epoch results."""
    import torch  # noqa: F401 (imported here: its import time is part of this process's time)
    cfg, batch, epochs = spec["cfg"], spec["batch"], spec["epochs"]
    device = torch.device(spec["device"])
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    if device.type == "cuda":
        cp.set_tf32(False)
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(spec["seed"])
    xtr, ytr = (read_idx(spec["data"], n) for n in IDX_FILES["train"])
    xte, yte = (read_idx(spec["data"], n) for n in IDX_FILES["test"])
    gen = np.random.default_rng(spec["seed"])
    keep = gen.permutation(len(xtr))[int(round(spec["val_split"] * len(xtr))):]
    xtr, ytr = xtr[keep], ytr[keep]
    to_dev = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1).to(device)  # noqa: E731
    xtr_d, xte_d = to_dev(xtr), to_dev(xte)
    mean, std = xtr_d.mean(), xtr_d.std()
    xtr_d, xte_d = (xtr_d - mean) / std, (xte_d - mean) / std
    ytr_d = torch.from_numpy(ytr.astype(np.int64)).to(device)
    yte_d = torch.from_numpy(yte.astype(np.int64)).to(device)
    model = cp.build_model(cp.plan_graph(cfg)).to(device)
    if spec["init"]:
        state = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(spec["init"]).items()
                 if k not in ("input", "labels", "logits") and not k.startswith("grad.")}
        missing = model.load_state_dict(state, strict=False).missing_keys
        if missing:  # a half-initialised model would not be "the same model"
            raise ToolError(f"our initial weights lack {', '.join(missing)}")
    cls, kw = cp.optimizer_spec(cfg)
    opt = getattr(torch.optim, cls)(model.parameters(), **kw)
    loss_fn = cp.make_loss(cfg, device)
    clip = float(cp.get(cfg, "train.clip_grad_norm", 0.0))
    steps_per_epoch = math.ceil(len(xtr) / batch)
    step, out = 0, []
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr_d), device=device)
        for i in range(steps_per_epoch):
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, kw["lr"], step, steps_per_epoch, epochs)
            idx = perm[i * batch:(i + 1) * batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xtr_d[idx]), ytr_d[idx]).backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            step += 1
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte_d), 1000):
                correct += (model(xte_d[i:i + 1000]).argmax(1) == yte_d[i:i + 1000]).sum()
        acc = correct.item() / len(xte_d)  # .item() synchronises
        out.append(dict(epoch=epoch + 1, test_acc=acc, at=time.monotonic()))
    print(json.dumps(dict(epochs=out, torch=torch.__version__,
                          gpu=torch.cuda.get_device_name(0) if device.type == "cuda" else None)))


def run_ours(args, data_dir, cache):
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        argv = [args.cnn_train, args.model, "--device", args.device, "--out", run, "--quiet", "--batch",
                str(args.batch), "--epochs", str(args.epochs), "--set", "eval.test_every_epoch=true",
                "--set", f"data.path={data_dir}"]
        for s in args.set:
            argv += ["--set", s]
        env = dict(os.environ, CNN_AUTOTUNE_CACHE=cache or os.path.join(tmp, "cold-autotune.json"))
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        if r.returncode:
            raise ToolError(f"{' '.join(argv)}: exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-3:]))
        with open(os.path.join(run, "metrics.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    epochs = [dict(epoch=x["epoch"], test_acc=x["test_acc"], end_s=x["process_s"]) for x in lines
              if x.get("event") == "epoch"]
    end = next((x for x in reversed(lines) if x.get("event") == "end"), {})
    return dict(command=" ".join(argv), process_wall_s=wall, epochs=epochs, startup=end.get("startup"))


def run_torch(args, cfg, data_dir, init):
    spec = dict(cfg=cfg, batch=args.batch, epochs=args.epochs, device=args.device, seed=args.seed,
                data=data_dir, init=init, threads=args.threads,
                val_split=float(cp.get(cfg, "data.val_split", 0.1)))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)],
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode:
        raise ToolError("PyTorch worker: " + " | ".join(r.stderr.splitlines()[-3:]))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    epochs = [dict(epoch=e["epoch"], test_acc=e["test_acc"], end_s=e["at"] - t0) for e in res["epochs"]]
    return dict(process_wall_s=wall, epochs=epochs, torch=res["torch"], gpu=res["gpu"])


def dump_init(args, tmp):
    """Our initial weights at the file's seed (cnn-bench model --dump), for the PyTorch side."""
    path = os.path.join(tmp, "init.safetensors")
    argv = [args.cnn_bench, "model", args.model, "--device", args.device, "--batch", str(args.batch), "--steps", "1",
            "--repeats", "1", "--warmup", "0", "--dump", path]
    for s in args.set:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        raise ToolError(f"{' '.join(argv)}: exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-3:]))
    return path


def summarise(r, target):
    """Adds the time and epoch of the first epoch at the target, and the per-epoch times."""
    hit = next((e for e in r["epochs"] if e["test_acc"] >= target), None)
    r["seconds_to_target"] = hit["end_s"] if hit else None
    r["epoch_at_target"] = hit["epoch"] if hit else None
    ends = [e["end_s"] for e in r["epochs"]]
    r["epoch_seconds"] = [b - a for a, b in zip([0.0] + ends, ends)]
    return r


def fmt_s(v):
    return "not reached" if v is None else f"{v:.2f} s"


def print_report(report):
    rows = [("side", "cache", "run", "to target", "epoch", "per-epoch seconds (the first from the process start)")]
    for side in report["sides"]:
        for i, r in enumerate(side["runs"]):
            rows.append((side["name"], side["cache"], str(i + 1), fmt_s(r["seconds_to_target"]),
                         str(r["epoch_at_target"] or "-"), " ".join(f"{s:.2f}" for s in r["epoch_seconds"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for side in report["sides"]:
        if side["name"] == "ours" and side["runs"] and side["runs"][-1].get("startup"):
            s = side["runs"][-1]["startup"]
            first = s.get("first_epoch") or {}
            extra = f", first epoch's extra cost {first['extra_s']:.2f} s" if first else ""
            print(f"ours ({side['cache']} cache), last run: process start to the first steady step "
                  f"{s['total_s']:.2f} s{extra}")
    for k, v in report["ratios"].items():
        print(f"ratio {k}: " + ("n/a (a side did not reach the target)" if v is None else f"{v:.2f}"))


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="models/fashion_cnn.yaml")
    p.add_argument("--data", help="IDX folder (default: the model's data.path)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--target", type=float, default=0.92, help="test accuracy to reach (default 0.92)")
    p.add_argument("--batch", type=int, help="both sides (default: the file's train.batch_size)")
    p.add_argument("--epochs", type=int, help="both sides, the schedule's length (default: train.epochs)")
    p.add_argument("--max-epochs", type=int, help="at most this many epochs (caps --epochs, schedule included)")
    p.add_argument("--subset", type=int, help="first N training and N/4 test images only (smoke tests)")
    p.add_argument("--repeats", type=int, default=1, help="runs per side, interleaved (default 1)")
    p.add_argument("--cache", choices=("cold", "warm", "both"), default="both", help="our autotune cache")
    p.add_argument("--threads", type=int, help="CPU threads of both sides (OMP_NUM_THREADS, torch.set_num_threads)")
    p.add_argument("--seed", type=int, default=0, help="PyTorch's seed (ours: train.seed of the file)")
    p.add_argument("--no-pytorch", action="store_true", help="time ours only")
    p.add_argument("--cnn-train", default="build/app/cnn-train")
    p.add_argument("--cnn-bench", default=None, help="for our initial weights (default: next to --cnn-train)")
    p.add_argument("--torch-init", dest="same_init", action="store_false",
                   help="PyTorch's own default initialisation instead of our initial weights")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for both, repeatable")
    p.add_argument("--json")
    p.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.torch_worker:
        torch_worker(json.loads(args.torch_worker))
        return 0
    if np is None:
        print("time_to_accuracy: error: needs python3-numpy", file=sys.stderr)
        return 1
    try:
        return run(args)
    except (ToolError, cp.ModelError, OSError) as e:
        print(f"time_to_accuracy: error: {e}", file=sys.stderr)
        return 1


def run(args):
    args.cnn_bench = args.cnn_bench or os.path.join(os.path.dirname(args.cnn_train), "cnn-bench")
    with open(args.model) as f:
        cfg = yaml.safe_load(f)
    for s in args.set:
        cp.apply_set(cfg, s)
    args.batch = args.batch or int(cp.get(cfg, "train.batch_size", 64))
    args.epochs = args.epochs or int(cp.get(cfg, "train.epochs", 10))
    if args.max_epochs:
        args.epochs = min(args.epochs, args.max_epochs)
    cfg.setdefault("train", {}).update(batch_size=args.batch, epochs=args.epochs)
    if cp.get(cfg, "data.augment"):
        raise ToolError("data.augment is not mirrored on the PyTorch side: remove it (--set data.augment={})")
    lr_at(cfg, 1.0, 0, 1, 1)  # an unmirrored schedule is refused before anything runs
    data_dir = args.data or cp.get(cfg, "data.path")
    report = dict(model=cfg.get("name"), device=args.device, target=args.target, batch=args.batch,
                  epochs=args.epochs, repeats=args.repeats, subset=args.subset, sides=[], ratios={})
    with tempfile.TemporaryDirectory() as tmp:
        if args.subset:
            data_dir = make_subset(data_dir, args.subset, tmp)
        caches = ["cold", "warm"] if args.cache == "both" else [args.cache]
        sides = [dict(name="ours", cache=c, runs=[]) for c in caches]
        torch_side = None if args.no_pytorch else dict(name="pytorch eager", cache="-", runs=[])
        warm_cache = os.path.join(tmp, "warm-autotune.json")
        if "warm" in caches:  # one untimed run fills the cache the warm runs read
            run_ours(args, data_dir, warm_cache)
        init = dump_init(args, tmp) if torch_side and args.same_init else None
        for _ in range(args.repeats):
            for side in sides:
                side["runs"].append(summarise(run_ours(args, data_dir, warm_cache if side["cache"] == "warm" else None),
                                              args.target))
            if torch_side:
                r = summarise(run_torch(args, cfg, data_dir, init), args.target)
                report.update(torch=r.pop("torch"), gpu=r.pop("gpu"))
                torch_side["runs"].append(r)
        report["sides"] = sides + ([torch_side] if torch_side else [])
    for side in report["sides"]:
        side["median_seconds_to_target"] = median_or_none([r["seconds_to_target"] for r in side["runs"]])
    if torch_side:
        for side in sides:
            a, b = side["median_seconds_to_target"], torch_side["median_seconds_to_target"]
            report["ratios"][f"ours ({side['cache']} cache) / pytorch eager, medians"] = a / b if a and b else None
    print(f"{report['model']} on {args.device}, batch {args.batch}, {args.epochs} epochs, target "
          f"{args.target * 100:g}% test accuracy, {args.repeats} run(s) a side; seconds from process start")
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
