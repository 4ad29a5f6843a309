"""The offline test runtime's commands: ``uv``, ``uvx``, ``pytest``, ``python``, ``pip``, ``curl``, ``apt-get``.

Upstream Terminal-Bench test scripts bootstrap their runner from the network (``curl -LsSf
https://astral.sh/uv/.../install.sh | sh``, ``uv venv``, ``uv pip install pytest==8.4.1``, ``uv init; uv add
pytest``, ``uvx -w pytest==8.4.1 pytest ...``, ``pip install pytest``, ``apt-get install curl``). Offline that
fails, so the judge puts this runtime first on the test script's PATH: every command here maps onto the
judge's pytest (the runtime's own copy, run with ``python -I``) and reports on stderr what it skipped.

This file is copied into the runtime and runs there under an isolated interpreter, so it imports only the
standard library; ``bin/<name>`` wrappers call ``python -I shim.py <name> ARGS``. Environment (set by the
harness for the test phase, never by the agent): ``R2V_TEST_PYTHON`` the interpreter, ``R2V_JUDGE_OUT`` the
folder pytest's JUnit XML goes to, ``TEST_DIR`` the trusted tests.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time

RT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the runtime root (lib/..)
# Image set-up commands a Dockerfile runs that have no meaning on the local backend (build-bin/ only).
NOOPS = ("useradd", "adduser", "groupadd", "addgroup", "usermod", "chown", "chgrp", "ldconfig", "locale-gen",
         "update-ca-certificates", "update-alternatives", "dpkg-reconfigure", "apt-key", "systemctl", "service")
SITE = os.path.join(RT, "site")
# pytest plugins a test script may ask for: distribution name -> (module, options that need it).
PLUGINS = {"pytest-timeout": ("pytest_timeout", ("--timeout", "--timeout_method", "--timeout-method")),
           "pytest-json-ctrf": ("pytest_ctrf", ("--ctrf",)),
           "pytest-json-report": ("pytest_jsonreport", ("--json-report", "--json-report-file")),
           "pytest-xdist": ("xdist", ("-n", "--numprocesses", "--dist"))}
# Options of pytest the judge sets itself: the script's values are dropped (name -> takes a value).
OWNED = {"-p": True, "-c": True, "--config-file": True, "--rootdir": True, "--confcutdir": True, "--junitxml": True,
         "--junit-xml": True, "--junit-prefix": True, "--noconftest": False, "--pyargs": False,
         "--import-mode": True, "-o": True, "--override-ini": True, "--doctest-modules": False, "--doctest-glob": True,
         "--doctest-continue-on-failure": False, "-P": False}
_PROVIDED = {"pytest", "pip", "uv", "setuptools", "wheel"}
# Reporting plugins the judge replaces with its own JUnit report: "installed" as no-ops, their options dropped.
_REPORTERS = {"pytest-json-ctrf", "pytest-json-report"}


def note(msg: str) -> None:
    print(f"r2v offline test runtime: {msg}", file=sys.stderr, flush=True)


def real_python() -> str:
    return os.environ.get("R2V_TEST_PYTHON") or shutil.which("python3") or sys.executable


def _req_name(req: str) -> str:
    return re.split(r"[<>=!~;\[ @]", req.strip(), maxsplit=1)[0].strip().lower().replace("_", "-")


def _module_of(name: str) -> str:
    return PLUGINS.get(name, (name.replace("-", "_"), ()))[0]


def available(name: str) -> bool:
    """Whether a requested distribution is importable by the judge's interpreter (or is this runtime)."""
    if name in _PROVIDED or name in _REPORTERS:
        return True
    module = _module_of(name)
    aliases = {"scikit-learn": "sklearn", "pyyaml": "yaml", "pillow": "PIL", "beautifulsoup4": "bs4",
               "opencv-python": "cv2", "python-dateutil": "dateutil"}
    return importlib.util.find_spec(aliases.get(name, module)) is not None


