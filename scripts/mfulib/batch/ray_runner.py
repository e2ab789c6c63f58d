"""``RUNNER=ray``: the batch's jobs as Ray tasks - one task per operator, one accelerator resource per task.

Ray is optional (``requirements-ray.txt``) and imported only here, only when this runner is chosen. Each task runs
:func:`mfulib.batch.job.run_job` - the same job the local pool runs - on whichever node Ray places it. Resources
(Ray "Accelerator Support", docs.ray.io ray-core/scheduling/accelerators): ``num_gpus=1`` when the cluster has a
``GPU`` resource; ``resources={"NPU": 1}`` when it has ``NPU`` (Ray's resource name for Huawei Ascend, also the one
the ``ray-ascend`` plugin's examples request); else ``num_cpus=1``. Ray sets ``CUDA_VISIBLE_DEVICES`` /
``ASCEND_RT_VISIBLE_DEVICES`` of a task holding a GPU/NPU itself, so the job does not restrict visibility again and
records the id ``ray.get_runtime_context().get_accelerator_ids()`` reports. Ray also sets ``OMP_NUM_THREADS`` to
the task's CPU count in its workers; the task puts back the driver's value (or none), so the pipeline runs as it
would under the local pool.

Files in and out go through the filesystem: every node must see the skill directory, the sources and the batch
output directory at the same paths (a shared filesystem). Where to connect: ``RAY_ADDRESS`` (``ray.init``'s own
rule); unset, a local Ray instance is started for the batch (``num_cpus`` = the worker count, so it runs as many
operators at once as the local pool would) and shut down after it. Ctrl-C cancels the tasks (each kills its
operator's process tree and records ``interrupted``), then force-cancels what is left after 15 s. A terminal's
Ctrl-C never ends an operator's child first here (the local pool's race, ``plan.INTERRUPT_GRACE_S``): Ray's workers
block SIGINT and their children inherit the mask, so the interrupt reaches a task only as the driver's cancel,
after which no queued task starts (an end-to-end test runs both runners).
"""
from __future__ import annotations

import os
import time

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.batch.job import run_job
from mfulib.core.errors import UserError

CANCEL_GRACE_S = 15.0


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UserError("RUNNER=ray needs Ray: pip install -r requirements-ray.txt (or use the default local "
                        "runner)") from None
    return ray


def ray_task(job: dict, opts: dict) -> dict:
    """Body of one Ray task: run the job on the accelerator Ray gave this task (module docstring)."""
    import ray
    # Ray sets OMP_NUM_THREADS=<num_cpus> (1) in its workers: give the child the driver's setting, as locally
    if opts.get("driver_omp_threads") is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = opts["driver_omp_threads"]
    ids = ray.get_runtime_context().get_accelerator_ids()
    dev = next((v[0] for k in ("GPU", "NPU") for v in [ids.get(k) or []] if v), None)
    return run_job(job, dict(opts, runner="ray"), dev, restrict=False)


def task_options(resources: dict) -> dict:
    """Ray task options for a cluster with ``resources`` (ray.cluster_resources()): one GPU, one NPU or one CPU."""
    if resources.get("GPU", 0) >= 1:
        return {"num_gpus": 1, "num_cpus": 0}
    if resources.get("NPU", 0) >= 1:
        return {"resources": {"NPU": 1}, "num_cpus": 0}
    return {"num_cpus": 1}


def run_ray(jobs, workers: int, opts, on_done) -> bool:
    """Run ``jobs`` as Ray tasks (submitted in order: longest first); ``on_done(record)`` after each. Returns True
    when interrupted."""
    ray = _import_ray()
    started_here = not (os.environ.get("RAY_ADDRESS") or ray.is_initialized())
    env_vars = {"PYTHONPATH": os.pathsep.join([SCRIPTS_DIR] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    init = {"runtime_env": {"env_vars": env_vars}, "logging_level": "ERROR", "log_to_driver": False}
    if started_here:
        init.update(num_cpus=max(1, workers), include_dashboard=False)
    if not ray.is_initialized():
        ray.init(**init)
    try:
        remote = ray.remote(ray_task).options(**task_options(ray.cluster_resources()), max_retries=0)
        task_opts = dict(opts, driver_omp_threads=os.environ.get("OMP_NUM_THREADS"))
        refs = {remote.remote(job, task_opts): job for job in jobs}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
                for r in ready:
                    job = refs.pop(r)
                    on_done(_result(ray, r, job, opts))
        except KeyboardInterrupt:
            for r in refs:
                ray.cancel(r, force=False)
            t_end = time.monotonic() + CANCEL_GRACE_S
            while refs and time.monotonic() < t_end:
                ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0.5)
                for r in ready:
                    refs.pop(r)
            for r in refs:
                ray.cancel(r, force=True)
            return True
        return False
    finally:
        if started_here:
            ray.shutdown()


def _result(ray, ref, job, opts):
    """The task's record; a task that died outside run_job (worker crash) gets a failed record written here."""
    from mfulib.batch.job import failed_record
    try:
        return ray.get(ref)
    except Exception as exc:  # RayTaskError / WorkerCrashedError: the job could not report itself
        return failed_record(job, dict(opts, runner="ray"), f"Ray task failed: {type(exc).__name__}: {exc}")
