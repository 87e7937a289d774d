"""Running benchmark work in separate processes, shared by every benchmark.

* :func:`run_isolated`: one call in a fresh spawned process (an eager index build, a diagnosis),
  with a time limit, an optional address-space limit and extra environment variables for the
  child only. The parent never dies with the child.
* :class:`Worker`: a persistent spawned process that runs ``setup`` once (loading a vocabulary
  outside every measurement) and then jobs sent over a pipe; a job that overruns its time limit
  or kills the process is reported, and the next job starts a fresh process.

Both return plain dicts. A failure of the isolation itself is ``{"timeout": True, "error": ...}``
or ``{"died": True, "error": ...}``; an exception inside the function is
``{"error": "Type: message"}``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

Job = dict[str, Any]


def _limit_memory(mem_bytes: int) -> None:
    if mem_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))


def _call_child(
    conn: Any, fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], mem: int
) -> None:
    try:
        _limit_memory(mem)
        out = fn(*args)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        out = {"error": f"{type(e).__name__}: {e}"}
    try:
        conn.send(out)
    finally:
        conn.close()


def run_isolated(
    fn: Callable[..., dict[str, Any]],
    args: tuple[Any, ...] = (),
    *,
    timeout: float,
    mem_bytes: int = 0,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``fn(*args)`` (a module-level function returning a dict) in a fresh spawned process."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})  # inherited by the spawned child only while it starts
    try:
        p = ctx.Process(target=_call_child, args=(child, fn, args, mem_bytes), daemon=True)
        p.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    child.close()
    deadline = time.monotonic() + timeout
    out: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        if parent.poll(0.05):
            try:
                out = parent.recv()
            except EOFError:
                out = {"died": True, "error": f"subprocess died (exit code {p.exitcode})"}
            break
        if not p.is_alive() and not parent.poll(0):
            p.join(1)
            out = {"died": True, "error": f"subprocess died (exit code {p.exitcode})"}
            break
    if out is None:
        out = {"timeout": True, "error": f"killed after {timeout:.0f} s"}
    p.kill()
    p.join(10)
    parent.close()
    return out


def _worker_child(
    conn: Any,
    setup: Callable[..., tuple[Any, dict[str, Any]]],
    handle: Callable[[Any, Job], dict[str, Any]],
    args: tuple[Any, ...],
    mem: int,
) -> None:
    try:
        _limit_memory(mem)
        state, info = setup(*args)
        conn.send({"ready": True, **info})
    except BaseException as e:  # noqa: BLE001
        conn.send({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            out = handle(state, job)
        except MemoryError:
            out = {"error": "MemoryError (address-space limit)", "memory": True}
        except BaseException as e:  # noqa: BLE001
            out = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=5)}
        conn.send(out)


class Worker:
    """A persistent process: ``setup(*args) -> (state, info)`` once, then
    ``handle(state, job) -> dict`` per :meth:`run`. ``info`` (a dict) is kept as
    :attr:`ready_info` of the latest start; :attr:`starts` counts the starts."""

    def __init__(
        self,
        setup: Callable[..., tuple[Any, dict[str, Any]]],
        handle: Callable[[Any, Job], dict[str, Any]],
        args: tuple[Any, ...] = (),
        *,
        mem_bytes: int = 0,
        start_timeout: float = 300.0,
        name: str = "worker",
    ) -> None:
        self.setup, self.handle, self.args = setup, handle, args
        self.mem_bytes, self.start_timeout, self.name = mem_bytes, start_timeout, name
        self.proc: Any = None
        self.conn: Any = None
        self.starts = 0
        self.ready_info: dict[str, Any] = {}

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_child,
            args=(child, self.setup, self.handle, self.args, self.mem_bytes),
            daemon=True,
        )
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout):
            self.kill()
            raise RuntimeError(f"{self.name} did not start in {self.start_timeout:.0f} s")
        msg = parent.recv()
        if not msg.pop("ready", False):
            self.kill()
            raise RuntimeError(f"{self.name} failed to start: {msg.get('error')}")
        self.starts += 1
        self.ready_info = msg

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except OSError:
                pass
        self.kill()

    def run(self, job: Job, timeout: float) -> dict[str, Any]:
        """The job's result; ``{"timeout": True, ...}`` after ``timeout`` seconds (the process
        is killed) or ``{"died": True, ...}`` when the process ends without answering."""
        if self.proc is None or not self.proc.is_alive():
            self.kill()
            self.start()
        self.conn.send(job)
        t0 = time.monotonic()
        while True:
            if self.conn.poll(0.02):
                try:
                    return dict(self.conn.recv())
                except EOFError:
                    break
            if not self.proc.is_alive():
                break
            if time.monotonic() - t0 > timeout:
                self.kill()
                return {"timeout": True, "error": f"killed after {timeout:.0f} s"}
        code = self.proc.exitcode if self.proc is not None else None
        self.kill()
        return {"died": True, "error": f"worker died (exit code {code}; memory limit?)"}
