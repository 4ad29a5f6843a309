"""``r2v view RUN_DIR [--out FILE.html] [--serve]`` (also ``python -m r2v_eval.view``): a run in the browser.

One self-contained HTML file per run (:mod:`r2v_eval.view.page`) for an ``r2v eval`` directory, an ``r2v pipeline``
run (its evaluation cells, methods side by side) or a bare runner directory (:mod:`r2v_eval.view.runs`):

* Summary: the run's report tables (SR with CIs per benchmark x perturbation, or per method and condition), its
  plots, its manifests (agent, config, versions, commit) and ``report.md``;
* Episodes: a filterable, sortable, paged list (benchmark, task, seed, perturbation, method, success, steps, LLM
  calls, cost, not-run kind);
* One episode, step by step (:mod:`r2v_eval.view.steps`): what the agent saw with that step's perturbation
  events marked on the text, the action, the SLM's candidates with log-probs, entropies and verifier scores, the
  router's probability against its threshold, the source (SLM, teacher), reward, every other step column and
  ``meta`` key, and the final observation and verdict (EvalPlus's, the Terminal-Bench judge's); for a pipeline
  run the same episode under every method, side by side.

The page opens from disk with no network; ``--serve`` serves it on 127.0.0.1 instead (a browser may refuse
very large local files).
"""

from __future__ import annotations

import functools
import http.server
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from r2v_eval.view.page import COMPRESS, write_page
from r2v_eval.view.runs import NotARunError

__all__ = ["ViewArgs", "main", "make_server", "serve", "view", "write_page"]


@dataclass
class ViewArgs:
    """Write a self-contained HTML viewer of a run directory (r2v eval, r2v pipeline or a runner directory)."""

    run: str
    """run directory"""
    out: str | None = None
    """HTML file to write (default: <run>/view.html)"""
    serve: bool = False
    """serve the page on 127.0.0.1 until interrupted"""
    port: int = 0
    """port of --serve (0: any free port)"""
    compress: str = "auto"
    """step data: auto (gzip when large), always, never"""

    def __post_init__(self) -> None:
        if self.compress not in COMPRESS:
            raise ValueError(f"--compress must be one of {COMPRESS}, got {self.compress!r}")


def view(args: ViewArgs) -> Path:
    """Write the page of ``args.run``; returns its path."""
    return write_page(args.run, args.out, args.compress)


def make_server(path: str | Path, port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """An HTTP server on 127.0.0.1 that answers with the page at ``path`` (at ``/`` and ``/<name>``) and nothing
    else, and the page's URL; call ``serve_forever``. The rest of the run directory stays unserved."""
    path = Path(path).resolve()
    handler = functools.partial(_PageHandler, path)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/{path.name}"


def serve(path: str | Path, port: int = 0) -> None:
    """Serve the page at ``path`` on 127.0.0.1 until interrupted (loopback only: a run may hold private text)."""
    httpd, url = make_server(path, port)
    print(f"serving {url} (Ctrl-C to stop)", file=sys.stderr)
    with httpd:
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


class _PageHandler(http.server.BaseHTTPRequestHandler):
    def __init__(self, page: Path, *args, **kwargs):
        self.page = page
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # the stdlib's hook name
        if self.path.split("?", 1)[0] not in ("/", f"/{self.page.name}"):
            self.send_error(404)
            return
        body = self.page.read_bytes()  # read per request: a rewritten page is served fresh
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # no request log on stderr
        pass


def main(argv: Sequence[str] | None = None) -> None:
    import tyro

    args = tyro.cli(ViewArgs, args=list(sys.argv[1:] if argv is None else argv), prog="r2v view",
                    description=__doc__, config=(tyro.conf.PositionalRequiredArgs,))
    try:
        path = view(args)
    except NotARunError as e:
        raise SystemExit(str(e)) from None
    print(path)
    if args.serve:
        serve(path, args.port)