def install(reqs: list[str], how: str) -> int:
    """``pip install`` / ``uv pip install`` / ``uv add``: nothing is downloaded; report what the host has."""
    names = [r for r in reqs if r]
    have = [r for r in names if re.fullmatch(r"[A-Za-z0-9][\w.-]*(\[[\w,.-]*\])?\s*([<>=!~;].*)?", r)
            and available(_req_name(r))]
    missing = [r for r in names if r not in have]
    if have:
        note(f"skipped `{how}` of {' '.join(have)} (no network; provided by the judge's environment)")
    if missing:
        note(f"cannot install {' '.join(missing)}: no network and not in the judge's environment")
        return 1
    return 0


def _split_pytest_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Drop the options the judge owns and those of plugins the host lacks; return (kept, dropped)."""
    kept, dropped, i = [], [], 0
    missing_opts = {o for dist, (mod, opts) in PLUGINS.items() for o in opts
                    if dist in _REPORTERS or not available(dist)}
    while i < len(args):
        a = args[i]
        key, eq, _ = a.partition("=")
        if re.fullmatch(r"-[pco].+", a):  # a short option with its value attached (-pNAME, -oaddopts=...)
            dropped.append(a)
            i += 1
            continue
        if key in OWNED or key in missing_opts:
            takes_value = OWNED.get(key, key not in ("--json-report",))
            n = 2 if takes_value and not eq and i + 1 < len(args) else 1
            dropped += args[i:i + n]
            i += n
            continue
        kept.append(a)
        i += 1
    return kept, dropped


def judge_pytest_args(args: list[str], test_dir: str, ini: str) -> tuple[list[str], list[str]]:
    """pytest's arguments as the judge runs them: the script's own minus the options the judge owns (and those
    of plugins the host lacks), plus the judge's plugin, ini file, rootdir and conftest boundary. Returns
    ``(arguments, dropped)``; the daemon applies it again to whatever a request asks for."""
    args, dropped = _split_pytest_args(args)
    if not any(not a.startswith("-") for a in args):
        args.append(test_dir)  # a bare `pytest` would collect the agent's working directory
    plugins = ["-p", "no:cacheprovider", "-p", "r2v_judge_plugin"]
    for dist, (mod, opts) in PLUGINS.items():
        if mod != "xdist" and dist not in _REPORTERS and available(dist):
            plugins += ["-p", mod]
    return [*args, *plugins, "-c", ini, "--rootdir", test_dir, "--confcutdir", test_dir], dropped


def _via_judge(socket_path: str, args: list[str], append_cwd: bool) -> int:
    """Ask the judge's daemon (:mod:`r2v_envs.terminalbench.judge_daemon`) to run pytest with this process's
    stdin/stdout/stderr, working directory and environment; return its exit status."""
    import json
    import socket
    import struct

    env = {k: v for k, v in os.environ.items() if k != "R2V_CWD"}
    body = json.dumps({"args": args, "cwd": os.getcwd(), "env": env, "append_cwd": append_cwd}).encode()
    data = struct.pack("!I", len(body)) + body
    sys.stdout.flush()
    sys.stderr.flush()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        sent = socket.send_fds(s, [data], [0, 1, 2])
        s.sendall(data[sent:])
        reply = b""
        while len(reply) < 4:
            chunk = s.recv(4 - len(reply))
            if not chunk:
                note("the judge's pytest run ended without a status")
                return 3
            reply += chunk
    return struct.unpack("!I", reply)[0]


def run_pytest(args: list[str], append_cwd: bool) -> int:
    """The judge's pytest: the runtime's own copy under ``python -I``, its ini file and plugin, rootdir and
    conftest boundary at the trusted tests; the script's options that would move any of those are dropped.

    With ``$R2V_JUDGE_SOCKET`` (the local backend under bubblewrap) the judge's daemon runs it and receives
    the results itself; otherwise JUnit XML goes into ``$R2V_JUDGE_OUT`` (the Docker backend)."""
    test_dir = os.environ.get("TEST_DIR", "/tests")
    socket_path = os.environ.get("R2V_JUDGE_SOCKET")
    if socket_path:
        return _via_judge(socket_path, args, append_cwd)
    final, dropped = judge_pytest_args(args, test_dir, os.path.join(RT, "pytest.ini"))
    if dropped:
        note(f"the judge sets these itself, ignored: {' '.join(dropped)}")
    out = os.environ.get("R2V_JUDGE_OUT")
    if not out:
        note("R2V_JUDGE_OUT is not set: this pytest writes no report")
    else:
        final.append(f"--junitxml={os.path.join(out, f'junit-{time.time_ns()}-{os.getpid()}.xml')}")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for var in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME"):
        os.environ.pop(var, None)
    code = ("import os, sys\n"
            # started in the runtime (see main); relative entries would resolve in the agent's folder
            "sys.path[:] = [p for p in sys.path if os.path.isabs(p)]\n"
            f"os.chdir({os.getcwd()!r})\n"
            f"sys.path.insert(0, {SITE!r})\n"
            # `python -m pytest` puts the working directory on sys.path; keep that for tests that import the
            # solution by name, but after the runtime and the interpreter's own paths so nothing it holds can
            # stand in for pytest, its plugins or the standard library.
            + ("sys.path.append(os.getcwd())\n" if append_cwd else "")
            + "import pytest\nsys.argv[0] = 'pytest'\nsys.exit(pytest.main(sys.argv[1:]))\n")
    os.chdir(RT)
    os.execv(real_python(), [real_python(), "-I", "-c", code, *final])


def python(args: list[str]) -> int:
    """``python``/``python3``: ``-m pytest`` and ``-m pip`` go to the runtime, anything else to the
    interpreter."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-c", "-m", "-"):
        i += 2 if args[i] in ("-W", "-X") else 1
    if i + 1 < len(args) and args[i] == "-m":
        if args[i + 1] in ("pytest", "py.test"):
            return run_pytest(args[i + 2:], append_cwd=True)
        if args[i + 1] == "pip":
            return pip(args[i + 2:])
        if args[i + 1] == "venv":
            return make_venv(args[i + 2:])
    os.execv(real_python(), [real_python(), *args])


