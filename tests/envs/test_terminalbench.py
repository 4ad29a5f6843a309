"""R2V/TerminalBench-v0: Terminal-Bench-format tasks in the local sandbox (real bash, real pytest judge)."""

from __future__ import annotations

import gc
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.errors import InvalidActionError, UnknownChoiceError
from r2v_envs.terminalbench.backends import LocalBackend, base, docker, make_backend
from r2v_envs.terminalbench.env import USAGE, truncate_output
from r2v_envs.terminalbench.judge import RUNTIME_MOUNT, parse_pytest_summary, run_tests
from r2v_envs.terminalbench.judge import tests_passed as all_passed
from r2v_envs.terminalbench.judge.phase import JUDGE_DIR
from r2v_envs.terminalbench.task import SHIPPED_TASKS_DIR, TaskFormatError, load_suite, load_task
from tests.support.procs import processes_with
from tests.support.terminalbench import play

pytestmark = pytest.mark.timeout(120)
SEED = 0
SUITE = load_suite()


def make(**kw):
    kw.setdefault("perturbations", None)
    kw.setdefault("backend", "local")
    return gym.make("R2V/TerminalBench-v0", seed=SEED, **kw)


@pytest.fixture(scope="module")
def env():
    e = make(split="all", max_episode_steps=40)
    yield e
    e.close()


def test_shipped_suite_format():
    assert len(SUITE) >= 12
    for task in SUITE.values():
        assert task.instruction and task.solution and task.tests_dir.is_dir()
        assert (task.path / "Dockerfile").is_file() and (task.path / "docker-compose.yaml").is_file()
        assert task.workdir == "/app" and task.max_test_timeout_s > 0
        assert task.expert_actions()[-1] == "mark_task_complete"
    assert {"c-build-fix", "git-history-repair", "python-median-bug", "json-config-fix"} <= set(SUITE)


@pytest.mark.parametrize("task_id", sorted(SUITE))
def test_expert_wins_every_shipped_task(env, task_id):
    episode = play(env, task_id)
    info = episode.info
    assert info["won"] and episode.reward == 1.0 and info["score"] == 1.0, info.get("test_output")
    assert info["test_results"] and all_passed(info["test_results"])
    assert all(o.startswith("New Terminal Output:") for o in episode.observations[1:-1])
    assert info["channel"] == "terminal"


@pytest.mark.parametrize("task_id", ["c-build-fix", "python-median-bug"])
def test_wrong_action_sequences_fail(env, task_id):
    obs, info = env.reset(options={"task_id": task_id})
    env.step("run ls -la")
    obs, reward, terminated, truncated, info = env.step("mark_task_complete")
    assert terminated and not info["won"] and info["lost"] and reward == 0.0
    assert info["test_results"] and "failed" in info["test_results"].values()
    assert env.step("run ls")[2]  # the episode stays over


def test_session_state_timeouts_and_feedback(env):
    env.reset(options={"task_id": "word-frequency"})
    obs, *_ = env.step("run mkdir -p sub && cd sub && export GREETING=hi")
    obs, *_ = env.step("run pwd; echo $GREETING")
    assert "/sub\nhi" in obs and obs.rstrip().endswith("sub#")
    obs, *_ = env.step("run cat does-not-exist")
    assert "No such file or directory" in obs and "[exit code 1]" in obs
    start = time.monotonic()
    obs, reward, terminated, _, info = env.step("run[timeout=1] sleep 30")
    assert time.monotonic() - start < 5 and "timed out after 1 s" in obs and not terminated
    obs, *_ = env.step("run seq 1 100000")
    assert "characters omitted" in obs and "\n100000\n" in obs and len(obs) < 5000
    for bad in ("dance", "run", "run   "):
        obs, reward, terminated, _, info = env.step(bad)
        assert USAGE in obs and not terminated and reward == 0.0
    with pytest.raises(InvalidActionError):
        env.unwrapped.step(42)


def test_agent_time_budget_ends_the_episode(tmp_path):
    task = tmp_path / "suite" / "tiny"
    shutil.copytree(SHIPPED_TASKS_DIR / "greeting-cli", task)
    (task / "task.yaml").write_text("instruction: Do nothing.\nmax_agent_timeout_sec: 1\n")
    e = make(tasks_dir=tmp_path / "suite", split="all")  # any directory of Terminal-Bench tasks
    e.reset()
    obs, reward, terminated, _, info = e.step("run sleep 3")
    assert terminated and "time budget exhausted" in obs and not info["won"]
    e.close()




