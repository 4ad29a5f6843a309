"""Bad input never takes the server down: each bad request of the battery gets a typed error answer on its own
session (or connection), the server stays healthy, and a witness session in the middle of an episode is unaffected
(its episode still equals the in-process one, byte for byte)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from r2v_envs.serving.app import serve_in_thread
from r2v_envs.serving.client import RemoteEnv
from r2v_envs.serving.config import ServeConfig
from r2v_envs.serving.errors import RemoteEnvError
from r2v_envs.serving.wire import MAX_ACTION_CHARS
from tests.support.serving import env_kwargs, reference_episode, wire

pytestmark = pytest.mark.timeout(300)
ENV = "R2V/Scripted-v0"


@pytest.fixture(scope="module")
def server():
    cfg = ServeConfig(env=ENV, env_kwargs=json.dumps(env_kwargs(ENV)), port=0, max_message_mb=1.0)
    with serve_in_thread(cfg) as srv:
        yield srv


def _http(url: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=body, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _ws_exchange(url: str, frames: list[str]) -> list[dict]:
    """Raw frames on one /ws connection (what no well-behaved client sends), one answer each."""
    from websockets.sync.client import connect

    with connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:
        out = []
        for f in frames:
            ws.send(f)
            out.append(json.loads(ws.recv(timeout=30)))
        return out


def _expect(kind: str, fn, *args, **kwargs) -> RemoteEnvError:
    with pytest.raises(RemoteEnvError) as e:
        fn(*args, **kwargs)
    assert e.value.kind == kind, str(e.value)
    return e.value


def test_the_bad_input_battery_leaves_the_server_and_other_sessions_alone(server):
    url = server.url
    actions, ref = reference_episode(ENV, env_kwargs(ENV), seed=3, max_steps=8)
    witness = RemoteEnv(url)
    seen = [witness.reset(seed=3)]
    bad = RemoteEnv(url)

    def battery():
        # typed errors through the client
        yield lambda: _expect("ResetNeededError", bad.step, "look")
        yield lambda: _expect("UnknownChoiceError", bad.reset, seed=1, options={"task_id": "no-such-task"})
        yield lambda: _expect("BadRequestError", bad.reset, options={"sede": 1})
        yield lambda: _expect("BadRequestError", bad.reset, options={"task_index": "two"})
        yield lambda: _expect("ValidationError", bad._call, bad._client.step, _raw_action(5))  # a non-string action
        yield lambda: _expect("ValidationError", bad.step, "x" * (MAX_ACTION_CHARS + 1))  # oversized
        yield lambda: _ended_then_step(bad)
        # malformed frames on a raw connection: typed answers, the connection stays usable
        yield lambda: _check_frames(url)
        # a frame over the server's message limit closes that connection only
        yield lambda: _too_big(url)
        # malformed HTTP requests
        yield lambda: _check_http(url)

    for i, attack in enumerate(battery()):
        attack()
        assert _http(url, "/health") == (200, {"status": "healthy"}), f"server down after attack {i}"
        if len(seen) <= len(actions):  # the witness takes one step of its episode between attacks
            seen.append(witness.step(actions[len(seen) - 1]))
    while len(seen) <= len(actions):
        seen.append(witness.step(actions[len(seen) - 1]))
    assert [wire(t[-1]) for t in seen] == [wire(t[-1]) for t in ref]  # infos
    assert [t[0] for t in seen] == [t[0] for t in ref]  # observation texts
    witness.close()
    bad.close()


class _raw_action(dict):
    """An action the typed client would refuse to build: sent as-is ({"text": 5})."""

    def __init__(self, value):
        super().__init__(text=value)

    def model_dump(self, **_):
        return dict(self)


def _ended_then_step(env: RemoteEnv) -> None:
    _, info = env.reset(seed=3)
    done = False
    actions, _ = reference_episode(ENV, env_kwargs(ENV), seed=3, max_steps=8)
    for a in actions:
        *_, term, trunc, info = env.step(a)
        done = term or trunc
    assert done
    _expect("EpisodeOverError", env.step, "look")


def _check_frames(url: str) -> None:
    answers = _ws_exchange(url, ["{not json", json.dumps({"type": "teleport"}), json.dumps({"type": "step"}),
                                 json.dumps({"type": "step", "data": {"text": "look", "extra": 1}}),
                                 json.dumps({"type": "reset", "data": {"seed": "abc"}}),
                                 json.dumps({"type": "reset", "data": {"seed": 1}})])
    codes = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]
    assert codes == ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "VALIDATION_ERROR", "EXECUTION_ERROR",
                     "observation"], answers
    assert answers[4]["data"]["message"].startswith("[BadRequestError]")


def _too_big(url: str) -> None:
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed):
        _ws_exchange(url, [json.dumps({"type": "step", "data": {"text": "x" * (2 << 20)}})])


def _check_http(url: str) -> None:
    assert _http(url, "/step", b"garbage")[0] == 422
    assert _http(url, "/step", b'{"action": {"text": 5}}')[0] == 422
    status, body = _http(url, "/step", b'{"action": {"text": "look"}}')  # stateless: a fresh env, never reset
    assert (status, body["error"]["kind"]) == (409, "ResetNeededError")
    status, body = _http(url, "/reset", b'{"task_id": "no-such-task"}')
    assert (status, body["error"]["kind"]) == (400, "UnknownChoiceError")
