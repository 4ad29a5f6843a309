"""A task's Dockerfile, interpreted for the local backend, and the cache of its result.

Terminal-Bench 2.x images are set up by their Dockerfiles: ``ENV``/``ARG`` with Docker's variable expansion
(``ENV PATH=/opt/v/bin:${PATH}``), ``WORKDIR``, files copied or written anywhere (``/app``, ``/opt``, ``/tmp``,
``/home``, ...), ``python3 -m venv``, ``pip``/``uv pip install``, ``apt-get``, ``curl ... | sh``. The local backend
gives each task a writable root of its own (``scratch/root/<top>``, bound at ``/<top>`` under bubblewrap) and runs
every ``RUN`` step in the sandbox with the offline runtime first on ``PATH``: package installs map onto what the
host provides (a missing package fails the step with ``needs_network``), ``python3 -m venv`` makes a venv of the
host interpreter, image set-up with no local meaning (``useradd``, ``chown``, ...) is skipped and said so.

What cannot be done locally fails the load with :class:`TaskLoadError`, naming the step and why: writes under
the system directories (``/usr``, ``/etc``, ...), multi-stage ``COPY --from``, ``ADD`` of a URL, a package the
host lacks. ``apt-get install`` is skipped (the host's tools serve); where a step then fails, the error lists every
package the image's ``apt-get install`` steps name that the host lacks, all at once (``scripts/install.sh``
installs the ones Terminal-Bench images routinely carry: tmux, asciinema, ...).

The result (the workdir, the writable root and the environment) is cached per task and content
(:class:`BuildCache`), so a task's later episodes start from a copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from r2v_envs.core import cache_dir
from r2v_envs.terminalbench.task import DockerfileStep, TaskFormatError, TerminalTask, expand_vars

BUILD_VERSION = "2"  # bump when the interpretation changes: old cache entries are then ignored
# Top-level folders a task may not write: the host's read-only system, and the harness' own mount points.
SYSTEM_TOPS = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "sys",
                         "run", "boot"})
RESERVED_TOPS = frozenset({"tests", "solution", "logs", "r2v-judge", ".r2v-verdict"})
DEFAULT_TOPS = ("tmp", "opt", "srv", "home", "root", "mnt", "var", "data")  # always writable, as in a container
# System folders a Dockerfile commonly installs into: writable per task, seeded with links to the host's files
# (which stay visible read-only at HOST_ALIAS + the folder).
WRITABLE_SYSTEM = ("/usr/local/bin", "/usr/local/sbin")
HOST_ALIAS = "/.r2v-host"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NEEDS_NETWORK = re.compile(r"cannot install |Could not resolve host|Network is unreachable|EAI_AGAIN|"
                           r"getaddrinfo|Temporary failure in name resolution|Failed to establish a new connection")
_SKIP_IN_CACHE = re.compile(r"^r2v-tb-")  # bubblewrap's mount points left in the task's /tmp
_APT_INSTALL = re.compile(r"\bapt(?:-get)?\s+([^&|;\n]*\binstall\b[^&|;\n]*)")


class TaskLoadError(TaskFormatError):
    """A task the local backend cannot set up: which Dockerfile step (0: another file of the task), and why
    (``needs_network`` when a package or download it needs is not available offline)."""

    def __init__(self, task_id: str, step: int, instruction: str, why: str, needs_network: bool = False,
                 host_lacks: Sequence[str] = ()):
        self.task_id, self.step, self.instruction, self.why = task_id, step, instruction, why
        self.needs_network, self.host_lacks = needs_network, list(host_lacks)
        short = instruction if len(instruction) < 300 else instruction[:300] + " ..."
        tag = " [needs_network]" if needs_network else ""
        lacks = (f"\nThe host lacks {len(self.host_lacks)} package(s) the image's apt-get steps install: "
                 f"{' '.join(self.host_lacks)} (as root: apt-get install {' '.join(self.host_lacks)}; "
                 f"scripts/install.sh installs those Terminal-Bench images usually carry)") if self.host_lacks else ""
        where = f"Dockerfile step {step} `{short}`" if step else f"`{short}`"  # step 0: not the Dockerfile's
        super().__init__(f"{task_id}: {where} cannot run locally{tag}: {why}{lacks}")


@dataclass
class Layout:
    """Where a task's files live on the host: ``app`` (the WORKDIR), ``root`` (one folder per writable top)."""

    app: Path
    root: Path
    workdir: str
    mapped: bool  # paths are bound at their container locations (bubblewrap)

    def host_path(self, path: str) -> Path | None:
        """The host file behind container ``path``, or None when the local backend cannot write there."""
        path = os.path.normpath(path)
        root = self.workdir.rstrip("/") or "/"
        if path == root or path.startswith(root + "/"):
            return self.app / os.path.relpath(path, root)
        top = path.strip("/").split("/")[0]
        system = any(path == w or path.startswith(w + "/") for w in WRITABLE_SYSTEM)
        if not self.mapped or not top or (top in SYSTEM_TOPS and not system) or top in RESERVED_TOPS:
            return None
        return self.root / path.lstrip("/")

    def binds(self) -> list[tuple[str, str]]:
        """(host folder, mount point) of the task's writable root, for bubblewrap."""
        if not self.mapped or not self.root.is_dir():
            return []
        out = [(str(d), "/" + d.name) for d in sorted(self.root.iterdir())
               if d.is_dir() and not d.is_symlink() and d.name not in SYSTEM_TOPS]  # a link would be followed
        return out + [(str(self.root / w.lstrip("/")), w) for w in WRITABLE_SYSTEM if (self.root / w.lstrip("/")).is_dir()]

    def seed(self) -> None:
        """The default writable folders, and the writable system folders with links to the host's files."""
        for top in DEFAULT_TOPS:
            (self.root / top).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        for w in WRITABLE_SYSTEM:
            d = self.root / w.lstrip("/")
            d.mkdir(parents=True, exist_ok=True)
            for entry in sorted(os.listdir(w)) if os.path.isdir(w) else ():
                link = d / entry
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(f"{HOST_ALIAS}{w}/{entry}")