_PIP_VALUE_OPTS = {"--retries", "--timeout", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
                   "-c", "--constraint", "-t", "--target", "--prefix", "--root", "--python-version", "--platform",
                   "--implementation", "--abi", "--only-binary", "--no-binary", "--progress-bar", "--log", "--proxy",
                   "--cache-dir", "--src", "--upgrade-strategy", "--trusted-host", "-C", "--config-settings",
                   "--global-option", "--report", "--python", "--root-user-action"}


def pip_requirements(args: list[str]) -> list[str]:
    """The requirements a ``pip install`` command line names (``-r FILE`` read, options and their values
    dropped; local paths and ``-e`` kept as they are so the caller can refuse them).

    Example:
        >>> pip_requirements(["--no-cache-dir", "--retries", "3", "pytest==8.4.1", "-e", "."])
        ['pytest==8.4.1', '.']
    """
    reqs, i = [], 0
    while i < len(args):
        a = args[i]
        key, eq, value = a.partition("=")
        if key in ("-r", "--requirement"):
            path = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if eq else 2
            try:
                with open(path) as f:
                    reqs += [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()
                             and not ln.lstrip().startswith("-")]
            except OSError:
                reqs.append(f"-r {path}")
            continue
        if key in ("-e", "--editable"):
            i += 1 if eq else 2
            reqs.append(value if eq else (args[i - 1] if i - 1 < len(args) else ""))
            continue
        if a.startswith("-"):
            i += 1 if eq or key not in _PIP_VALUE_OPTS else 2
            continue
        reqs.append(a)
        i += 1
    return reqs


