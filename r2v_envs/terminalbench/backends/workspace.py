"""An episode's scratch copy of a task on the host, for the local backend, and who owns its files.

Layout: ``app/`` (the task's WORKDIR), ``root/`` (its writable root: ``root/opt``, ``root/tmp``, ...), ``tests/`` and
``solution/`` (mount points), ``.r2v/`` (the session folder: the command file, the saved cwd and variables).

Ownership is the one rule that decides whether an agent's write lands: under bubblewrap started by root, every
command of an episode runs as one unprivileged uid, and everything in the copy must be that uid's, as everything in
a task's container is root's. The host writes into the copy in exactly three ways (the build, or a restored build;
folders made again by :meth:`Workspace.ensure_layout`; the command file, which the uid only reads), and each ends
with the files given to the uid: :meth:`Workspace.give` after the build (and before each of its ``RUN`` steps, which
run as the uid), :meth:`ensure_layout` gives what it makes. A file the host wrote and did not give would answer the
agent's first overwrite with ``Permission denied`` (measured on a new machine: the files a build copied after its
last ``RUN`` step; the differential test ``tests/envs/test_terminalbench_workspace.py`` guards the rule).

Example:
    >>> ws = Workspace("demo", uid=None)
    >>> sorted(p.name for p in ws.root.iterdir())
    ['.r2v', 'app', 'root', 'solution', 'tests']
    >>> _ = (ws.root / "root").rename(ws.root / "elsewhere")
    >>> (ws.root / "root").symlink_to("/")
    >>> ws.ensure_layout([])
    >>> (ws.root / "root").is_symlink(), (ws.root / "root").is_dir()
    (False, True)
    >>> ws.remove()
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import stat
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from r2v_envs.sandbox.processes import chown_tree

SUBFOLDERS = ("app", "tests", ".r2v", "solution", "root")


class Workspace:
    """A fresh scratch copy for one episode of ``task_id``; ``uid``: the unprivileged uid its commands run as (None:
    they run as this process's user, who owns the files already)."""

    def __init__(self, task_id: str, uid: int | None):
        self.root = Path(tempfile.mkdtemp(prefix=f"r2v-tb-{task_id}-"))
        self.uid = uid
        for sub in SUBFOLDERS:
            (self.root / sub).mkdir()
        if not _LIVE:
            atexit.register(_sweep_now)
        _LIVE.add(self.root)  # removed at exit if no one removes it before (an env dropped without close())

    @property
    def app(self) -> Path:
        return self.root / "app"

    @property
    def writable_root(self) -> Path:
        return self.root / "root"

    @property
    def session(self) -> Path:
        return self.root / ".r2v"

    def give(self) -> None:
        """Give the whole copy to the episode's uid (after the host wrote into it)."""
        if self.uid is not None:
            chown_tree(str(self.root), self.uid)

    def ensure_layout(self, sources: Sequence[str]) -> None:
        """Every subfolder and mount source inside the copy (of ``sources``) is a real folder: made again where missing,
        a symlink or file in its place removed (bubblewrap follows a source's links: ``ln -s / $SCRATCH/root/srv``
        would mount the host's root at /srv, and this process writes the command file into ``.r2v``). Commands
        cannot reach these paths (the copy is mounted folder by folder); a Dockerfile's steps and the weaker
        isolation levels can. What is made is the uid's."""
        inside = [Path(src) for src in sources if Path(src).is_relative_to(self.root)]
        for path in [*(self.root / sub for sub in SUBFOLDERS), *inside]:
            for made in real_folder(path, self.root):
                if self.uid is not None:
                    os.chown(made, self.uid, self.uid)

    def write_command(self, text: str) -> None:
        """The command file, written as a new file: whatever the agent left at its path (a symlink to a host file,
        a folder) is removed, not written through. Root's and readable: the uid only reads it."""
        path = self.session / "cmd.sh"
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)

    def remove(self) -> None:
        """Delete the copy in a background thread: a directory removal costs ~3 ms on this kind of disk and a
        task's writable root has a few dozen, which a reset should not wait for. What is queued at exit is
        removed then."""
        _LIVE.discard(self.root)
        _TRASH.put(self.root)
        if not _SWEEPER:
            worker = threading.Thread(target=_sweep, name="r2v-tb-sweeper", daemon=True)
            _SWEEPER.append(worker)
            worker.start()


def real_folder(path: Path, top: Path) -> list[Path]:
    """Make ``path`` (inside ``top``, a folder the agent can write) and every folder between them real folders:
    a symlink or a file in their place is removed first, a missing one made. The folders made.

    Example:
        >>> top = Path(tempfile.mkdtemp())
        >>> (top / "root").symlink_to("/")
        >>> [p.name for p in real_folder(top / "root" / "srv", top)], real_folder(top / "root" / "srv", top)
        (['root', 'srv'], [])
    """
    cur, made = top, []
    for part in path.relative_to(top).parts:
        cur = cur / part
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            cur.mkdir()
            made.append(cur)
            continue
        if not stat.S_ISDIR(mode):  # a symlink (to a folder or not) or a file: never followed
            cur.unlink()
            cur.mkdir()
            made.append(cur)
    return made


_TRASH: queue.SimpleQueue = queue.SimpleQueue()
_SWEEPER: list[threading.Thread] = []
_LIVE: set[Path] = set()  # copies not yet given to the sweeper


def _sweep() -> None:
    while True:
        shutil.rmtree(_TRASH.get(), ignore_errors=True)


def _sweep_now() -> None:
    while not _TRASH.empty():
        shutil.rmtree(_TRASH.get_nowait(), ignore_errors=True)
    while _LIVE:
        shutil.rmtree(_LIVE.pop(), ignore_errors=True)
