"""r2v's server and client import OpenEnv without its Gradio web UI (r2v_envs/serving/openenv_api.py): Gradio was 6.1
s of the 7.9 s that importing the server cost, and every `r2v serve` start and every client process paid it."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
import r2v_envs.serving.app, r2v_envs.serving.client
import openenv.core.env_server as server
loaded = "gradio" in sys.modules
import gradio  # still importable afterwards
print(json.dumps({"gradio_loaded_by_r2v": loaded, "web_ui": server.create_web_interface_app is not None,
                  "gradio_after": gradio.__name__}))
"""


def test_the_server_and_client_load_without_gradio_and_leave_it_importable():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"gradio_loaded_by_r2v": False, "web_ui": False, "gradio_after": "gradio"}, seen