def pip(args: list[str]) -> int:
    if args[:1] == ["install"]:
        return install(pip_requirements(args[1:]), "pip install")
    if args[:1] in (["--version"], ["-V"]):
        print("pip (r2v offline test runtime)")
        return 0
    if args[:1] in (["list"], ["freeze"], ["show"], ["cache"], ["config"], ["check"]):
        note(f"skipped `pip {' '.join(args)}` (offline runtime)")
        return 0
    note(f"`pip {' '.join(args)}` is not available offline")
    return 1


def make_venv(args: list[str]) -> int:
    """``python -m venv DIR``: a venv of the judge's interpreter that sees its packages
    (``--system-site-packages``, no pip); its ``python``/``pip`` go through this runtime, so installs into it
    map onto what the host has and ``python -m pytest`` is the judge's."""
    import subprocess

    dirs = [a for a in args if not a.startswith("-")]
    if not dirs:
        note("`python -m venv` needs a directory")
        return 2
    bin_dir = os.path.join(RT, "bin")
    for d in dirs:
        code = subprocess.call([real_python(), "-m", "venv", "--without-pip", "--system-site-packages",
                                *(["--clear"] if "--clear" in args else []), d])
        if code:
            return code
        for name in ("python", "python3", "pip", "pip3"):
            path = os.path.join(d, "bin", name)
            if os.path.lexists(path):
                os.unlink(path)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\nexec "{bin_dir}/{name}" "$@"\n')
            os.chmod(path, 0o755)
        note(f"`python -m venv {d}`: a venv of the judge's interpreter with its packages (nothing downloaded)")
    return 0


def noop(name: str, args: list[str]) -> int:
    """Image set-up with no local meaning (users, groups, ownership, caches): skipped, and said so."""
    note(f"skipped `{name} {' '.join(args)}` (image set-up; the local backend runs on the host's system)")
    return 0


def venv(path: str) -> int:
    """``uv venv PATH``: a fresh folder whose ``bin/activate`` puts this runtime first on PATH. Whatever was
    at PATH is removed first, so an activate script or executables planted there never run."""
    path = os.path.abspath(path)
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(os.path.join(path, "bin"))
    bin_dir = os.path.join(RT, "bin")
    with open(os.path.join(path, "bin", "activate"), "w") as f:
        f.write(f'export VIRTUAL_ENV="{path}"\nexport PATH="{bin_dir}:$PATH"\n'
                "deactivate() { :; }\n")
    for name in ("python", "python3", "pytest", "pip"):
        os.symlink(os.path.join(bin_dir, name), os.path.join(path, "bin", name))
    note(f"`uv venv {path}`: a venv of the judge's interpreter (nothing downloaded)")
    return 0


