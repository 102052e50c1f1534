#!/usr/bin/env python3
"""Seconds from the start of training to a test accuracy, for cnn-train and for PyTorch, same run.

Both train the model of one cnn-train YAML file (default models/fashion_cnn.yaml on Fashion-MNIST's
IDX files) with the file's optimizer, cosine schedule (stepped per batch, as ours), batch size and
epochs, evaluate the test split after every epoch, and report the elapsed training time at the
end of the first epoch whose test accuracy reaches --target. Both clocks start when training
starts (after data loading and device set-up) and include the per-epoch evaluations.
 - ours: `cnn-train MODEL --device cuda --set eval.test_every_epoch=true`; the epoch lines of
   metrics.jsonl carry test_acc and elapsed_s, counted from the "start" line's setup_s (data
   loaded, device ready; the autotuner's search and the CUDA-graph warm-up count as training).
 - PyTorch: the same network (tools/compare_pytorch.py builds it from the YAML) starting from our
   initial weights (`cnn-bench model --dump` at the file's seed; --torch-init for PyTorch's own), the IDX images on
   the GPU, normalised with the training split's mean and std, a random 10% val split carved off
   as ours does (val is not evaluated), shuffled per epoch; eager mode, or --torch-mode compile.
Example (on the GPU machine):
    python3 tools/time_to_accuracy.py models/fashion_cnn.yaml --batch 256 --epochs 10 --target 0.92 \
        --data /path/to/fashion-mnist --json tta.json
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402

try:
    import numpy as np
    import torch
except ImportError:
    torch = np = None

IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def read_idx(folder, name):
    for path in (os.path.join(folder, name), os.path.join(folder, name + ".gz")):
        if os.path.exists(path):
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            ndim = data[3]
            dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(f"{folder}: neither {name} nor {name}.gz")


def run_ours(args, data_dir):
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        argv = [args.cnn_train, args.model, "--device", "cuda", "--out", run, "--quiet", "--batch", str(args.batch),
                "--epochs", str(args.epochs), "--set", "eval.test_every_epoch=true", "--set", f"data.path={data_dir}"]
        for s in args.set:
            argv += ["--set", s]
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode:
            return dict(command=" ".join(argv), error=f"exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-3:]))
        with open(os.path.join(run, "metrics.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.strip()]
    # Training starts at the "start" line's setup_s (data loaded, device ready): autotuning and the
    # warm-up steps count, as cudnn.benchmark's search counts in PyTorch's first steps.
    setup = next((x["setup_s"] for x in lines if x.get("event") == "start"), 0.0)
    epochs = [dict(epoch=x["epoch"], test_acc=x["test_acc"], elapsed_s=x["elapsed_s"] - setup) for x in lines
              if x.get("event") == "epoch"]
    return dict(command=" ".join(argv), process_wall_s=wall, setup_s=setup, epochs=epochs)


def run_torch(args, cfg, data_dir):
    device = torch.device("cuda")
    cp.set_tf32(False)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    xtr, ytr = (read_idx(data_dir, n) for n in IDX_FILES["train"])
    xte, yte = (read_idx(data_dir, n) for n in IDX_FILES["test"])
    gen = np.random.default_rng(args.seed)
    keep = gen.permutation(len(xtr))[int(round(0.1 * len(xtr))):]  # 90% train, as data.val_split 0.1
    xtr, ytr = xtr[keep], ytr[keep]
    to_gpu = lambda a: torch.from_numpy(a.astype(np.float32) / 255.0).unsqueeze(1).to(device)  # noqa: E731
    xtr_g, xte_g = to_gpu(xtr), to_gpu(xte)
    mean, std = xtr_g.mean(), xtr_g.std()
    xtr_g, xte_g = (xtr_g - mean) / std, (xte_g - mean) / std
    ytr_g, yte_g = torch.from_numpy(ytr.astype(np.int64)).to(device), torch.from_numpy(yte.astype(np.int64)).to(device)
    plan = cp.plan_graph(cfg)
    model = cp.build_model(plan).to(device)
    if args.same_init:  # our initial weights (cnn-bench --dump writes them at the file's train.seed)
        from safetensors.torch import load_file
        with tempfile.TemporaryDirectory() as tmp:
            dump = os.path.join(tmp, "init.safetensors")
            argv = [args.cnn_bench, "model", args.model, "--device", "cuda", "--batch", str(args.batch), "--steps",
                    "1", "--repeats", "1", "--warmup", "0", "--dump", dump]
            for s in args.set:
                argv += ["--set", s]
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: " + " | ".join(r.stderr.splitlines()[-3:]))
            state = {k: v for k, v in load_file(dump, device="cuda").items()
                     if k not in ("input", "labels", "logits") and not k.startswith("grad.")}
        model.load_state_dict(state, strict=False)
    cls, kw = cp.optimizer_spec(cfg)
    opt = getattr(torch.optim, cls)(model.parameters(), **kw)
    loss_fn = cp.make_loss(cfg, device)
    steps_per_epoch = math.ceil(len(xtr) / args.batch)
    total = steps_per_epoch * args.epochs
    base = kw["lr"]
    sched = cp.get(cfg, "train.schedule.type", "constant")
    forward = torch.compile(model) if args.torch_mode == "compile" else model
    torch.cuda.synchronize()
    t0, step, epochs = time.perf_counter(), 0, []
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xtr_g), device=device)
        for i in range(steps_per_epoch):
            if sched == "cosine":
                for g in opt.param_groups:
                    g["lr"] = 0.5 * base * (1 + math.cos(math.pi * step / total))
            idx = perm[i * args.batch:(i + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(forward(xtr_g[idx]), ytr_g[idx]).backward()
            opt.step()
            step += 1
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte_g), 1000):
                correct += (forward(xte_g[i:i + 1000]).argmax(1) == yte_g[i:i + 1000]).sum()
        acc = correct.item() / len(xte_g)  # .item() synchronises
        epochs.append(dict(epoch=epoch + 1, test_acc=acc, elapsed_s=time.perf_counter() - t0))
    return dict(mode=args.torch_mode, schedule=sched, same_init=args.same_init, epochs=epochs)


def first_reaching(epochs, target):
    hit = next((e for e in epochs if e["test_acc"] >= target), None)
    return hit["elapsed_s"] if hit else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="models/fashion_cnn.yaml")
    p.add_argument("--data", help="IDX folder (default the model's data.path)")
    p.add_argument("--target", type=float, default=0.92)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="PyTorch's seed (ours: train.seed of the file)")
    p.add_argument("--torch-mode", choices=("eager", "compile"), default="eager")
    p.add_argument("--cnn-train", default="build/app/cnn-train")
    p.add_argument("--cnn-bench", default=None, help="for --same-init (default: next to --cnn-train)")
    p.add_argument("--torch-init", dest="same_init", action="store_false",
                   help="PyTorch's own default initialisation instead of our initial weights")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for both, repeatable")
    p.add_argument("--json")
    args = p.parse_args(argv)
    args.cnn_bench = args.cnn_bench or os.path.join(os.path.dirname(args.cnn_train), "cnn-bench")
    with open(args.model) as f:
        cfg = yaml.safe_load(f)
    for s in args.set:
        cp.apply_set(cfg, s)
    cfg.setdefault("train", {})["batch_size"] = args.batch
    data_dir = args.data or cp.get(cfg, "data.path")
    if torch is None or not torch.cuda.is_available():
        print("time_to_accuracy: error: needs PyTorch with a usable CUDA GPU", file=sys.stderr)
        return 1
    report = dict(model=cfg.get("name"), target=args.target, batch=args.batch, epochs=args.epochs,
                  gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    report["ours"] = run_ours(args, data_dir)
    try:
        report["pytorch"] = run_torch(args, cfg, data_dir)
    except (OSError, RuntimeError) as e:  # missing IDX files, a failed weight dump: said, not a traceback
        report["pytorch"] = dict(error=str(e))
    for who in ("ours", "pytorch"):
        r = report[who]
        if "error" in r:
            print(f"{who}: failed: {r['error']}")
            continue
        r["seconds_to_target"] = first_reaching(r["epochs"], args.target)
        accs = ", ".join(f"{e['test_acc'] * 100:.2f}%@{e['elapsed_s']:.1f}s" for e in r["epochs"])
        s = r["seconds_to_target"]
        print(f"{who:8s} {'not reached' if s is None else f'{s:.2f} s'} to {args.target * 100:.0f}% test  [{accs}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
