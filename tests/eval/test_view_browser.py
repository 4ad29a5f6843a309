"""``r2v view`` pages in a real headless Chromium: no console errors, the summary's numbers, an episode's steps on a
click, markup shown as text, and a screenshot of each page (under pytest's tmp dir).

Needs a Chromium binary (Debian: ``apt-get install -y chromium``); skipped with that reason when there is none."""

from __future__ import annotations

import json

import pytest

from r2v_eval.view import write_page
from tests.support.chromium import Chromium, find_browser
from tests.support.view_runs import IMG, NEEDS_HUMANEVAL, SCRIPT, eval_run, html_runner_run, verdict_run

pytestmark = [pytest.mark.skipif(find_browser() is None, reason="no Chromium binary on PATH (Debian: apt-get "
                                                                "install -y chromium; scripts/install.sh does it as root)"),
              pytest.mark.slow]  # end to end: headless Chromium


@pytest.fixture(scope="module")
def browser():
    with Chromium() as b:
        yield b


def open_page(browser, path):
    browser.open(path.resolve().as_uri())
    browser.wait_for("document.body.dataset.ready === '1'")
    return browser


def table_rows(browser, selector="section.report table"):
    return browser.eval(f"[...document.querySelector('{selector}').querySelectorAll('tbody tr')]"
                        ".map(r => [...r.cells].map(c => c.textContent))")


def open_episode(browser, k):
    """Click the k-th row of the episode list; returns (episode index, the number of step cards shown)."""
    browser.eval("location.hash = 'episodes'")
    browser.wait_for("document.querySelectorAll('tr.ep-row').length > 0")
    i = browser.eval(f"(() => {{ const r = document.querySelectorAll('tr.ep-row')[{k}]; r.click(); "
                     "return Number(r.dataset.index); })()")
    browser.wait_for("document.querySelectorAll('article.step').length > 0 || "
                     "!!document.querySelector('#steps p.note')")
    return i, browser.eval("document.querySelectorAll('article.step').length")


def test_eval_page_in_chromium(browser, tmp_path):
    out = tmp_path / "run"
    results = eval_run(out)
    b = open_page(browser, write_page(out, tmp_path / "eval.html"))
    assert b.errors() == []
    facts = b.eval("Object.fromEntries([...document.querySelectorAll('#facts .v')].map(e => [e.dataset.key, e.textContent]))")
    n = sum(c["episodes"] for c in results["cells"])
    wins = sum(round(c["sr"] * c["scored"] / 100) for c in results["cells"])
    assert facts["episodes"] == str(n) and facts["successes"] == str(wins)
    rows = table_rows(b)
    assert [(r[1], r[3], r[2]) for r in rows] == [(c["perturbation"], f"{c['sr']:.1f}", str(c["scored"]))
                                                  for c in results["cells"]]
    assert b.screenshot(tmp_path / "eval-summary.png") > 10_000
    index = json.loads(b.eval("document.getElementById('r2v-index').textContent"))
    i, shown = open_episode(b, 3)
    assert shown == index["episodes"][i][index["episode_columns"].index("steps")] > 0
    assert b.eval("document.querySelector('.eid').textContent") == index["episodes"][i][1]
    assert b.screenshot(tmp_path / "eval-episode.png") > 10_000
    # sorting by steps, then filtering by outcome, keeps a consistent list
    b.eval("location.hash = 'episodes'")
    b.wait_for("document.querySelectorAll('tr.ep-row').length > 0")
    b.eval("[...document.querySelectorAll('th.sortable')].find(t => t.textContent === 'steps').click()")
    steps = b.eval("[...document.querySelectorAll('tr.ep-row')].map(r => Number(r.cells[7].textContent))")
    assert steps == sorted(steps) and len(steps) == n
    assert b.errors() == []


