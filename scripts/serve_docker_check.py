"""Run the r2v-serve image for four ids and play an episode of each from the host (scripts/serve_docker.sh).

Each container serves on the host's network, bound to 127.0.0.1, with a token. TextWorld and Scripted episodes must
equal the same episodes played in process on the host, byte for byte; Terminal-Bench and ALFWorld must reset and
step. Prints one JSON object; exits 1 if a check failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from r2v_envs.serving.client import RemoteEnv  # noqa: E402
from tests.support.serving import free_port, play, reference_episode, wait_healthy, wire  # noqa: E402

IMAGE = os.environ.get("R2V_SERVE_IMAGE", "r2v-serve")
CASES = [("R2V/TextWorld-v0", {"suite": "small", "task_id": "tw-cooking-medium-001"}, "look"),
         ("R2V/Scripted-v0", {"task_id": "scripted-1"}, "look"),
         ("R2V/TerminalBench-v0", {"backend": "local", "task_id": "greeting-cli"}, "run echo hello"),
         ("R2V/ALFWorld-v0", {"source": "offline", "n_games": 6}, "look")]
BYTE_IDENTICAL = {"R2V/TextWorld-v0", "R2V/Scripted-v0"}  # the others: reset and step (their data is made in the image)


def check(env_id: str, kw: dict, action: str) -> dict:
    port = free_port()
    name = f"r2v-serve-check-{port}"
    t0 = time.monotonic()
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--network", "host", IMAGE, "--host", "127.0.0.1",
                    "--port", str(port), "--env", env_id, "--env-kwargs", json.dumps(kw), "--token", "check"],
                   check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout_s=300)
        row: dict = {"start_s": round(time.monotonic() - t0, 1)}
        env = RemoteEnv(url, token="check")
        if env_id in BYTE_IDENTICAL:
            actions, ref = reference_episode(env_id, kw, 7, 6)
            got = play(lambda: env.reset(seed=7), env.step, actions)
            row.update(steps=len(actions), ok=[wire(t) for t in got] == [wire(t) for t in ref])
        else:
            _, info = env.reset(seed=0)
            obs, *_ = env.step(action)
            row.update(task_id=info["task_id"], ok=bool(info["goal"]) and isinstance(obs, str))
        env.close()
        return row
    except Exception as e:  # noqa: BLE001 - reported, with the container's log
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False).stderr[-1500:]
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300], "log": logs}
    finally:
        subprocess.run(["docker", "stop", "-t", "5", name], capture_output=True, check=False)


if __name__ == "__main__":
    results = {env_id: check(env_id, kw, action) for env_id, kw, action in CASES}
    print(json.dumps(results, indent=1))
    sys.exit(0 if all(r["ok"] for r in results.values()) else 1)
