"""Tiny work directories for the probe tests: a batched matmul whose reference and ModelNew misbehave on demand.

Test doubles, labelled as such: the behaviour is picked by ``PROBE_OP_MODE`` in the environment (children inherit
it), so one directory serves every gate:

* ``ok``: Model = ModelNew = torch.bmm;
* ``reject_m``: the reference refuses A's row axis m > ``PROBE_OP_LIMIT`` (``ValueError("case rejected: ...")``);
* ``wrong``: ModelNew adds 1 when m > limit (verify fails);
* ``oom``: ModelNew raises the CUDA allocator's out-of-memory text when m > limit;
* ``slow``: ModelNew sleeps 0.3 s when m > limit;
* ``membound`` / ``lazy``: ModelNew sleeps input_bytes / 0.5 GB/s (a memory-bound kernel at 0.5 GB/s); ``lazy``
  also makes get_input_groups() ignore A's axis 1 (builds m = 4 whatever the case says) - a reference that
  ignores the scaled axis;
* ``sleep1``: ModelNew sleeps ``PROBE_OP_SLEEP_S`` s (default 1; to interrupt a probe mid-run);
* ``slowref``: the reference sleeps 30 s per call (a tracer that outlives a short --budget-s or --timeout-s);
* ``flat``: ModelNew sleeps its bmm FLOPs / 2.5e5 s (a kernel at a constant 0.25 MFLOP/s: scaling raises nothing).

ModelNew writes ``pid_<pid>`` into ``$PROBE_OP_PIDS`` (when set) on every call, so a test can count the processes
that ran the candidates.

``get_input_groups()`` writes ``built_<case>_<numel>`` into ``$PROBE_OP_MARKS`` (when set) before allocating, so a
test can prove that a case was never built.
"""
import json
import os
import textwrap

MODEL = '''
import json, os, time
import torch
import torch.nn as nn

CASE_FILE = os.path.splitext(os.path.abspath(__file__))[0] + ".json"
MODE = os.environ.get("PROBE_OP_MODE", "ok")
LIMIT = int(os.environ.get("PROBE_OP_LIMIT", "64"))
torch.set_num_threads(1)  # a loaded CI box: no thread-pool oversubscription in the timed runs

class Model(nn.Module):
    def forward(self, a, b):
        if MODE == "reject_m" and a.shape[1] > LIMIT:
            raise ValueError(f"case rejected: m {a.shape[1]} > {LIMIT}")
        if MODE == "slowref":
            time.sleep(30)
        return torch.bmm(a, b)

def get_input_groups():
    groups = []
    marks = os.environ.get("PROBE_OP_MARKS")
    for line in open(CASE_FILE, encoding="utf-8"):
        if not line.strip():
            continue
        args = []
        for ent in json.loads(line)["inputs"]:
            shape = list(ent["shape"])
            if MODE == "lazy" and ent["name"] == "A":
                shape[1] = 4
            if marks:
                n = 1
                for d in shape:
                    n *= d
                open(os.path.join(marks, f"built_{ent['name']}_{n}"), "w").close()
            args.append(torch.randn(shape, dtype=torch.float32))
        groups.append(args)
    return groups

def get_init_inputs():
    return []
'''

MODEL_NEW = '''
import os, time
import torch
import torch.nn as nn

MODE = os.environ.get("PROBE_OP_MODE", "ok")
LIMIT = int(os.environ.get("PROBE_OP_LIMIT", "64"))
torch.set_num_threads(1)

class ModelNew(nn.Module):
    """test double: torch.bmm with the misbehaviour PROBE_OP_MODE asks for"""
    def forward(self, a, b):
        if os.environ.get("PROBE_OP_PIDS"):
            open(os.path.join(os.environ["PROBE_OP_PIDS"], f"pid_{os.getpid()}"), "w").close()
        big = a.shape[1] > LIMIT
        if MODE == "flat":
            time.sleep(2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2] / 2.5e5)
        if MODE == "wrong" and big:
            return torch.bmm(a, b) + 1
        if MODE == "oom" and big:
            raise RuntimeError("CUDA out of memory. Tried to allocate 64.00 GiB (test double)")
        if MODE == "slow" and big:
            time.sleep(0.3)
        if MODE in ("membound", "lazy"):
            time.sleep((a.numel() + b.numel()) * 4 / 0.5e9)
        if MODE == "sleep1":
            time.sleep(float(os.environ.get("PROBE_OP_SLEEP_S", "1")))
        return torch.bmm(a, b)
'''


def case_line(b=1, m=16, k=32, n=8, data=None):
    a = {"name": "A", "type": "tensor", "required": True, "dtype": "float32", "shape": [b, m, k]}
    if data is not None:
        a["data"] = data
    return json.dumps({"inputs": [a, {"name": "B", "type": "tensor", "required": True, "dtype": "float32",
                                      "shape": [b, k, n]}]})


def make_workdir(tmp_path, lines=None, peak_gbps=None, artifacts=True):
    """A prepared work dir: model.py, model_new.py, Op_perf_cases.jsonl, model.json (+ artifacts, peak.json)."""
    d = os.path.join(str(tmp_path), "work")
    os.makedirs(d)
    lines = lines or [case_line(1, 16, 32, 8), case_line(2, 8, 16, 4)]
    text = "\n".join(lines) + "\n"
    for name in ("Op_perf_cases.jsonl", "model.json"):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    with open(os.path.join(d, "model.py"), "w") as f:
        f.write(textwrap.dedent(MODEL))
    with open(os.path.join(d, "model_new.py"), "w") as f:
        f.write(textwrap.dedent(MODEL_NEW))
    if artifacts:
        with open(os.path.join(d, "verify_result_20260101.json"), "w") as f:
            json.dump({"inputs": [], "passed": True}, f)
        with open(os.path.join(d, "perf_result.json"), "w") as f:
            json.dump({"cases": [1, 2]}, f)
    if peak_gbps is not None:
        with open(os.path.join(d, "peak.json"), "w") as f:
            json.dump({"schema": 1, "tool": "peak_calib", "peak_tflops": {"float32": 1.0},
                       "bandwidth_gbps": peak_gbps, "note": "test double: a stated bandwidth, not a measurement"}, f)
    return d


def snapshot(d):
    """{name: bytes} of every file in the work dir (to prove what changed and what did not)."""
    out = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[name] = f.read()
    return out