def interpret(task: TerminalTask, layout: Layout, run: Callable[[str, str, dict[str, str]], tuple[str, int | None]],
              base_path: str) -> dict[str, str]:
    """Apply ``task``'s Dockerfile to ``layout``; ``run(command, cwd, env)`` runs a ``RUN`` step in the sandbox
    (``env``: the ``ARG`` and ``ENV`` values so far, ``PATH`` only if the image sets it) and returns (output,
    exit status). Returns the image's environment (``ENV``, expanded)."""
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    cwd = "/"
    if layout.mapped:
        layout.seed()
    for n, step in enumerate(task.dockerfile, 1):
        text = f"{step.op} {' '.join(step.args)}"
        scope = {"PATH": base_path, **args, **env}
        if step.op == "ARG":
            args[step.args[0]] = expand_vars(step.args[1], scope) if len(step.args) > 1 else args.get(step.args[0], "")
        elif step.op == "ENV":
            for key, value in zip(step.args[::2], step.args[1::2]):
                env[key] = expand_vars(value, {"PATH": base_path, **args, **env})
        elif step.op == "WORKDIR":
            cwd = os.path.normpath(os.path.join(cwd, expand_vars(step.args[0], scope)))
            target = layout.host_path(cwd)
            if target is None:
                raise TaskLoadError(task.task_id, n, text, _where(cwd, layout))
            target.mkdir(parents=True, exist_ok=True)
        elif step.op in ("COPY", "ADD"):
            _copy(task, layout, n, text, [expand_vars(a, scope) for a in step.args], cwd, step.op == "ADD")
        elif step.op == "RUN":
            out, code = run(step.args[0], cwd, {**args, **env})
            if code != 0:
                tail = out.strip()[-1200:]
                raise TaskLoadError(task.task_id, n, text, f"exit status {code}:\n{tail}",
                                    needs_network=bool(NEEDS_NETWORK.search(out)),
                                    host_lacks=packages_host_lacks(task.dockerfile))
    return env


_APT_VALUED = {"-o", "--option", "-t", "--target-release", "-c", "--config-file", "-a", "--host-architecture"}


def apt_packages(args: list[str]) -> list[str] | None:
    """The packages of an ``apt-get``/``apt`` command line (versions and architectures cut), None when it does not
    install.

    Example:
        >>> apt_packages(["-o", "Dpkg::Use-Pty=0", "install", "-y", "tmux=3.3a-3", "jq:i386"])
        ['tmux', 'jq']
        >>> apt_packages(["update"]) is None
        True
    """
    words, skip = [], False
    for a in args:
        if skip or a in _APT_VALUED:
            skip = not skip
            continue
        if not a.startswith("-"):
            words.append(a)
    if words[:1] != ["install"]:
        return None
    return [re.split(r"[=:]", w, maxsplit=1)[0] for w in words[1:] if re.fullmatch(r"[a-z0-9][a-z0-9+.:=~-]*", w)]


