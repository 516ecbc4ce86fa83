"""Start the ranks of a training job (a typed `specs.ranks` job: pretrain or sft) and collect their typed results.

launcher `spawn` (the default; CPU and tests):
  world = 1  -> in this process (still `deepspeed.initialize` over a one-rank gloo group),
  world > 1  -> `world` local ranks from `torch.multiprocessing.start_processes`; each gets RANK / LOCAL_RANK /
               WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, OMP_NUM_THREADS=1 (10–30× faster on CPU
               than letting every rank use every core) and DS_ACCELERATOR=cpu when there is no CUDA. CPU ranks are
               forked from a forkserver that has already imported torch, torch._dynamo, DeepSpeed and wandb
               (FORGELINE_START_METHOD=forkserver, the default on CPU): a spawned rank spends ~8–10 CPU s importing
               them before any work, a forked one none after the first launch of the process. GPU ranks, and any
               launch with FORGELINE_START_METHOD=spawn, start fresh interpreters (`spawn`): CUDA must not be
               touched in a process that forks ranks. Either way a rank gets the launching process's environment
               of this launch (passed explicitly: the server's is the one of the launch that started it).
launcher `deepspeed` -> `deepspeed --num_gpus N [--hostfile H] --master_port P --no_local_rank --module
               tasks.train.worker --job <job.json>` (with a hostfile the launcher takes the ranks per node from
               the file's slots and N is not passed; FORGELINE_MASTER_ADDR adds --master_addr), run from the
               project root, with DS_ENV_FILE naming the variables its other hosts get (tasks/train/remote_env.py).
launcher `torchrun` -> `torchrun --nproc_per_node N --master_port P -m tasks.train.worker --job <job.json>`;
               with FORGELINE_NNODES=K and FORGELINE_RDZV_ENDPOINT=host:port in the stage's environment (`Nodes`)
               it starts this node's agent as `torchrun --nnodes K --nproc_per_node N/K --rdzv_backend c10d
               --rdzv_endpoint host:port --rdzv_id forgeline-<objective> ...` and logs the same line, which every
               other node runs (their workers read the job file once the rendezvous is complete, i.e. after this
               launch wrote it). Global ranks decide what is written (shared outputs on rank 0, per-rank files
               by rank number); LOCAL_RANK only picks the GPU.
Where the nodes are is no pipeline parameter: the same layout trains to the same bytes on one node or several
(tests/test_multinode.py), so it comes from the environment at launch, not params.yaml.
Each rank writes `rank-NNNNN.json` (a `specs.ranks.RankResult`: ok with its result, or the typed error) into the
launch's marker folder when it finishes; the launch counts as done only when every rank's marker says ok — exit
codes alone are not trusted (ZeRO-3 can abort at interpreter exit after the work is done). The job file and
markers live in `runs/pretrain-launch/` (a shared filesystem is assumed across nodes, as for the checkpoints);
the markers in `markers/launch-<id>/`, new for every launch, so a stale rank of an earlier one cannot answer.
"""

from __future__ import annotations

import logging
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, TypeVar

from specs.ranks import JobFile, JobSpec, PreferRun, PretrainRun, RankResult, RunContext, SFTRun, TrainResult
from tasks.core.files import write_text_atomic
from tasks.train.remote_env import write_env_file
from tasks.train.loop.trainer import marker_path, run_rank

CODE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the `tasks` package: importable by workers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_cpu(accelerator: str) -> bool:
    if accelerator == "cpu":
        return True
    if accelerator == "cuda":
        return False
    import torch

    return not torch.cuda.is_available()


