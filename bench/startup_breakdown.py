#!/usr/bin/env python3
"""Where a fresh measuring process's start-up goes: the seconds of each stage a collector, probe or verify child
pays before its first case, each timed in its own fresh interpreter (a stage's figure includes the stages before it,
as a child pays them; the differences are printed).

The search's cost is mostly processes: on the H100 referee pack (tree 72c252d4) the first case of a collector run
took 9-11 s of wall clock and each further case 0.2-0.9 s. This bench says how much of that is the interpreter,
``import torch``, ``import triton``, the device context, the profiler's first session and a cached Triton kernel's
first launch, so a fix can aim at the right one.

Stages (cumulative; each row a fresh ``python3 <file>``, median of ``--repeats`` processes, seconds of wall clock
measured by this parent around the child):

* ``python``: the interpreter alone (``pass``);
* ``torch``: ``import torch``;
* ``triton``: ``import torch, triton``;
* ``device``: + the device context (cuda: ``torch.cuda.init()`` and one synchronised tensor op; cpu: a tensor op);
* ``profiler``: + one ``torch.profiler.profile`` session around that op (CUPTI's first initialisation on cuda);
* ``kernel``: + a small ``@triton.jit`` kernel launched once (compiled on the first repeat, loaded from Triton's
  cache after; cpu: skipped, the interpreter is not what the device children run).

Two variants, printed after the cumulative rows and compared with ``profiler`` (not part of the chain):

* ``profiler_early``: an empty profiler session with CUDA activity *before* the device context, then ``profiler``'s
  code - whether CUPTI set up before the context (and before torch's modules load) costs less than after it,
  which a collector child could adopt (kineto's maintainers suggest such a dummy session first);
* ``profiler_twice``: ``profiler`` plus a second session - what each further session (each further case) pays.

  python3 bench/startup_breakdown.py --out /tmp/startup.json
  python3 bench/startup_breakdown.py --repeats 5 --out "$OUT/startup.json"     # on the device machine
"""
import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

DEVICE = ("import torch\n"
          "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
          "if dev == 'cuda':\n    torch.cuda.init()\n"
          "x = torch.ones(1024, device=dev); y = (x * 2).sum().item()\n")
PROFILER = ("from torch.profiler import profile, ProfilerActivity\n"
            "acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == 'cuda' else [])\n"
            "with profile(activities=acts) as prof:\n    y = (x * 3).sum().item()\n"
            "n = len(prof.events())\n")
KERNEL = ("import triton, triton.language as tl\n"
          "@triton.jit\n"
          "def _k(p, n, BLOCK: tl.constexpr):\n"
          "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
          "    m = o < n\n"
          "    tl.store(p + o, tl.load(p + o, mask=m) + 1.0, mask=m)\n"
          "if dev == 'cuda':\n"
          "    _k[(1,)](x, x.numel(), BLOCK=1024); torch.cuda.synchronize()\n")
EARLY = ("import torch\n"
         "from torch.profiler import profile, ProfilerActivity\n"
         "if torch.cuda.is_available():\n"
         "    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):\n        pass\n")
VARIANTS = (("profiler_early", EARLY + DEVICE + PROFILER), ("profiler_twice", DEVICE + PROFILER + PROFILER))
STAGES = (("python", "pass\n"), ("torch", "import torch\n"), ("triton", "import torch, triton\n"),
          ("device", DEVICE), ("profiler", DEVICE + PROFILER), ("kernel", DEVICE + PROFILER + KERNEL))


def time_child(code: str, env: dict, tmp: str) -> float:
    """Wall seconds of one fresh ``python3 <file>`` running ``code`` (a file: ``@triton.jit`` needs one; written
    in ``tmp`` before the clock starts). RuntimeError with its stderr when it fails."""
    path = os.path.join(tmp, "stage.py")
    with open(path, "w") as f:
        f.write(code)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise RuntimeError(f"stage failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
    return wall


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per stage (median; default 3)")
    p.add_argument("--warmup", type=int, default=1,
                   help="unmeasured processes of the last stage first, so the page cache holds torch's libraries "
                        "before the first measured stage (default 1; 0: a cold first stage, as on a fresh machine)")
    p.add_argument("--out", default=None, help="JSON result path (default: print only)")
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    env = dict(os.environ)
    rows, prev = [], 0.0
    tmp = tempfile.mkdtemp(prefix="mfu_startup_")
    for _ in range(args.warmup):
        time_child(STAGES[-1][1], env, tmp)
    for name, code in STAGES:
        walls = [time_child(code, env, tmp) for _ in range(args.repeats)]
        med = statistics.median(walls)
        rows.append({"stage": name, "walls_s": [round(w, 3) for w in walls], "median_s": round(med, 3),
                     "added_s": round(med - prev, 3)})
        prev = med
        print(f"{name:9s} median {med:6.2f} s  (+{rows[-1]['added_s']:5.2f} s)  runs {rows[-1]['walls_s']}",
              flush=True)
    base = next(r["median_s"] for r in rows if r["stage"] == "profiler")
    variants = []
    for name, code in VARIANTS:
        walls = [time_child(code, env, tmp) for _ in range(args.repeats)]
        med = statistics.median(walls)
        variants.append({"variant": name, "walls_s": [round(w, 3) for w in walls], "median_s": round(med, 3),
                         "vs_profiler_s": round(med - base, 3)})
        print(f"{name:15s} median {med:6.2f} s  ({med - base:+5.2f} s against profiler)  runs "
              f"{variants[-1]['walls_s']}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    doc = {"python": sys.version.split()[0], "warmup": args.warmup, "stages": rows, "variants": variants}
    try:
        import torch
        doc.update(torch=torch.__version__, device=(torch.cuda.get_device_name(0) if torch.cuda.is_available()
                                                    else "cpu"))
    except ImportError:
        pass
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