def _strip_opts(args: list[str], with_value: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Drop uv's options before the command; collect ``--with``/``-w`` requirements."""
    withs, i = [], 0
    while i < len(args) and args[i].startswith("-"):
        key, eq, val = args[i].partition("=")
        if args[i] == "--":
            i += 1
            break
        if key in with_value:
            value = val if eq else (args[i + 1] if i + 1 < len(args) else "")
            if key in ("-w", "--with"):
                withs.append(value)
            i += 1 if eq else 2
        else:
            i += 1
    return args[i:], withs


_UV_VALUE_OPTS = ("-p", "--python", "-w", "--with", "--from", "--with-requirements", "--project", "--directory",
                  "--index-url", "--extra-index-url", "--group", "--extra")


def run_command(cmd: list[str], withs: list[str]) -> int:
    if withs and install(withs, "--with") != 0:
        return 1
    if not cmd:
        note("nothing to run")
        return 2
    name = os.path.basename(cmd[0])
    if name in ("pytest", "py.test"):
        return run_pytest(cmd[1:], append_cwd=False)
    if re.fullmatch(r"python(3(\.\d+)?)?", name):
        return python(cmd[1:])
    path = shutil.which(cmd[0])
    if path is None:
        print(f"{cmd[0]}: command not found", file=sys.stderr)
        return 127
    os.execv(path, cmd)


def uv(args: list[str]) -> int:
    args, _ = _strip_opts(args, ())
    if not args or args[0] in ("--version", "-V", "version", "self"):
        print("uv (r2v offline test runtime)")
        return 0
    sub, rest = args[0], args[1:]
    if sub == "venv":
        rest, _ = _strip_opts(rest, _UV_VALUE_OPTS)
        return venv(rest[0] if rest else ".venv")
    if sub == "pip" and rest[:1] == ["install"]:
        return install(pip_requirements(rest[1:]), "uv pip install")
    if sub == "add":
        return install([a for a in rest if not a.startswith("-")], "uv add")
    if sub in ("init", "sync", "lock", "python", "cache") or (sub == "pip" and rest[:1] in (["sync"], ["list"])):
        note(f"skipped `uv {' '.join(args)}` (the judge's environment is fixed)")
        return 0
    if sub == "run":
        cmd, withs = _strip_opts(rest, _UV_VALUE_OPTS)
        return run_command(cmd, withs)
    if sub == "tool" and rest[:1] == ["run"]:
        return uvx(rest[1:])
    note(f"`uv {' '.join(args)}` is not supported offline")
    return 2


def uvx(args: list[str]) -> int:
    cmd, withs = _strip_opts(args, _UV_VALUE_OPTS)
    if cmd:
        cmd[0] = _req_name(cmd[0]) if os.path.sep not in cmd[0] else cmd[0]  # `uvx pytest==8.4.1` -> pytest
    return run_command(cmd, withs)


_UV_INSTALLER = """#!/bin/sh
# r2v offline test runtime: the uv installer ({url}) was not downloaded; uv is provided by the runtime.
echo "r2v offline test runtime: skipped the uv installer from {url} (uv is provided)" >&2
mkdir -p "$HOME/.local/bin" && : > "$HOME/.local/bin/env"
for t in uv uvx; do printf '#!/bin/sh\nexec "%s/bin/%s" "$@"\n' "{rt}" "$t" > "$HOME/.local/bin/$t"; chmod +x "$HOME/.local/bin/$t"; done
"""


def curl(args: list[str]) -> int:
    urls = [a for a in args if re.match(r"https?://", a)]
    output = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "--output")), None)
    if urls and all(re.match(r"https?://(astral\.sh|github\.com/astral-sh)/uv", u) for u in urls):
        script = _UV_INSTALLER.format(url=urls[0], rt=RT)
        if output:
            with open(output, "w") as f:
                f.write(script)
        else:
            sys.stdout.write(script)
        return 0
    host = re.sub(r"^https?://([^/:]+).*", r"\1", urls[0]) if urls else "?"
    print(f"curl: (6) Could not resolve host: {host} (the judge runs offline)", file=sys.stderr)
    return 6


def apt(args: list[str]) -> int:
    """Skipped, and said so: the host's tools serve (a task's build lists the packages the host lacks)."""
    rest = [a for a in args if not a.startswith("-")]
    if rest[:1] == ["install"]:
        note(f"skipped `apt-get install {' '.join(rest[1:])}` (no network; the host's tools serve)")
    else:
        note(f"skipped `apt-get {' '.join(args)}`")
    return 0


def main(argv: list[str]) -> int:
    # The wrapper started this interpreter in the runtime folder; drop relative sys.path entries (they would
    # resolve in the agent's folder) and go back to the script's working directory.
    sys.path[:] = [p for p in sys.path if os.path.isabs(p)]
    os.chdir(os.environ.pop("R2V_CWD", None) or os.getcwd())
    name, args = os.path.basename(argv[1]), argv[2:]
    if name in ("pytest", "py.test"):
        return run_pytest(args, append_cwd=False)
    if name.startswith("python"):
        return python(args)
    if name in ("pip", "pip3"):
        return pip(args)
    if name in NOOPS:
        return noop(name, args)
    handlers = {"uv": uv, "uvx": uvx, "curl": curl, "wget": curl, "apt-get": apt, "apt": apt}
    return handlers[name](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