@contextmanager
def environ(**values: str | None) -> Iterator[None]:
    """Set (or with None, unset) environment variables for the duration of the block."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(old)


def _set_environ(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def rank_env(accelerator: str, threads: bool = True) -> dict[str, str | None]:
    env: dict[str, str | None] = {}
    if use_cpu(accelerator):
        env["DS_ACCELERATOR"] = "cpu"
        if threads:
            env["OMP_NUM_THREADS"] = "1"
    return env


@dataclass(frozen=True)
class Nodes:
    """The machines a torchrun launch spans: `count` nodes meeting at the c10d rendezvous `endpoint` (host:port
    on the node that runs the stage)."""

    count: int = 1
    endpoint: str | None = None

    @classmethod
    def from_env(cls) -> "Nodes":
        """FORGELINE_NNODES (default 1) and FORGELINE_RDZV_ENDPOINT (required when it is above 1)."""
        raw = os.environ.get("FORGELINE_NNODES", "1").strip() or "1"
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"FORGELINE_NNODES={raw!r}: a whole number of nodes ≥ 1")
        endpoint = os.environ.get("FORGELINE_RDZV_ENDPOINT", "").strip() or None
        if int(raw) > 1 and (endpoint is None or not endpoint.rpartition(":")[2].isdigit()):
            raise ValueError(f"FORGELINE_NNODES={raw} needs FORGELINE_RDZV_ENDPOINT=host:port (the c10d rendezvous "
                             f"on the node that runs the stage), got {endpoint!r}")
        return cls(int(raw), endpoint)

    def per_node(self, world: int, launcher: str) -> int:
        """Ranks per node; refuses what cannot be launched that way."""
        if self.count == 1:
            return world
        if launcher != "torchrun":
            raise ValueError(f"FORGELINE_NNODES={self.count} is for launcher: torchrun (launcher {launcher}: "
                             "spawn is one node; the deepspeed launcher takes its nodes from parallel.hostfile)")
        if world % self.count:
            raise ValueError(f"dp × tp × pp = {world} ranks do not split evenly over {self.count} nodes")
        return world // self.count


def build_command(launcher: str, world: int, job_file: Path, port: int, hostfile: str | None = None,
                  python: str = sys.executable, nodes: Nodes = Nodes(), objective: str = "pretrain",
                  master_addr: str | None = None) -> list[str]:
    """The command line of an external launcher (`deepspeed` or `torchrun`); with several `nodes` (torchrun),
    the line every node's agent runs. `master_addr` (deepspeed): the first host's address the ranks meet at —
    DeepSpeed otherwise takes the first of `hostname -I` on it, which may be a management or container network."""
    bindir = Path(python).parent
    if launcher == "deepspeed":
        cmd = [str(bindir / "deepspeed") if (bindir / "deepspeed").exists() else "deepspeed"]
        cmd += ["--hostfile", hostfile] if hostfile else ["--num_gpus", str(world)]
        cmd += ["--master_addr", master_addr] if master_addr else []
        return cmd + ["--master_port", str(port), "--no_local_rank", "--module", "tasks.train.worker",
                      "--job", str(job_file)]
    if launcher == "torchrun":
        per_node = nodes.per_node(world, launcher)
        where = ["--master_port", str(port)] if nodes.count == 1 else [
            "--nnodes", str(nodes.count), "--rdzv_backend", "c10d", "--rdzv_endpoint", str(nodes.endpoint),
            "--rdzv_id", f"forgeline-{objective}"]
        return [python, "-m", "torch.distributed.run", "--nproc_per_node", str(per_node), *where,
                "-m", "tasks.train.worker", "--job", str(job_file)]
    raise ValueError(f"no external command for launcher {launcher!r}")


def environ_context() -> RunContext:
    """The run context the CLI takes from the environment, read once per launch (never inside the ranks):
    FORGELINE_DS_SHM=1 (allow DeepSpeed's shm comm op) and, for tests, FORGELINE_INJECT_LOSS=<batch>:<factor>[,...]
    (multiply the training loss of those data batches, numbered from 1 as in incidents.jsonl; `nan` allowed)."""
    faults: dict[int, str] = {}
    for item in os.environ.get("FORGELINE_INJECT_LOSS", "").split(","):
        key, _, factor = item.partition(":")
        if key.strip():
            faults[int(key)] = str(float(factor))  # refuse a malformed factor here, not inside the ranks
    return RunContext(allow_shm=os.environ.get("FORGELINE_DS_SHM") == "1", loss_faults=faults)


# What the forkserver imports once, before it forks any rank: the modules that cost a rank ~8–10 CPU s (torch's
# own import, torch._dynamo — pulled in by torch._refs on the first normal_() and by DeepSpeed's muon optimizer
# check —, DeepSpeed's engine and pipeline, wandb). None starts a thread, a process group or CUDA (checked in
# tests/test_launch_start.py). Our own modules are left out: tasks.train imports pyarrow, whose jemalloc starts a
# background thread, and a thread in a process that forks is what forkserver exists to avoid.
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "deepspeed", "deepspeed.runtime.engine",
           "deepspeed.runtime.pipe", "deepspeed.runtime.zero.muon.muon_optimizer", "wandb"]
# The variables the server's imports read (DeepSpeed picks its accelerator at import; libgomp reads its thread
# count when torch loads it): a later launch that needs other values starts its ranks with `spawn`.
SERVER_KEYS = ("DS_ACCELERATOR", "OMP_NUM_THREADS")
_server_env: dict[str, str | None] | None = None  # SERVER_KEYS as they were when this process started its server


def start_method(accelerator: str) -> str:
    """`forkserver` for CPU ranks (unless FORGELINE_START_METHOD=spawn), `spawn` for GPU ranks; starts the
    forkserver (with PRELOAD, in the current environment) on first use."""
    global _server_env
    wanted = os.environ.get("FORGELINE_START_METHOD", "forkserver").strip() or "forkserver"
    if wanted not in ("forkserver", "spawn"):
        raise ValueError(f"FORGELINE_START_METHOD={wanted!r}: forkserver or spawn")
    if wanted == "spawn" or not use_cpu(accelerator):
        return "spawn"
    current = {k: os.environ.get(k) for k in SERVER_KEYS}
    if _server_env is None:
        import multiprocessing.forkserver as fs

        fs.set_forkserver_preload(PRELOAD)
        fs.ensure_running()  # now, inside the caller's environment for this launch, not at some later fork
        _server_env = current
    return "forkserver" if current == _server_env else "spawn"


def _spawn_entry(local_rank: int, job_json: str, world: int, env: dict[str, str] | None = None) -> None:
    if env is not None:  # a forked rank: the launching process's environment now, not the server's
        os.environ.clear()
        os.environ.update(env)
    os.environ.update({"RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
                       "LOCAL_WORLD_SIZE": str(world)})
    setup_child_logging(local_rank)
    run_rank(JobFile.loads(job_json))


def setup_child_logging(rank: int) -> None:
    import logging

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    warnings.filterwarnings("ignore", message=".*an autograd kernel was not registered.*")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("forgeline").setLevel(logging.INFO if rank == 0 else logging.WARNING)


SpecT = TypeVar("SpecT", bound=JobSpec)  # resolving keeps the kind of job spec it is given


def resolved_precision(spec: SpecT) -> SpecT:
    """`spec` with its device-dependent `auto`s made concrete for the devices the ranks get, as checkpoints
    record them: `train.precision` fp32 on CPU ranks, bf16 where every visible GPU supports it, else fp16 (with
    DeepSpeed's dynamic loss scaling); `train.speed` compile and mixed precision (on CUDA: compiled blocks and
    the torch_autocast mode; on CPU: neither)."""
    cpu = use_cpu(spec.parallel.accelerator)
    precision = spec.train.precision
    if precision == "auto":
        precision = "fp32" if cpu else "bf16" if gpus_support_bf16() else "fp16"
    speed = spec.train.speed.resolved(precision, cuda=not cpu)
    return spec.model_copy(update={"train": spec.train.model_copy(update={"precision": precision, "speed": speed})})


def free_device_memory(accelerator: str) -> None:
    """After a rank ran in this process: collect its engine's reference cycles and hand the CUDA allocator's
    cached blocks back, so what runs next here (`plan --measure`'s other layouts, whose rank 0 shares GPU 0)
    does not find the device full of a finished run's memory. Nothing to do on CPU ranks."""
    if use_cpu(accelerator):
        return
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def gpus_support_bf16() -> bool:
    """bf16 in hardware on every visible GPU: compute capability ≥ 8 (Ampere and newer; ROCm's MI200/MI300
    report 9). Not `torch.cuda.is_bf16_supported()`: since torch 2.3 it also says yes where bf16 is only
    emulated (V100, T4: slow, and no bf16 peak for MFU), asks only the current device, and allocates a tensor
    there, which would hold a CUDA context on GPU 0 in the launching process for the whole run. Reading the
    capability creates no context."""
    import torch

    n = torch.cuda.device_count()
    return n > 0 and all(torch.cuda.get_device_capability(i)[0] >= 8 for i in range(n))


def launch(job: PretrainRun | SFTRun | PreferRun, launch_dir: Path, root: Path | None = None) -> TrainResult:
    """Run every rank of `job`; return rank 0's result. Raises when any rank failed or left no marker (a
    ValueError when every failed rank refused its inputs, as the in-process run would)."""
    job = job.model_copy(update={"spec": resolved_precision(job.spec)})
    spec = job.spec
    par = spec.parallel
    world = par.world_size
    if spec.train.precision == "fp16" and par.launcher == "spawn" and use_cpu(par.accelerator):
        raise ValueError(f"{job.objective}.precision: fp16 needs a GPU (DeepSpeed's CPU accelerator has no fp16); "
                         "use bf16 or fp32 on CPU")
    nodes = Nodes.from_env()
    nodes.per_node(world, par.launcher)  # refuse an impossible node split before anything is touched
    # Each launch's markers go to a folder of their own: a rank of an earlier launch of this stage that outlived
    # it (a node agent that was not stopped, a rank hanging in a collective until its timeout) writes into its
    # own launch's folder, never over this launch's results.
    shutil.rmtree(job.marker_dir, ignore_errors=True)
    job = job.model_copy(update={"marker_dir": str(Path(job.marker_dir) / f"launch-{secrets.token_hex(6)}")})
    markers = Path(job.marker_dir)
    markers.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base: dict[str, str | None] = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if par.launcher == "spawn":  # one node: rendezvous through a fresh file, gloo pairs on the loopback only
        init_file = Path(launch_dir) / f"rendezvous-{port}"
        init_file.parent.mkdir(parents=True, exist_ok=True)
        init_file.unlink(missing_ok=True)
        job = job.model_copy(update={"context": job.context.model_copy(update={"init_file": str(init_file.resolve())})})
        base["GLOO_SOCKET_IFNAME"] = "lo" if use_cpu(par.accelerator) else os.environ.get("GLOO_SOCKET_IFNAME")
    error: BaseException | None = None
    if par.launcher == "spawn" and world == 1:
        with environ(**base, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                     **rank_env(par.accelerator, threads=False)):
            try:
                return run_rank(job)
            finally:
                free_device_memory(par.accelerator)
    if par.launcher == "spawn":
        import torch.multiprocessing as mp

        with environ(**base, **rank_env(par.accelerator)):
            method = start_method(par.accelerator)
            env = dict(os.environ) if method == "forkserver" else None
            try:
                mp.start_processes(_spawn_entry, args=(JobFile.dumps(job), world, env), nprocs=world, join=True,
                                   start_method=method)
            except Exception as exc:  # a rank raised or died: its marker says why
                error = exc
    else:
        error = run_external(job, Path(launch_dir), port, nodes, root)
        if error is None and nodes.count > 1:
            # torchrun on this node returns once its own workers are done (and waits at most a few minutes for
            # the others); rank 0 may run elsewhere and still be merging the weights: wait for every marker
            wait_for_markers(markers, world, float(os.environ.get("FORGELINE_REMOTE_WAIT_S", "7200")))
    return collect(markers, world, error, job.objective)


def wait_for_markers(markers: Path, world: int, timeout_s: float, poll_s: float = 2.0) -> bool:
    """Wait until every rank's marker exists (a failed rank writes one too) or `timeout_s` passes; True when all
    are there. `collect` then reports what is missing."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        if all(marker_path(markers, r).exists() for r in range(world)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def run_external(job: PretrainRun | SFTRun | PreferRun, launch_dir: Path, port: int, nodes: Nodes,
                 root: Path | None) -> BaseException | None:
    """Write the job file and run this node's external launcher (from `root`); the error when it failed."""
    par = job.spec.parallel
    job_file = (launch_dir / "job.json").resolve()  # absolute: other nodes' workers read it too
    write_text_atomic(job_file, JobFile.dumps(job))
    cmd = build_command(par.launcher, par.world_size, job_file, port, par.hostfile, nodes=nodes,
                        objective=job.objective, master_addr=os.environ.get("FORGELINE_MASTER_ADDR") or None)
    if nodes.count > 1:
        logging.getLogger(f"forgeline.{job.objective}").info(
            "%s: this node's torchrun agent starts; run this on each of the other %d nodes, from the project "
            "folder, with the shared paths mounted where they are here: %s", job.objective, nodes.count - 1,
            shlex.join(["python", *cmd[1:]]))
    env = {**os.environ, **{k: v for k, v in rank_env(par.accelerator).items() if v is not None}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CODE_ROOT), env.get("PYTHONPATH")]))
    if par.launcher == "deepspeed":  # what its SSH runner exports to the other hosts (tasks/train/remote_env.py)
        env["DS_ENV_FILE"] = str(write_env_file(launch_dir / "deepspeed_env", Path(root or "."), env))
    proc = subprocess.run(cmd, cwd=root, env=env)
    return RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}") if proc.returncode else None


