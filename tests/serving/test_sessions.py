"""Sessions of `r2v serve`: many in parallel, a capacity limit, a killed client's env freed (Terminal-Bench's
sandbox included), an idle session reaped, and the bearer token."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from r2v_envs.serving.app import serve_in_thread
from r2v_envs.serving.client import RemoteEnv
from r2v_envs.serving.config import ServeConfig
from r2v_envs.serving.errors import RemoteEnvError
from tests.support.serving import env_kwargs

pytestmark = pytest.mark.timeout(300)
ENV = "R2V/Scripted-v0"
KW = json.dumps(env_kwargs(ENV))

# A client in its own process that speaks the protocol by hand, stops mid-episode and waits to be killed.
_CLIENT = """
import json, sys, time
from websockets.sync.client import connect
ws = connect(sys.argv[1].replace("http", "ws") + "/ws")
ws.send(json.dumps({"type": "reset", "data": {"seed": 1}})); json.loads(ws.recv())
ws.send(json.dumps({"type": "step", "data": {"text": sys.argv[2]}})); json.loads(ws.recv())
print("mid-episode", flush=True)
time.sleep(600)
"""


def _sessions(url: str) -> dict:
    with urllib.request.urlopen(url + "/r2v/sessions", timeout=10) as r:
        return json.loads(r.read())


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sessions_beyond_the_limit_are_refused_and_the_others_go_on():
    with serve_in_thread(ServeConfig(env=ENV, env_kwargs=KW, port=0, max_sessions=2)) as srv:
        a, b, c = RemoteEnv(srv.url), RemoteEnv(srv.url), RemoteEnv(srv.url)
        a.reset(seed=1)
        b.reset(seed=2)
        with pytest.raises(RemoteEnvError) as e:
            c.reset(seed=3)
        assert e.value.code == "CAPACITY_REACHED"
        assert a.step("look")[0] and b.step("look")[0]
        a.close()
        _wait_for(lambda: _sessions(srv.url)["live"] == 1, 10, "a's env freed")
        c2 = RemoteEnv(srv.url)
        assert c2.reset(seed=3)[0]  # a's slot is free again
        for env in (b, c, c2):
            env.close()


@pytest.mark.parametrize("env_id,action", [(ENV, "go east"),
                                           pytest.param("R2V/TerminalBench-v0", "run echo hi > /app/mark.txt",
                                                        marks=pytest.mark.slow)])
def test_a_killed_client_frees_its_env(env_id, action):
    # the envs live in the server's env worker processes: a Terminal-Bench sandbox is seen as its workspace folder
    # on disk (r2v-tb-<task>-*), made when the session's episode started and removed when its env is freed
    task = env_kwargs(env_id).get("task_id", "")
    workspaces = lambda: set(Path(tempfile.gettempdir()).glob(f"r2v-tb-{task}-*"))  # noqa: E731
    cfg = ServeConfig(env=env_id, env_kwargs=json.dumps(env_kwargs(env_id)), port=0, check_env=False)
    before = workspaces()
    with serve_in_thread(cfg) as srv:
        proc = subprocess.Popen([sys.executable, "-c", _CLIENT, srv.url, action], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "mid-episode"
            assert _sessions(srv.url)["live"] == 1
            sandboxes = workspaces() - before
            if env_id == "R2V/TerminalBench-v0":
                assert len(sandboxes) == 1 and all(p.is_dir() for p in sandboxes)
        finally:
            proc.kill()
            proc.wait()
        book = _wait_for(lambda: (b := _sessions(srv.url))["live"] == 0 and b, 20, "the killed client's env freed")
        assert book["closed"] == book["opened"]
        _wait_for(lambda: not any(p.exists() for p in sandboxes), 20, "the sandbox's workspace removed")


def test_an_idle_session_is_reaped():
    with serve_in_thread(ServeConfig(env=ENV, env_kwargs=KW, port=0, idle_timeout_s=1.0)) as srv:
        idle = RemoteEnv(srv.url)
        idle.reset(seed=1)
        _wait_for(lambda: _sessions(srv.url)["live"] == 0, 15, "the idle session reaped")  # reaper: every 5 s
        with pytest.raises(RemoteEnvError) as e:
            idle.step("look")
        assert e.value.kind == "SessionClosedError"
        idle.close()


def test_a_token_guards_every_endpoint_but_health(monkeypatch):
    monkeypatch.setenv("R2V_SERVE_TOKEN", "s3cret")
    with serve_in_thread(ServeConfig(env=ENV, env_kwargs=KW, port=0)) as srv:
        with urllib.request.urlopen(srv.url + "/health", timeout=10) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(srv.url + "/schema", timeout=10)
        assert e.value.code == 401
        with pytest.raises(RemoteEnvError) as err:
            RemoteEnv(srv.url, token="wrong").reset(seed=1)
        assert err.value.kind == "ConnectionError"
        env = RemoteEnv(srv.url)  # the token from $R2V_SERVE_TOKEN
        assert env.reset(seed=1)[0]
        env.close()
