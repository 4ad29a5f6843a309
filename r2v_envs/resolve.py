"""One env resolver: a registered id, Gymnasium's ``module:Id``, a ``module:callable`` or the URL of ``r2v serve``.

Every place that turns an env spec into an env (the runner's env slots and task listing, ``r2v eval``'s grid,
Table 1's evaluation, ``r2v rl``, :func:`r2v_envs.perturb`) calls :func:`open_env`, so each takes the same specs:

* ``R2V/TextWorld-v0``: ``gym.make(spec, **kwargs)``;
* ``mypkg.envs:MyEnv-v0``: the module is imported (it registers the id; worker processes do the same), then made;
  ``mypkg.envs:make_env`` (an attribute of the module, not an id): ``make_env(**kwargs)``, which must return a
  ``gymnasium.Env``;
* ``http(s)://host:port`` or ``ws(s)://host:port``: a :class:`~r2v_envs.serving.client.RemoteEnv` session on that
  ``r2v serve`` server. A served env's own arguments (perturbations, suite...) were fixed by the server's
  ``--env-kwargs`` at launch: the resolver reads them from ``GET /r2v/info`` and raises
  :class:`~r2v_envs.errors.ServedEnvMismatchError` when an argument the caller asks for differs. ``seed=z`` becomes
  the seed of every reset without one (the in-process ``gym.make(id, seed=z)`` plays the same episodes: the served
  env is made without a seed, so a seeded reset sets its z) and ``max_episode_steps`` a client-side ``TimeLimit``.

This module is light: OpenEnv and its WebSocket client load only when a URL is opened.

Example:
    >>> is_url("http://127.0.0.1:8000"), is_url("R2V/TextWorld-v0")
    (True, False)
    >>> env = open_env("R2V/Scripted-v0", task_id="scripted-1")   # an id: gym.make
    >>> type(env.unwrapped).__name__, env_task_ids("R2V/Scripted-v0", "test")[:1]
    ('ScriptedTextEnv', ['scripted-8'])
    >>> open_env("R2V/NoSuchEnv-v0")
    Traceback (most recent call last):
    ...
    gymnasium.error.NameNotFound: Environment `NoSuchEnv` doesn't exist in namespace R2V.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from r2v_envs.core import DEFAULT, SPLITS
from r2v_envs.errors import (
    BackendUnavailableError,
    EnvSpecError,
    ServedEnvMismatchError,
    ServerUnavailableError,
)
from r2v_envs.perturbations.composite import parse_perturbations
from r2v_envs.serving.config import TOKEN_ENV

URL_SCHEMES = ("http://", "https://", "ws://", "wss://")
INFO_PATH = "/r2v/info"
# RemoteEnv's own arguments (how to talk to the server); every other keyword is an env argument to check
CLIENT_ARGS = ("token", "message_timeout_s", "connect_timeout_s", "reset_options")


def is_url(spec: Any) -> bool:
    """Whether an env spec names a server (a URL) rather than a registered id."""
    return isinstance(spec, str) and spec.lower().startswith(URL_SCHEMES)


def require_server_stack() -> None:
    """Raise a :class:`~r2v_envs.errors.BackendUnavailableError` naming the extra when openenv is missing."""
    if importlib.util.find_spec("openenv") is None:
        raise BackendUnavailableError("serve", "install the serve extra: pip install -e '.[serve]' (openenv)")


def split_spec(spec: str) -> tuple[str, str]:
    """``(module, name)`` of ``module:name`` (module ``""`` for a bare id); a URL is not split."""
    if is_url(spec):
        return "", spec
    module, _, name = spec.rpartition(":")
    return module, name


def open_env(spec: str, **kwargs: Any) -> gym.Env:
    """The env ``spec`` names, made with ``kwargs`` (see the module doc for the specs and what a URL does with
    ``seed``, ``max_episode_steps`` and the other keywords). Bad specs raise typed errors."""
    if not isinstance(spec, str) or not spec:
        raise EnvSpecError(f"an env spec is an id, 'module:Id', 'module:callable' or a URL, got {spec!r}")
    if is_url(spec):
        return _open_served(spec, **kwargs)
    module, name = split_spec(spec)
    if module:
        mod = importlib.import_module(module)  # registers the id, for a user's own env
        if name not in gym.registry and hasattr(mod, name):
            made = getattr(mod, name)(**kwargs)
            if not isinstance(made, gym.Env):
                raise EnvSpecError(f"{spec} returned {type(made).__name__}, not a gymnasium.Env")
            return made
    gym.spec(name)  # Gymnasium's own typed error (NameNotFound, with its hint) for an unknown id
    return gym.make(name, **kwargs)


def env_splits(spec: str, splits: tuple[str, ...] = SPLITS, **kwargs: Any) -> dict[str, list[str]]:
    """The task ids of each of ``splits`` (``"all"``: every task) of the env ``spec`` names, from one env: the one
    task listing of the runner, ``r2v eval``, Table 1 and the pipeline. Which tasks exist does not depend on the
    perturbations, so they are not part of the question (a local env is built clean; a served one is not checked
    against them)."""
    kwargs = {k: v for k, v in kwargs.items() if k != "perturbations"}
    env = open_env(spec, **({} if is_url(spec) else {"seed": 0, "perturbations": None}), **kwargs)
    try:
        return {s: list(env.unwrapped.task_ids(s)) for s in splits}
    finally:
        env.close()


def env_task_ids(spec: str, split: str, **kwargs: Any) -> list[str]:
    """The task ids of ``split`` of the env ``spec`` names (:func:`env_splits` of one split)."""
    return env_splits(spec, (split,), **kwargs)[split]


# ------------------------------------------------------------------------------------------------ served envs
_INFO: dict[tuple[str, str | None], dict[str, Any]] = {}
_INFO_LOCK = threading.Lock()


def http_base(url: str) -> str:
    """A server URL as its HTTP base (``ws://h:p/`` -> ``http://h:p``)."""
    url = url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.lower().startswith(ws):
            url = http + url[len(ws):]
    return url


def served_info(url: str, token: str | None = None) -> dict[str, Any]:
    """The server's ``GET /r2v/info`` (env id, env kwargs, effective perturbations, oracle keys on or off, step cap,
    task ids per split), fetched once per process and URL (a server's setting is fixed at launch)."""
    import os
    import urllib.error
    import urllib.request

    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    key = (http_base(url), token)
    with _INFO_LOCK:
        if key in _INFO:
            return _INFO[key]
    request = urllib.request.Request(key[0] + INFO_PATH, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            info = json.loads(r.read())
    except urllib.error.HTTPError as e:
        why = {401: "wrong or missing token (--token or $R2V_SERVE_TOKEN)",
               404: "no /r2v/info: is it an r2v serve server of this version?"}.get(e.code, f"HTTP {e.code}")
        raise ServerUnavailableError(f"{key[0]}{INFO_PATH}: {why}") from None
    except (OSError, ValueError) as e:
        raise ServerUnavailableError(f"cannot read {key[0]}{INFO_PATH}: {e}") from None
    with _INFO_LOCK:
        _INFO[key] = info
    return info


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _same_perturbations(a: Any, b: Any) -> bool:
    """Two ``perturbations=`` specifications that build the same wrappers ("composite" and its explicit list)."""
    if _same(a, b):
        return True
    try:
        return _same(parse_perturbations(a), parse_perturbations(b))
    except Exception:  # noqa: BLE001 - an unparsable request differs from what the server builds
        return False


def check_served(url: str, info: Mapping[str, Any], wanted: Mapping[str, Any], seeded: bool = False,
                 max_episode_steps: int | None = None) -> None:
    """Raise :class:`~r2v_envs.errors.ServedEnvMismatchError` when the server at ``url`` (its ``/r2v/info``) does not
    build the env ``wanted`` asks for: another argument value, a z fixed at launch while the caller seeds episodes, or
    a step cap above the server's own."""
    served = dict(info.get("env_kwargs") or {})
    env_id = info.get("env_id", "?")

    def mismatch(what: str, fixed: Mapping[str, Any]) -> ServedEnvMismatchError:
        launch = json.dumps({**{k: v for k, v in served.items() if k != "seed"}, **fixed}, default=str)
        return ServedEnvMismatchError(f"{url} serves {env_id} with {what}: a served env's arguments are fixed at "
                                      f"launch, so launch a server per setting, e.g. r2v serve --env {env_id} "
                                      f"--oracle --env-kwargs '{launch}'")

    for key, value in wanted.items():
        if key == "perturbations":
            want = info.get("default_perturbations") if value == DEFAULT else value
            if not _same_perturbations(want, info.get("perturbations")):
                raise mismatch(f"perturbations={info.get('perturbations')!r}, not {value!r}", {key: value})
        elif key not in served:
            raise mismatch(f"the env's default {key}, not {key}={value!r}", {key: value})
        elif not _same(served[key], value):
            raise mismatch(f"{key}={served[key]!r}, not {value!r}", {key: value})
    if seeded and served.get("seed") is not None:
        raise mismatch(f"seed={served['seed']!r} (one z for every episode) while episodes are seeded one by one", {})
    cap = info.get("max_episode_steps")
    if max_episode_steps is not None and cap is not None and max_episode_steps > cap:
        raise mismatch(f"at most {cap} steps per episode, not {max_episode_steps}", {"max_episode_steps": max_episode_steps})


def check_url(url: str, **kwargs: Any) -> dict[str, Any]:
    """The ``/r2v/info`` of the server at ``url``, once :func:`check_served` has found that it builds the env
    ``open_env(url, **kwargs)`` asks for; no session is opened (``r2v eval`` checks every cell this way first)."""
    wanted = {k: v for k, v in kwargs.items() if k not in CLIENT_ARGS and k not in ("seed", "max_episode_steps")}
    info = served_info(url, kwargs.get("token"))
    check_served(url, info, wanted, seeded=kwargs.get("seed") is not None,
                 max_episode_steps=kwargs.get("max_episode_steps"))
    return info


def _open_served(url: str, **kwargs: Any) -> gym.Env:
    require_server_stack()
    from r2v_envs.serving.client import RemoteEnv

    info = check_url(url, **kwargs)
    client = {k: kwargs.pop(k) for k in CLIENT_ARGS if k in kwargs}
    seed, steps = kwargs.pop("seed", None), kwargs.pop("max_episode_steps", None)
    env: gym.Env = RemoteEnv(url, seed=seed, served=info, **client)
    if steps is not None:  # the runner's step cap, applied here as gym.make applies it in process (outermost)
        env = gym.wrappers.TimeLimit(env, max_episode_steps=int(steps))
    return env


__all__ = ["CLIENT_ARGS", "URL_SCHEMES", "check_served", "check_url", "env_splits", "env_task_ids", "http_base", "is_url", "open_env",
           "require_server_stack", "served_info", "split_spec"]