@functools.cache  # once per process: dpkg-query answers in ~30 ms
def host_packages() -> frozenset[str]:
    """The host's installed Debian packages (empty where there is no dpkg to ask)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\\n"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(line.split()[-1].split(":")[0] for line in out.splitlines() if line.startswith("ii "))


def packages_host_lacks(dockerfile: Sequence[DockerfileStep]) -> list[str]:
    """Every package an ``apt-get install`` of the Dockerfile's ``RUN`` steps names that the host has not installed
    (in order, once each; [] where the host has no dpkg to ask).

    Example:
        >>> step = DockerfileStep("RUN", ("apt-get update && apt-get install -y bash r2v-no-such-package && ls",))
        >>> packages_host_lacks([step]) == (["r2v-no-such-package"] if host_packages() else [])
        True
    """
    have = host_packages()
    if not have:
        return []
    lacking: dict[str, None] = {}
    for step in dockerfile:
        for m in _APT_INSTALL.finditer(step.args[0] if step.op == "RUN" and step.args else ""):
            try:
                words = shlex.split(m.group(1))
            except ValueError:
                continue
            lacking.update(dict.fromkeys(p for p in apt_packages(words) or () if p not in have))
    return list(lacking)


def _where(path: str, layout: Layout) -> str:
    if not layout.mapped:
        return (f"it writes {path}, outside WORKDIR {layout.workdir}; only the bubblewrap sandbox gives a task a "
                f"writable root of its own (use the docker backend here)")
    return (f"it writes {path}: the host's system folders ({', '.join(sorted(SYSTEM_TOPS))}) stay read-only "
            f"on the local backend (use the docker backend)")


def _copy(task: TerminalTask, layout: Layout, n: int, text: str, args: list[str], cwd: str, add: bool) -> None:
    if len(args) < 2:
        raise TaskLoadError(task.task_id, n, text, "COPY/ADD needs a source and a destination")
    *sources, dest = args
    if any(re.match(r"https?://", s) for s in sources):
        raise TaskLoadError(task.task_id, n, text, "ADD of a URL needs the network", needs_network=True)
    dest_path = os.path.join(cwd, dest)
    target = layout.host_path(dest_path)
    if target is None:
        raise TaskLoadError(task.task_id, n, text, _where(os.path.normpath(dest_path), layout))
    into = dest.endswith("/") or len(sources) > 1 or target.is_dir()
    for src in sources:
        matches = sorted(task.context_dir.glob(src)) if any(c in src for c in "*?[") else [task.context_dir / src]
        for src_path in matches:
            if not src_path.exists():
                raise TaskLoadError(task.task_id, n, text, f"the source {src} is not in the build context"
                                    + (" (a multi-stage COPY --from is not supported)" if "--from" in text else ""))
            if src_path.is_dir():
                shutil.copytree(src_path, target, dirs_exist_ok=True, symlinks=True)
            elif add and tarfile.is_tarfile(src_path):  # ADD unpacks local archives
                target.mkdir(parents=True, exist_ok=True)
                with tarfile.open(src_path) as tar:
                    tar.extractall(target, filter="data")
            else:
                dst = target / src_path.name if into else target
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src_path, dst)


# ------------------------------------------------------------------------------------------- cache
def build_key(task: TerminalTask, isolation: str, runtime: Path) -> str:
    """A digest of everything the build depends on: the Dockerfile and its build context, the isolation level
    and the offline runtime."""
    h = hashlib.sha256(f"{BUILD_VERSION}|{isolation}|{runtime.name}|{task.workdir}".encode())
    for step in task.dockerfile:
        h.update(json.dumps([step.op, *step.args]).encode())
    for path in sorted(task.context_dir.rglob("*")) if task.context_dir.is_dir() else ():
        if path.is_file():
            h.update(str(path.relative_to(task.context_dir)).encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:20]


class BuildCache:
    """Built tasks under ``$R2V_CACHE/terminalbench-builds/<task>-<key>/`` (``app/``, ``root/``, ``env.json``),
    written once, atomically, and copied into each episode's scratch folder."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else cache_dir("terminalbench-builds")

    def entry(self, task_id: str, key: str) -> Path:
        return self.root / f"{task_id}-{key}"

    def restore(self, task_id: str, key: str, layout: Layout) -> dict[str, str] | None:
        entry = self.entry(task_id, key)
        if not (entry / "env.json").is_file():
            return None
        for name, dst in (("app", layout.app), ("root", layout.root)):
            if (entry / name).is_dir():
                shutil.copytree(entry / name, dst, symlinks=True, dirs_exist_ok=True)
        return json.loads((entry / "env.json").read_text())

    def save(self, task_id: str, key: str, layout: Layout, env: Mapping[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
        try:
            shutil.copytree(layout.app, tmp / "app", symlinks=True)
            if layout.root.is_dir():
                shutil.copytree(layout.root, tmp / "root", symlinks=True,
                                ignore=lambda _d, names: [x for x in names if _SKIP_IN_CACHE.match(x)])
            (tmp / "env.json").write_text(json.dumps(dict(env)))
            try:
                tmp.rename(self.entry(task_id, key))
            except OSError:  # another process saved it first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
