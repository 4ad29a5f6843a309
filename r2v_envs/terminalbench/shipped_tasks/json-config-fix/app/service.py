import json
import sys


def check(path="config.json"):
    with open(path) as f:
        cfg = json.load(f)
    if not isinstance(cfg.get("port"), int):
        raise SystemExit(f"config error: port must be an integer, got {cfg.get('port')!r}")
    if cfg.get("debug") is not False:
        raise SystemExit("config error: debug must be false in production")
    return cfg


if __name__ == "__main__":
    cfg = check()
    if "--check" in sys.argv:
        print(f"config ok: {cfg['name']} on port {cfg['port']}")