def collect(markers: Path, world: int, error: BaseException | None = None, kind: str = "pretrain") -> TrainResult:
    """Rank 0's result from the markers, or the failure: every rank's error (the cause first)."""
    results: dict[int, RankResult] = {}
    problems = []
    for r in range(world):
        path = marker_path(markers, r)
        if not path.exists():
            problems.append(f"rank {r}: no result (killed or crashed before finishing)")
            continue
        res = RankResult.model_validate_json(path.read_text())
        if not res.ok:
            problems.append(f"rank {r}: {res.error.type}: {res.error.message}" if res.error else f"rank {r}: failed")
        results[r] = res
    if problems:
        problems.sort(key=lambda p: "Connection closed by peer" in p or "no result" in p)  # the cause first
        detail = "; ".join(problems[:4]) + (f" (+{len(problems) - 4} more)" if len(problems) > 4 else "")
        errors = [res.error for res in results.values() if not res.ok and res.error is not None]
        if errors and all(e.refusal for e in errors):
            raise ValueError(errors[0].message)  # a refusal, the same on every rank
        cause = f" [{str(error).strip().splitlines()[0]}]" if error is not None and str(error).strip() else ""
        raise RuntimeError(f"{kind} failed: {detail}{cause}") from error
    result = results[0].result
    if result is None:
        raise RuntimeError(f"{kind} failed: rank 0 reported success without a result")
    return result
