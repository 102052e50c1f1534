#!/usr/bin/env python3
"""CPU training throughput: cnn-train (`cnn-bench model --device cpu`) against PyTorch on the CPU.

The same model file (rebuilt as a torch.nn.Module by compare_pytorch.py's planner: the same layers,
optimizer and loss, state_dict names equal ours), the same batch of synthetic data, the same
thread count on both sides: --threads, else OMP_NUM_THREADS, else the cores this process may run
on (ours through OMP_NUM_THREADS, PyTorch through torch.set_num_threads, one inter-op thread). Per
batch size the two sides alternate, --rounds times (default 3: ours, PyTorch, ours, PyTorch, ...),
so a load that comes and goes on the machine hits both alike; each round is --repeats x --steps
timed steps after --warmup untimed ones, and reports its median repeat. The table shows each
side's median round and the spread (min-max) over the rounds, and ours/PyTorch with its own
spread (the worst and best pairing of rounds). The load average before and after is printed next
to the figures: on a loaded machine they say little.
Needs /usr/bin/python3 with Debian's python3-torch (1.13 on Debian 12; eager mode only, it has no
torch.compile), python3-yaml, and a build of cnn-bench (no GPU needed). Example:
    python3 tools/compare_pytorch_cpu.py models/mini_xception.yaml --batch 32 --threads 2
Trap: both sides update with lr * 1e-3 (cnn-bench's choice), and ours reads the loss back every
step as training does; PyTorch's timing includes zero_grad, forward, loss, backward and step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402  (the model planner and builder, shared with the GPU tool)


def default_threads():
    """OMP_NUM_THREADS's first value when set, else the cores of this process (as cnn-bench decides)."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise SystemExit(f"compare_pytorch_cpu: error: OMP_NUM_THREADS='{env}' is not a positive integer")
        return int(env)
    return len(os.sched_getaffinity(0))


def load():
    return os.getloadavg()[0]


def time_torch(plan, cfg, batch, args):
    """PyTorch eager training steps on the CPU: the median repeat's img/s of one round."""
    torch = cp.torch
    torch.manual_seed(0)
    model = cp.build_model(plan).train()
    x = torch.randn(batch, *cp.input_shape(cfg))
    y = torch.randint(0, plan[-1][3]["out"][0], (batch,))
    cls, kw = cp.optimizer_spec(cfg, lr_scale=1e-3)
    opt = getattr(torch.optim, cls)(model.parameters(), **kw)
    params, loss_fn = list(model.parameters()), cp.make_loss(cfg, "cpu")
    clip = cp.num(cp.get(cfg, "train.clip_grad_norm", 0.0), "train.clip_grad_norm")

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    for _ in range(args.warmup):
        step()
    rates = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(batch * args.steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def time_ours(args, batch, threads):
    """One `cnn-bench model --device cpu` run: its median repeat's img/s, threads and device line."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ours.json")
        argv = [args.cnn_bench, "--quiet", "model", args.model, "--device", "cpu", "--batch", str(batch), "--steps",
                str(args.steps), "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--json", out]
        for s in args.set:
            argv += ["--set", s]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            tail = " | ".join((r.stderr.strip() or r.stdout.strip()).splitlines()[-3:])
            raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {tail}")
        with open(out) as f:
            j = json.load(f)
    return j["img_per_s"], j.get("threads"), j.get("device"), " ".join(argv)


def summary(rates):
    return dict(median=statistics.median(rates), min=min(rates), max=max(rates), rounds=rates)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="+", help="model YAML file(s)")
    p.add_argument("--cnn-bench", default="build/app/cnn-bench", help="our benchmark binary (default %(default)s)")
    p.add_argument("--batch", type=int, action="append", help="batch size, repeatable (default train.batch_size)")
    p.add_argument("--threads", type=int, help="threads of both sides (default OMP_NUM_THREADS, else the cores)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side (default %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per repeat (default %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per round; its median counts (default %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per round (default %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")
    p.add_argument("--json", help="write everything (rounds, threads, load, versions) to this file")
    args = p.parse_args(argv)
    if min(args.steps, args.repeats, args.rounds, *(args.batch or [1])) < 1 or args.warmup < 0:
        p.error("--steps, --repeats, --rounds and --batch must be >= 1, --warmup >= 0")
    if args.threads is not None and args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def compare_model(path, args, threads):
    with open(path) as f:
        cfg = yaml.safe_load(f)
    args.model = path
    for s in args.set:
        cp.apply_set(cfg, s)
    plan = cp.plan_graph(cfg)
    cp.optimizer_spec(cfg)
    name = cfg.get("name", os.path.basename(path))
    rows = []
    for batch in args.batch or [int(cp.num(cp.get(cfg, "train.batch_size", 64), "train.batch_size"))]:
        ours, torch_rates, load_before = [], [], load()
        for _ in range(args.rounds):
            rate, their_threads, device, command = time_ours(args, batch, threads)
            if their_threads is not None and their_threads != threads:  # None: a cnn-bench older than "threads"
                raise RuntimeError(f"cnn-bench ran {their_threads} threads, not {threads} ({device})")
            ours.append(rate)
            torch_rates.append(time_torch(plan, cfg, batch, args))
        ratios = [o / t for o in ours for t in torch_rates]
        rows.append(dict(model=name, file=path, batch=batch, ours=summary(ours), pytorch=summary(torch_rates),
                         ratio=dict(median=statistics.median(ours) / statistics.median(torch_rates), min=min(ratios),
                                    max=max(ratios)),
                         load_before=load_before, load_after=load(), command=command))
    return rows


def main(argv=None):
    args = parse_args(argv)
    torch = cp.torch
    if torch is None:
        print("compare_pytorch_cpu: error: needs PyTorch (Debian: apt-get install python3-torch)", file=sys.stderr)
        return 1
    threads = args.threads or default_threads()
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    rows = []
    for path in args.model:
        try:
            rows += compare_model(path, args, threads)
        except (OSError, yaml.YAMLError, cp.ModelError) as e:
            print(f"compare_pytorch_cpu: error: {path}: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:
            print(f"compare_pytorch_cpu: error: {e}", file=sys.stderr)
            return 1
    print(f"CPU training steps, {threads} threads each, img/s: median of {args.rounds} interleaved rounds "
          f"(min-max), each the median of {args.repeats} x {args.steps} steps; torch {torch.__version__}")
    span = lambda s: f"{s['median']:,.1f} ({s['min']:,.1f}-{s['max']:,.1f})"  # noqa: E731
    cp.print_table(["model", "batch", "ours", "pytorch", "ours/pytorch", "load avg"],
                   [[r["model"], r["batch"], span(r["ours"]), span(r["pytorch"]),
                     f"{r['ratio']['median']:.2f} ({r['ratio']['min']:.2f}-{r['ratio']['max']:.2f})",
                     f"{r['load_before']:.1f} -> {r['load_after']:.1f}"] for r in rows])
    cores = len(os.sched_getaffinity(0))
    if max(r["load_before"] for r in rows) > 0.5 * cores or max(r["load_after"] for r in rows) > 0.5 * cores:
        print(f"note: the load average reached {max(max(r['load_before'], r['load_after']) for r in rows):.1f} on "
              f"{cores} cores: other work shared the CPU, so these figures are not an idle machine's")
    if args.json:
        report = dict(threads=threads, cores=cores, rounds=args.rounds, steps=args.steps, repeats=args.repeats,
                      warmup=args.warmup, sets=args.set, results=rows,
                      versions=dict(python=sys.version.split()[0], torch=torch.__version__))
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