@pytest.mark.slow  # the miniature pipeline evaluation (shared per session): ~20 s
def test_pipeline_page_in_chromium(browser, tmp_path, viewer_pipeline_run):
    run, results = viewer_pipeline_run
    b = open_page(browser, write_page(run, tmp_path / "pipeline.html"))
    assert b.errors() == []
    first = table_rows(b)  # Table 1: the main condition
    cells = results["conditions"][results["main_condition"]]
    assert [(r[0], r[1], r[3]) for r in first] == [(m, f"{cells[m]['sr']:.1f}", f"{cells[m]['llm_pct']:.1f}")
                                                   for m in results["methods"]]
    assert b.eval("document.querySelectorAll('figure img').length") >= 2  # pareto + reliability plots
    b.screenshot(tmp_path / "pipeline-summary.png")
    # clicking Table 1's R2V row lists that cell's episodes
    b.eval("[...document.querySelector('section.report table').querySelectorAll('tbody tr')]"
           ".find(r => r.cells[0].textContent === 'r2v').click()")
    b.wait_for("document.querySelectorAll('tr.ep-row').length > 0")
    methods = b.eval("[...document.querySelectorAll('tr.ep-row')].map(r => r.cells[5].textContent + '/' + r.cells[4].textContent)")
    assert set(methods) == {f"r2v/{results['main_condition']}"} and len(methods) == cells["r2v"]["episodes"]
    _, shown = open_episode(b, 0)
    assert shown > 0 and b.eval("document.querySelectorAll('.router .meter').length") > 0
    assert b.eval("document.querySelectorAll('#episode table.grid tbody tr').length") >= len(results["methods"])
    b.screenshot(tmp_path / "pipeline-episode.png", full_page=True)
    b.eval("document.getElementById('side-toggle').click()")
    b.wait_for("document.querySelectorAll('.side .col').length > 0")
    sweep = len(results["sweeps"]["heuristic"])  # a swept threshold is one more method of the main condition
    assert b.eval("document.querySelectorAll('.side .col').length") == len(results["methods"]) + sweep
    b.screenshot(tmp_path / "pipeline-side.png")
    assert b.errors() == []


@pytest.mark.parametrize("compress", ["never", "always"])
def test_markup_renders_as_text_in_chromium(browser, tmp_path, compress):
    out = tmp_path / "runner"
    html_runner_run(out)
    b = open_page(browser, write_page(out, tmp_path / "html.html", compress=compress))
    open_episode(b, 0)
    b.eval("document.querySelectorAll('details').forEach(d => d.open = true)")
    text = b.eval("document.getElementById('steps').innerText")
    assert SCRIPT in text and IMG in text and f"{SCRIPT} I will" in text  # observation, candidate, reply
    assert b.eval("document.querySelectorAll('#steps img, #steps script').length") == 0
    assert b.eval("document.querySelectorAll('script').length") == 3  # the page's own blocks only
    assert b.dialogs() == [] and b.errors() == []
    b.screenshot(tmp_path / f"html-{compress}.png", full_page=True)


@pytest.mark.parametrize("env_id, shown", [("R2V/TerminalBench-v0", "Judge outcome: resolved"),
                                           pytest.param("R2V/HumanEval-v0", "EvalPlus: base pass, plus pass",
                                                        marks=NEEDS_HUMANEVAL)])
def test_verdict_in_chromium(browser, tmp_path, env_id, shown):
    verdict_run(tmp_path / "run", env_id)
    b = open_page(browser, write_page(tmp_path / "run", tmp_path / "v.html"))
    open_episode(b, 0)
    assert shown in b.eval("document.getElementById('verdict').innerText")
    assert b.errors() == []
    b.screenshot(tmp_path / "verdict.png", full_page=True)


def test_a_new_step_column_shows_without_code_changes(browser, tmp_path):
    """A column the runner does not write yet (a reply's grounding) reaches the page's details table and badge."""
    from r2v_eval.view.page import collect, render

    out = tmp_path / "runner"
    html_runner_run(out)
    index, details = collect(out)
    details[0]["steps"][0].setdefault("extra", {})["grounding"] = "normalised"
    page = tmp_path / "g.html"
    page.write_text(render(index, details))
    b = open_page(browser, page)
    b.eval("location.hash = 'episode/0'")
    b.wait_for("document.querySelectorAll('article.step').length > 0")
    assert b.eval("document.querySelector('article.step .badge.grounding').textContent") == "grounding: normalised"
    b.eval("document.querySelector('article.step details').open = true")
    assert "grounding\tnormalised" in b.eval("document.querySelector('article.step details').innerText")
    assert b.errors() == []
