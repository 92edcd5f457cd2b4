"""One vLLM 0.33 start shared by every test that needs vLLM in a fresh process.

``import vllm`` alone costs about 20 CPU seconds (``vllm.env_override`` imports torch's
compiler stack), and the tests that must see vLLM as a new process sees it (the plugin's entry
point, a missing dependency, the committed plans re-recorded, the TP=2 ranks) each paid it.
Instead, one process per test worker runs ``import vllm`` once and nothing else (the "zygote":
no plugin loaded, no model package, no specguard module imported), then forks one child per
job. A child starts as a process that has done exactly what vLLM's own start does first; it
sets the job's environment, working directory and ``sys.argv``, then runs the job's code or
module as ``__main__``, its stdout and stderr going to files the caller reads.

    python -m tests.integrations.fresh_vllm REQUEST_FD REPLY_FD   (started by ``run``)
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Job:
    """``python -c CODE ARGV...`` (or ``python -m MODULE ARGV...``) in ``cwd`` with ``env``."""

    env: dict[str, str]
    code: str | None = None
    module: str | None = None
    argv: tuple[str, ...] = ()
    cwd: str = str(ROOT)


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def fresh_env(**extra: str) -> dict[str, str]:
    """The environment a fresh vLLM process on CPU gets here: no specguard settings, no
    plugin list (installed plugins load), the CPU platform."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_PLUGINS", "SPECGUARD_"))}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    return {**env, **extra}


class _Zygote:
    def __init__(self) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close()); what the zygote itself prints (vLLM's import warnings)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integrations.fresh_vllm", str(req_r), str(rep_w)],
            cwd=ROOT, env=fresh_env(PYTHONPATH=str(ROOT)), pass_fds=(req_r, rep_w),
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True,
        )
        os.close(req_r)
        os.close(rep_w)
        self.replies = os.fdopen(self.rep_r, "r")

    def run(self, jobs: list[Job], timeout: float) -> list[Done]:
        with tempfile.TemporaryDirectory(prefix="specguard-fresh-") as tmp:
            request = [{**job.__dict__, "argv": list(job.argv), "out": f"{tmp}/{i}.out", "err": f"{tmp}/{i}.err"}
                       for i, job in enumerate(jobs)]
            os.write(self.req_w, (json.dumps(request) + "\n").encode())
            ready, _, _ = select.select([self.rep_r], [], [], timeout)
            line = self.replies.readline() if ready else ""
            if not line:
                self.log.seek(0)
                said = self.log.read().decode(errors="replace")[-3000:]
                self.close()
                raise RuntimeError(f"the vLLM zygote {'died' if ready else 'timed out'}: {said}")
            codes = json.loads(line)
            return [Done(rc, Path(r["out"]).read_text(errors="replace"), Path(r["err"]).read_text(errors="replace"))
                    for rc, r in zip(codes, request, strict=True)]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)  # its children too (they share its session)
            self.proc.wait()
        self.log.close()


_zygote: _Zygote | None = None


def run(jobs: list[Job], timeout: float = 600) -> list[Done]:
    """Run ``jobs`` at once, each in a child forked from this worker's zygote (started on
    first use, ended at exit); returns when every one has exited."""
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = _Zygote()
        atexit.register(_zygote.close)
    return _zygote.run(jobs, timeout)


def run_one(job: Job, timeout: float = 600) -> Done:
    (done,) = run([job], timeout)
    return done


# ------------------------------------------------------------------------- the zygote itself


def _child(job: dict[str, Any], set_by_vllm: dict[str, str]) -> None:
    """In the forked child: become the job's process, run it, never return."""
    code = 1
    try:
        for fd, path in ((1, job["out"]), (2, job["err"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        os.environ.clear()
        os.environ.update(job["env"])
        os.environ.update(set_by_vllm)  # what `import vllm` sets in any process
        os.chdir(job["cwd"])
        if "OMP_NUM_THREADS" in job["env"]:  # read by torch at its import, which the zygote did
            import torch

            torch.set_num_threads(int(job["env"]["OMP_NUM_THREADS"]))
        import runpy

        if job["module"]:
            sys.argv = [job["module"], *job["argv"]]
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *job["argv"]]
            exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # as a process's own exit would (the recorders' gloo stores: removed)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve(req_fd: int, rep_fd: int) -> None:
    before = dict(os.environ)
    import vllm  # noqa: F401  (the one start every child shares)

    set_by_vllm = {k: v for k, v in os.environ.items() if before.get(k) != v}

    requests = os.fdopen(req_fd, "r")
    for line in requests:
        jobs = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pids = []
        for job in jobs:
            pid = os.fork()
            if pid == 0:
                os.close(rep_fd)
                _child(job, set_by_vllm)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        os.write(rep_fd, (json.dumps(codes) + "\n").encode())


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
