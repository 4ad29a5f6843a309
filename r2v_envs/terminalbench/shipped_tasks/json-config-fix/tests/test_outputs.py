import json, subprocess, sys

def test_config_values():
    cfg = json.load(open("config.json"))
    assert cfg == {"name": "inventory-api", "port": 8080, "workers": 4, "debug": False}

def test_service_check_passes():
    r = subprocess.run([sys.executable, "service.py", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "config ok: inventory-api on port 8080" in r.stdout
