"""Shared helpers for the benchmark scripts in ``benches/``.

Nothing here depends on tokensieve: the helpers read a Hugging Face ``tokenizer.json`` directly
(token bytes, special ids, EOS), so that the engines compared in a benchmark are all fed the same
vocabulary and none of them is given another engine's view of it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The shared data folder beside the checkout (read-only): every benchmark finds it here.
SHARED = REPO.parent / "shared"
SHARED_TOKENIZERS = SHARED / "tokenizers"
SHARED_DATA = SHARED / "data"
# compiled once by every benchmark worker before any measurement (one-time per-vocabulary work)
WARMUP_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
}
RESULTS_DIR = REPO / "benches" / "results"


# --------------------------------------------------------------------------------------------
# tokenizer.json
# --------------------------------------------------------------------------------------------


def resolve_tokenizer(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(folder, tokenizer.json)`` for a folder holding ``tokenizer.json`` or the file itself."""
    p = Path(path)
    if p.is_dir():
        return p, p / "tokenizer.json"
    return p.parent, p


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode`` (the byte-level BPE alphabet)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _is_byte_level(tok: dict[str, Any]) -> bool:
    def has(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "ByteLevel":
                return True
            return any(has(v) for v in node.values())
        if isinstance(node, list):
            return any(has(v) for v in node)
        return False

    return has(tok.get("decoder")) or has(tok.get("pre_tokenizer"))


_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class TokenizerInfo:
    """Token bytes, special ids and EOS of a ``tokenizer.json``, decoded without any engine.

    ``token_bytes[i]`` is the byte string token ``i`` emits, or ``None`` for special tokens and
    ids the tokenizer does not define. Byte-level BPE tokens are mapped back through GPT-2's
    byte alphabet; SentencePiece-style tokens turn ``▁`` into a space and ``<0xNN>`` (byte
    fallback) into the byte.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.folder, self.file = resolve_tokenizer(path)
        self.json_text = self.file.read_text(encoding="utf-8")
        tok = json.loads(self.json_text)
        model = tok.get("model", {})
        vocab: dict[str, int] = dict(model.get("vocab", {}))
        added: list[dict[str, Any]] = list(tok.get("added_tokens", []))
        self.byte_level = _is_byte_level(tok)
        self.special_ids = {int(a["id"]) for a in added if a.get("special")}
        size = max([*vocab.values(), *(int(a["id"]) for a in added)], default=-1) + 1
        self.size = size
        out: list[bytes | None] = [None] * size
        u2b = _gpt2_unicode_to_byte()
        byte_fallback = bool(model.get("byte_fallback"))
        for s, i in vocab.items():
            if i in self.special_ids:
                continue
            if self.byte_level:
                try:
                    out[i] = bytes(u2b[c] for c in s)
                except KeyError:  # not in the byte alphabet: take the text as is
                    out[i] = s.encode("utf-8")
            else:
                m = _BYTE_TOKEN.match(s) if byte_fallback else None
                out[i] = bytes([int(m.group(1), 16)]) if m else s.replace("▁", " ").encode()
        for a in added:
            i = int(a["id"])
            if not a.get("special") and out[i] is None:
                out[i] = str(a["content"]).encode("utf-8")
        self.token_bytes = out
        self.eos_id = self._eos_id(tok, vocab, added)

    def _eos_id(self, tok: dict[str, Any], vocab: dict[str, int], added: list[Any]) -> int:
        names: list[str] = []
        cfg = self.folder / "tokenizer_config.json"
        if cfg.is_file():
            e = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
            if isinstance(e, dict):
                e = e.get("content")
            if isinstance(e, str):
                names.append(e)
        names += ["<|end_of_text|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<eos>"]
        by_name = {str(a["content"]): int(a["id"]) for a in added}
        for n in names:
            if n in by_name:
                return by_name[n]
            if n in vocab:
                return vocab[n]
        raise ValueError(f"cannot find the EOS token of {self.file}")

    def outlines_map(self) -> dict[bytes, list[int]]:
        """``{token bytes: [ids]}`` of the regular tokens (EOS and special ids left out)."""
        d: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if b is not None and i != self.eos_id:
                d.setdefault(b, []).append(i)
        return d


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------


def proc_status() -> dict[str, int]:
    """``VmRSS`` / ``VmHWM`` (peak RSS) of this process, in KiB (empty off Linux)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def run_engine_child(
    cmd: Sequence[str], out: Path, log: Path, timeout_s: float, missing: dict[str, Any]
) -> dict[str, Any]:
    """Run a vLLM benchmark's child (`cmd`) in a process group of its own, with the CPU
    engine's defaults (2 GiB of KV cache, warnings only) unless the environment sets them; its
    output and errors go to `log`. Returns the JSON the child left in `out` (`missing` when it
    left none) with ``child_s`` and ``child_rc``; when the child failed (a nonzero exit, a
    timeout: the whole group is killed, or a ``phase`` other than ``done``), also ``crash`` and
    the log's last 3,000 characters as ``log_tail``."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    t = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc: Any = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
    res: dict[str, Any] = json.loads(out.read_text()) if out.exists() else dict(missing)
    res["child_s"] = time.perf_counter() - t
    res["child_rc"] = rc
    if rc != 0 or res.get("phase") != "done":
        res.setdefault("crash", f"child exited with {rc} in phase {res.get('phase')}")
        res["log_tail"] = log.read_text(errors="replace")[-3000:]
    return res


def trim_heap() -> bool:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``), so that the next
    allocations raise RSS instead of silently reusing pages the process already holds."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# statistics and formatting
# --------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), ``None`` for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = math.floor(k)
    hi = math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def geomean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None and v > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


def num(x: float | None) -> str:
    """About three significant digits; ``–`` for missing values."""
    if x is None or x != x:
        return "–"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned table for the terminal (first column left-aligned, others right)."""
    widths = [len(h) for h in header]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in header) + " |"]
    out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    for name in (dist, dist.replace("-", "_"), dist.replace("_", "-")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine_rows(m: dict[str, Any]) -> list[list[str]]:
    """The rows of a results table that describe the machine of `machine_info` (CPU, cores,
    memory, load at start, OS, Python, tokensieve's git revision)."""
    return [
        ["CPU", str(m["cpu"])],
        ["cores (usable)", f"{m['cores']} ({m['usable_cores']})"],
        ["memory", f"{m['memory_gib']} GiB"],
        ["load average at start (1/5/15 min)", str(m["load_avg_1_5_15min_at_start"])],
        ["OS", str(m["os"])],
        ["Python", str(m["python"])],
        ["tokensieve git", str(m["git"])],
    ]


def machine_info(packages: Sequence[str]) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    mem_kib = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    commit = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)benches/results",  # results do not change what is measured
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if dirty:
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_avg_1_5_15min_at_start": load,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": round(mem_kib / 2**20, 1) if mem_kib else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "git": commit,
        "packages": {p: _version(p) for p in packages},
    }
