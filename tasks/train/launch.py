"""Start the ranks of a pretraining job and collect their results.

launcher `spawn` (the default; CPU and tests):
  world = 1  -> in this process (still `deepspeed.initialize` over a one-rank gloo group),
  world > 1  -> `torch.multiprocessing.spawn` of `world` local ranks; each gets RANK / LOCAL_RANK / WORLD_SIZE,
               MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, OMP_NUM_THREADS=1 (10–30× faster on CPU than
               letting every rank use every core) and DS_ACCELERATOR=cpu when there is no CUDA.
launcher `deepspeed` -> `deepspeed --num_gpus N [--hostfile H] --master_port P --no_local_rank --module
               tasks.train.worker --job <job.json>` (with a hostfile the launcher takes the ranks per node from
               the file's slots and N is not passed), run from the project root.
launcher `torchrun` -> `torchrun --nproc_per_node N --master_port P -m tasks.train.worker --job <job.json>`
               (single node; for several nodes run that command on each with torchrun's --nnodes/--rdzv-*
               options).
Each rank writes `rank-NNNNN.json` into the marker folder when it finishes (ok, or the error); the launch
counts as done only when every rank's marker says ok — exit codes alone are not trusted (ZeRO-3 can abort at
interpreter exit after the work is done). The job file and markers live in `runs/pretrain-launch/` (a shared
filesystem is assumed across nodes, as for the checkpoints).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tasks.train.loop import Job, marker_path, run_rank

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


def build_command(launcher: str, world: int, job_file: Path, port: int, hostfile: str | None = None,
                  python: str = sys.executable) -> list[str]:
    """The command line of an external launcher (`deepspeed` or `torchrun`)."""
    bindir = Path(python).parent
    if launcher == "deepspeed":
        cmd = [str(bindir / "deepspeed") if (bindir / "deepspeed").exists() else "deepspeed"]
        cmd += ["--hostfile", hostfile] if hostfile else ["--num_gpus", str(world)]
        return cmd + ["--master_port", str(port), "--no_local_rank", "--module", "tasks.train.worker",
                      "--job", str(job_file)]
    if launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_port", str(port),
                "-m", "tasks.train.worker", "--job", str(job_file)]
    raise ValueError(f"no external command for launcher {launcher!r}")


def _spawn_entry(local_rank: int, job_json: str, world: int) -> None:
    os.environ.update({"RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world)})
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    _setup_child_logging(local_rank)
    run_rank(Job.from_json(job_json))


def _setup_child_logging(rank: int) -> None:
    import logging

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    warnings.filterwarnings("ignore", message=".*an autograd kernel was not registered.*")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("forgeline").setLevel(logging.INFO if rank == 0 else logging.WARNING)


def launch(job: Job, launch_dir: Path, root: Path | None = None) -> dict[str, Any]:
    """Run every rank of `job`; return rank 0's result. Raises when any rank failed or left no marker."""
    spec = job.train_spec()
    par = spec.parallel
    world = par.world_size
    if spec.train.precision == "fp16" and par.launcher == "spawn" and use_cpu(par.accelerator):
        raise ValueError(f"{job.kind}.precision: fp16 needs a GPU (DeepSpeed's CPU accelerator has no fp16); "
                         "use bf16 or fp32 on CPU")
    markers = Path(job.marker_dir)
    shutil.rmtree(markers, ignore_errors=True)
    markers.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base: dict[str, str | None] = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if par.launcher == "spawn":  # one node: rendezvous through a fresh file, gloo pairs on the loopback only
        init_file = Path(launch_dir) / f"rendezvous-{port}"
        init_file.parent.mkdir(parents=True, exist_ok=True)
        init_file.unlink(missing_ok=True)
        base.update(FORGELINE_INIT_FILE=str(init_file.resolve()),
                    GLOO_SOCKET_IFNAME="lo" if use_cpu(par.accelerator) else os.environ.get("GLOO_SOCKET_IFNAME"))
    error: BaseException | None = None
    if par.launcher == "spawn" and world == 1:
        with environ(**base, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", **rank_env(par.accelerator, threads=False)):
            return run_rank(job)
    if par.launcher == "spawn":
        import torch.multiprocessing as mp

        with environ(**base, **rank_env(par.accelerator)):
            try:
                mp.spawn(_spawn_entry, args=(job.to_json(), world), nprocs=world, join=True)
            except Exception as exc:  # a rank raised or died: its marker says why
                error = exc
    else:
        job_file = Path(launch_dir) / "job.json"
        job_file.parent.mkdir(parents=True, exist_ok=True)
        job_file.write_text(job.to_json())
        cmd = build_command(par.launcher, world, job_file, port, par.hostfile)
        env = {**os.environ, **{k: v for k, v in rank_env(par.accelerator).items() if v is not None}}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CODE_ROOT), env.get("PYTHONPATH")]))
        proc = subprocess.run(cmd, cwd=root, env=env)
        if proc.returncode:
            error = RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return collect(markers, world, error, job.kind)


def collect(markers: Path, world: int, error: BaseException | None = None, kind: str = "pretrain") -> dict[str, Any]:
    results, problems = {}, []
    for r in range(world):
        path = marker_path(markers, r)
        if not path.exists():
            problems.append(f"rank {r}: no result (killed or crashed before finishing)")
            continue
        data = json.loads(path.read_text())
        if not data.get("ok"):
            problems.append(f"rank {r}: {data.get('error')}")
        results[r] = data
    if problems:
        problems.sort(key=lambda p: "Connection closed by peer" in p or "no result" in p)  # the cause first
        detail = "; ".join(problems[:4]) + (f" (+{len(problems) - 4} more)" if len(problems) > 4 else "")
        errors = [d.get("error", "") for d in results.values() if not d.get("ok")]
        if errors and all(e.startswith("ValueError: ") for e in errors):
            raise ValueError(errors[0].removeprefix("ValueError: "))  # a refusal, the same on every rank
        cause = f" [{str(error).strip().splitlines()[0]}]" if error is not None and str(error).strip() else ""
        raise RuntimeError(f"{kind} failed: {detail}{cause}") from error
    return results[0]["result"]
