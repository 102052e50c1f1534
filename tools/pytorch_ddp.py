#!/usr/bin/env python3
"""PyTorch DistributedDataParallel throughput of a cnn-train model file on 1..N local GPUs.

The comparison for tools/scaling.sh (and `compare_pytorch.py --ddp N`): the same network as
tools/compare_pytorch.py builds from our YAML, one process per GPU (NCCL, DDP's default 25 MB
buckets, gradients reduced during backward), a fixed per-GPU batch of synthetic data on the GPU,
the model's optimizer. Timed with CUDA events on every rank after warm-up; the step time of a
repeat is the slowest rank's; images/s = world * batch / median step time.
Modes: eager (DDP as users write it) and compile (torch.compile over the DDP module, which
splits graphs at bucket boundaries). Whole-step CUDA-graph capture is not offered: DDP's
reducer does host work between buckets, so PyTorch does not support capturing it as one graph.
Example:
    python3 tools/pytorch_ddp.py models/vgg_fer.yaml --gpus 2 --batch 64 --json ddp.json
"""
import argparse
import json
import os
import socket
import statistics
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    torch = None

MODES = ("eager", "compile")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, cfg, plan, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        cp.set_tf32(args.tf32 == "on")
        torch.backends.cudnn.benchmark = True
        device = torch.device("cuda", rank)
        torch.manual_seed(0)
        model = cp.build_model(plan).to(device).train()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=args.bucket_mb)
        forward = torch.compile(ddp) if args.mode == "compile" else ddp
        gen = torch.Generator(device=device).manual_seed(1000 + rank)
        x = torch.randn(args.batch, *cp.input_shape(cfg), device=device, generator=gen)
        y = torch.randint(0, plan[-1][3]["out"][0], (args.batch,), device=device, generator=gen)
        cls, kw = cp.optimizer_spec(cfg, lr_scale=1e-3)
        opt = getattr(torch.optim, cls)(ddp.parameters(), **kw)
        loss_fn = cp.make_loss(cfg, device)
        clip = cp.num(cp.get(cfg, "train.clip_grad_norm", 0.0), "train.clip_grad_norm")
        params = list(ddp.parameters())

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(forward(x), y).backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()

        ms = cp.time_steps(step, args.warmup, args.steps, args.repeats)
        t = torch.tensor(ms, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step is as slow as its slowest rank
        if rank == 0:
            queue.put(dict(repeat_step_ms=t.tolist()))
    except Exception as e:  # reported by rank 0's parent, never hidden
        queue.put(dict(error=f"rank {rank}: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"))
        raise
    finally:
        dist.destroy_process_group()


def time_ddp(cfg, plan, args):
    """Images/s of DDP at args.gpus processes, or {"error": ...}."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    try:
        mp.spawn(worker, args=(args.gpus, free_port(), cfg, plan, args, queue), nprocs=args.gpus, join=True)
    except Exception:
        pass  # the worker put its error on the queue
    out = queue.get() if not queue.empty() else dict(error="no result from rank 0")
    if "repeat_step_ms" in out:
        med = statistics.median(out["repeat_step_ms"])
        out.update(step_ms=med, img_per_s=1000.0 * args.gpus * args.batch / med)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model YAML file")
    p.add_argument("--gpus", type=int, default=1, help="processes, one per GPU (default %(default)s)")
    p.add_argument("--batch", type=int, help="per-GPU batch (default train.batch_size)")
    p.add_argument("--mode", choices=MODES, default="eager", help="default %(default)s")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (default %(default)s)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")
    p.add_argument("--tf32", choices=("off", "on"), default="off")
    p.add_argument("--json", help="write the result to this file")
    args = p.parse_args(argv)
    if args.gpus < 1 or args.steps < 1 or args.repeats < 1 or args.warmup < 0 or (args.batch or 1) < 1:
        p.error("--gpus, --steps, --repeats, --batch must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        with open(args.model) as f:
            cfg = yaml.safe_load(f)
        for s in args.set:
            cp.apply_set(cfg, s)
        plan = cp.plan_graph(cfg)
        cp.optimizer_spec(cfg)
    except (OSError, yaml.YAMLError, cp.ModelError) as e:
        print(f"pytorch_ddp: error: {args.model}: {e}", file=sys.stderr)
        return 2
    if torch is None or not torch.cuda.is_available():
        print("pytorch_ddp: error: needs PyTorch with CUDA GPUs", file=sys.stderr)
        return 1
    if torch.cuda.device_count() < args.gpus:
        print(f"pytorch_ddp: error: --gpus {args.gpus} but {torch.cuda.device_count()} GPU(s) visible", file=sys.stderr)
        return 1
    args.batch = args.batch or int(cp.num(cp.get(cfg, "train.batch_size", 64), "train.batch_size"))
    r = time_ddp(cfg, plan, args)
    report = dict(model=cfg.get("name", os.path.basename(args.model)), gpus=args.gpus, batch_per_gpu=args.batch,
                  mode=args.mode, bucket_mb=args.bucket_mb, torch=torch.__version__, nccl=".".join(
                      map(str, torch.cuda.nccl.version())), gpu=torch.cuda.get_device_name(0), **r)
    if "error" in r:
        print(f"pytorch_ddp: error: {r['error']}", file=sys.stderr)
    else:
        print(f"{report['model']} DDP {args.mode} {args.gpus} GPU(s) x batch {args.batch}: "
              f"{r['img_per_s']:,.0f} img/s ({r['step_ms']:.3f} ms/step)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if "error" in r else 0


if __name__ == "__main__":
    sys.exit(main())