def test_hostile_commands_are_contained(env, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    env.reset(options={"task_id": "greeting-cli"})
    isolation = env.unwrapped.backend.isolation
    token = secrets.token_hex(6)
    start = time.monotonic()
    # fork bomb: stopped by RLIMIT_NPROC (unprivileged uid) and the deadline; the tree is killed
    obs, *_ = env.step(f"run[timeout=3] bomb_{token}() {{ bomb_{token} | bomb_{token} & }}; bomb_{token}")
    # setsid escaper: a grandchild in its own session must not outlive the command
    obs, *_ = env.step(f"run[timeout=3] setsid sleep 300 {token} >/dev/null 2>&1 < /dev/null & echo started")
    assert "started" in obs
    time.sleep(0.3)
    assert processes_with(token) == []
    assert time.monotonic() - start < 15
    obs, *_ = env.step("run[timeout=10] rm -rf --no-preserve-root / 2>/dev/null; echo still-here")
    assert "still-here" in obs and canary.read_text() == "alive"
    assert Path(shutil.which("python3") or "/usr/bin/python3").exists()
    if isolation in ("bwrap", "unshare"):  # network namespace without interfaces
        obs, *_ = env.step("run[timeout=10] python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), "
                           "timeout=3); print('CONNECTED')\"")
        assert "\nCONNECTED" not in obs and ("unreachable" in obs.lower() or "error" in obs.lower())
    obs, *_ = env.step("run echo recovered")
    assert "recovered" in obs  # the session still works


def test_commands_cannot_reach_the_scratch_copy_nor_its_links_be_followed(env, tmp_path):
    """The scratch copy lives on the host; commands see its folders only as mounts (/app, /srv, ...), never by
    its own path, so no command can put a link in place of a mount's source. A link put there anyway (by a
    Dockerfile's step, or under a weaker isolation level) is removed, not followed, and the command file is
    never written through one."""
    env.reset(options={"task_id": "greeting-cli"})
    backend = env.unwrapped.backend
    if backend.isolation != "bwrap":
        pytest.skip("bind mounts need bubblewrap")
    scratch, token = backend.scratch, secrets.token_hex(6)
    obs, *_ = env.step("run awk '$5==\"/app\"{print $4}' /proc/self/mountinfo")
    assert str(scratch / "app") in obs  # an attacker learns the path...
    obs, *_ = env.step(f"run ls {scratch}/app {scratch}/root 2>&1 | sed s/^/{token}:/")
    assert obs.count(f"{token}:ls: cannot access") == 2  # ...but cannot reach it
    host = tmp_path / "host"
    host.mkdir()
    secret = host / f"secret-{secrets.token_hex(6)}"
    secret.write_text(token)
    (host / "target.txt").write_text("untouched")
    host.chmod(0o755)
    secret.chmod(0o644)
    shutil.rmtree(scratch / "root" / "srv")
    (scratch / "root" / "srv").symlink_to(host)
    obs, *_ = env.step("run ls -a /srv; cat /srv/*")
    assert token not in obs and secret.name not in obs
    (scratch / ".r2v" / "cmd.sh").unlink()
    (scratch / ".r2v" / "cmd.sh").symlink_to(host / "target.txt")
    obs, *_ = env.step("run echo after-link")
    assert "\nafter-link" in obs and (host / "target.txt").read_text() == "untouched"
    shutil.rmtree(scratch / ".r2v")
    (scratch / ".r2v").symlink_to(host)
    obs, *_ = env.step("run echo after-folder-link")
    assert "\nafter-folder-link" in obs and sorted(p.name for p in host.iterdir()) == sorted([secret.name, "target.txt"])


def test_each_episode_runs_as_a_user_of_its_own(env):
    """One unprivileged uid per episode (a fork bomb's count of processes cannot reach into the next episode), the
    same for all of its commands (the scratch copy is handed over once), shown to them as root, as in the task's
    container (the same seed gives the same bytes whatever uid the episode drew)."""
    if not env.unwrapped.backend.sandbox.drops_privileges:
        pytest.skip("the uid drop needs bubblewrap started by root")
    uids, seen = [], []
    for _ in range(2):
        env.reset(options={"task_id": "greeting-cli"})
        seen += [env.step("run id -u; stat -c %U:%u .; sleep 1 & cat /proc/$!/status | grep ^Uid")[0].splitlines()[2:5]
                 for _ in range(2)]
        uids.append(env.unwrapped.backend.scratch.stat().st_uid)  # what the host sees
    assert uids[0] != uids[1] and min(uids) > 0
    assert all(lines[:2] == ["0", "root:0"] for lines in seen), seen
    assert all(lines[2].split()[1] == "0" for lines in seen)  # uid 0 in its own namespace only


def test_an_env_dropped_without_close_leaves_no_sandbox_waiting():
    e = make(split="all")
    e.reset(options={"task_id": "word-frequency"})
    e.step("run true")
    backend = e.unwrapped.backend
    held = [backend.held.command, backend.held.test_run]
    pids = [h.proc.pid for h in held if h is not None]
    if backend.isolation == "bwrap":
        assert len(pids) == (2 if backend.sandbox.drops_privileges else 1)
    del e, backend, held
    gc.collect()
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_the_interpreter_exits_with_an_env_left_open():
    code = ("import gymnasium as gym, r2v_envs\n"
            "e = gym.make('R2V/TerminalBench-v0', seed=0, backend='local', split='all', perturbations=None)\n"
            "e.reset(options={'task_id': 'word-frequency'}); e.step('run true'); print('left open')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "left open\n", r.stderr


def test_every_script_runs_through_one_method():
    """benchmarks/terminal_sandbox.py measures a plain backend by overriding LocalBackend._run: commands and the
    test phase must all come through it."""
    seen = []

    class Recording(LocalBackend):
        def _run(self, call, prepared=None, meanwhile=None):
            seen.append(call.script)
            return super()._run(call, prepared, meanwhile)

    e = make(split="all", backend=Recording())
    e.reset(options={"task_id": "greeting-cli"})
    e.step("run echo hi")
    e.step("mark_task_complete")
    e.close()
    assert len(seen) == 2 and "cmd.sh" in seen[0] and "/tests/" in seen[1]


def test_sandboxes_set_up_ahead_change_nothing_but_time():
    """Each command runs in the sandbox set up while the previous one ran, the test phase under the daemon set
    up at reset; the episode's observations and verdict are those of sandboxes set up on demand."""
    runs = {}
    for ahead in (True, False):
        e = make(split="all", backend=LocalBackend(hold_ahead=ahead))
        backend = e.unwrapped.backend
        obs, info = e.reset(options={"task_id": "word-frequency"})
        observations, used = [obs], []
        for action in ["run echo $((6 * 7)) > n.txt; cd /tmp", "run pwd; cat /app/n.txt; cd /app",
                       "run cat < no-such-file", *[None] * 20]:
            held = backend.held.command
            obs, reward, terminated, _truncated, info = e.step(action or info["expert_action"])
            observations.append(obs)
            used.append(held is not None and held.used)
            if terminated:
                break
        runs[ahead] = (observations, reward, info["outcome"], info["judge"]["report"])
        if ahead and backend.isolation == "bwrap":
            assert all(used[1:]) and not used[0]  # the first command of the first episode: nothing to hold yet
        e.close()
        assert backend.held.command is None and backend.held.tests is None and backend.held.test_run is None
    assert runs[True] == runs[False] and runs[True][1] == 1.0  # two episodes, two scratch copies: same bytes
    assert "/tmp\n" in runs[True][0][2] and "42" in runs[True][0][2]
    assert "no-such-file: No such file or directory" in runs[True][0][3]  # no host path in the message


def test_same_seed_same_observations_under_default_perturbations():
    runs = []
    for _ in range(2):
        e = gym.make("R2V/TerminalBench-v0", seed=7, backend="local", split="all")
        episode = play(e, "json-to-csv")
        runs.append((episode.observations, [p["type"] for p in episode.info["perturbations"]], episode.reward))
        e.close()
    assert runs[0] == runs[1] and runs[0][2] == 1.0
    spec = gym.make("R2V/TerminalBench-v0", seed=7, backend="local").spec
    names = [w.name for w in spec.additional_wrappers]
    assert names == ["FlakyToolOutput", "DropObservationLines"]


def test_task_format_errors_and_judge(tmp_path):
    (tmp_path / "broken").mkdir()
    with pytest.raises(TaskFormatError):
        load_task(tmp_path / "broken")
    (tmp_path / "broken" / "task.yaml").write_text("instruction: ''\n")
    with pytest.raises(TaskFormatError):
        load_task(tmp_path / "broken")
    with pytest.raises(UnknownChoiceError):
        make(backend="kubernetes")
    out = "=== short test summary info ===\nPASSED t.py::a\nERROR t.py::b - boom\n=== 1 passed, 1 error ==="
    assert parse_pytest_summary(out) == {"t.py::a": "passed", "t.py::b": "error"}
    assert not all_passed(parse_pytest_summary(out))
    assert not all_passed(parse_pytest_summary("== 3 passed in 0.1s =="))  # no summary section: no pass
    assert truncate_output("abc", 100) == "abc"


JUNIT_PASS = (b'<testsuites><testsuite name="pytest"><testcase classname="test_outputs" name="test_greets"/>'
              b'</testsuite></testsuites>')


class FakeContainer:
    """Answers the Docker backend's calls like a container whose tests pass (the JUnit report says so)."""

    def __init__(self, junit=JUNIT_PASS, printed=b"=== short test summary info ===\nPASSED test_outputs.py::test_greets\n"):
        self.calls, self.junit, self.printed = [], junit, printed

    def exec_run(self, argv, **kw):
        self.calls.append(("exec", argv, kw))
        if argv[-1] == "cat /proc/1/task/1/children":
            return 0, b"7\n"
        if "bash /tests/" in argv[-1]:  # the test phase's script
            return 0, self.printed
        if argv[:4] == ["timeout", "-s", "KILL", "30"] and argv[4] == "bash" and "-c" in argv:
            return 0, f"hello\n\n{base.CWD_SENTINEL}/app\n".encode()
        if "command -v python3" in argv[-1]:
            return 0, b"/usr/local/bin/python3\n"
        return 0, b""

    def put_archive(self, path, data):
        self.calls.append(("put", path, len(data)))
        return True

    def get_archive(self, path):
        self.calls.append(("get", path))
        files = {"junit-1-2.xml": self.junit} if self.junit is not None else {}
        return [docker._tar(files)], {}

    def remove(self, force=False):
        self.calls.append(("remove", force))


class FakeClient:
    """Records what the Docker backend asks the SDK for (no engine runs here)."""

    def __init__(self):
        self.container = FakeContainer()
        self.run_kwargs = None
        self.images = self
        self.containers = self

    def build(self, path, tag, rm, network_mode=None):
        self.built = (path, tag, network_mode)
        if getattr(self, "fail_build", False):
            import docker.errors

            raise docker.errors.BuildError("apt-get update returned a non-zero code: 100",
                                           [{"stream": "Err:1 http://deb.debian.org bookworm InRelease\n"}])
        return type("Image", (), {"id": "sha256:abc"})(), []

    def run(self, image, **kw):
        self.run_kwargs = kw
        return self.container


def test_docker_backend_requests_an_isolated_container():
    client = FakeClient()
    backend = docker.DockerBackend(client=client)
    backend.start(SUITE["greeting-cli"])
    kw = client.run_kwargs
    assert kw["network_mode"] == "none" and kw["mem_limit"] and kw["pids_limit"] and kw["working_dir"] == "/app"
    # the offline test runtime is mounted read-only
    (src, mount), = kw["volumes"].items()
    assert mount == {"bind": RUNTIME_MOUNT, "mode": "ro"} and (Path(src) / "bin" / "uv").is_file()
    result = backend.run("echo hello", 30)
    assert result.output.strip() == "hello" and result.cwd == "/app" and result.exit_code == 0
    run = run_tests(backend)
    assert run.results == {"test_outputs::test_greets": "passed"}
    calls = [c for c in client.container.calls if c[0] == "exec"]
    cleanup = next(c[1][-1] for c in calls if "kill -9" in c[1][-1])
    assert " 1 7 " in cleanup  # strays killed (init and the keeper kept)
    assert any("rm -rf /tests" in c[1][-1] for c in calls)  # the phase's folders made fresh
    test_call = next(c for c in calls if "bash /tests/run-tests.sh" in c[1][-1])
    env = test_call[2]["environment"]
    assert env["PATH"].startswith(f"{RUNTIME_MOUNT}/bin:") and env["R2V_TEST_PYTHON"] == "/usr/local/bin/python3"
    assert env["R2V_JUDGE_OUT"] == f"{JUDGE_DIR}/out" and env["TEST_DIR"] == "/tests"
    backend.close()
    assert ("remove", True) in client.container.calls
    assert isinstance(make_backend("auto"), LocalBackend) or docker.docker_available()


def test_docker_verdict_comes_from_the_report_not_the_printed_summary():
    client = FakeClient()
    client.container = FakeContainer(junit=None)  # the script printed PASSED, but no report was written
    backend = docker.DockerBackend(client=client)
    backend.start(SUITE["greeting-cli"])
    run = run_tests(backend)
    assert run.results == {} and run.judge["printed_summary"] == {"test_outputs.py::test_greets": "passed"}
    assert not all_passed(run.results)


def test_docker_build_network_and_build_failure_is_typed():
    pytest.importorskip("docker")
    from r2v_envs.errors import TaskEnvironmentError

    client = FakeClient()
    docker.DockerBackend(client=client, build_network="host").start(SUITE["greeting-cli"])
    assert client.built[2] == "host" and client.run_kwargs["network_mode"] == "none"  # the task itself stays offline
    client.fail_build = True
    with pytest.raises(TaskEnvironmentError, match="build_network.*\n.*Err:1"):
        docker.DockerBackend(client=client).start(SUITE["c-build-fix"])
