"""``r2v view`` pages in a real headless Chromium driven by Playwright: no console errors, the summary's numbers,
the episode list's filters, an episode's steps and its perturbation markers on a click, markup shown as text, and a
screenshot of each page (under pytest's tmp dir).

Needs the ``playwright`` package (the ``test`` extra) and a Chromium binary (Debian: ``apt-get install -y
chromium``); skipped with the missing one named otherwise."""

from __future__ import annotations

import json

import pytest

from r2v_agents.shards import load_rows
from r2v_eval.results import main_table, sweeps
from r2v_eval.view import write_page
from r2v_eval.view.steps import marks
from tests.support.browser import PageLog, chromium, skip_reason
from tests.support.view_runs import IMG, NEEDS_HUMANEVAL, SCRIPT, eval_run, html_runner_run, verdict_run

SKIP = skip_reason()
pytestmark = [pytest.mark.skipif(SKIP is not None, reason=SKIP or ""), pytest.mark.slow]  # end to end: Chromium


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


class Tab:
    """One page of a fresh browser context and what it reported (:class:`PageLog`)."""

    def __init__(self, page):
        self.page, self.log = page, PageLog(page)

    def open(self, path):
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_function("document.body.dataset.ready === '1'")
        return self.page


@pytest.fixture
def tab(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Tab(context.new_page())
    finally:
        context.close()


def table_rows(page, selector="section.report table"):
    return page.locator(selector).first.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def episode_list(page):
    """The shown rows of the episode list as dicts keyed by the list's column names."""
    head = page.locator("table.episodes thead th").all_text_contents()
    return [dict(zip(head, r)) for r in table_rows(page, "table.episodes")]


def to_episodes(page):
    page.locator("header nav").get_by_role("link", name="Episodes").click()  # the header's tab, as a reader would
    page.locator("tr.ep-row").first.wait_for()


def open_episode(page, k):
    """Click the k-th row of the episode list; returns (episode index, the number of step cards shown)."""
    to_episodes(page)
    row = page.locator("tr.ep-row").nth(k)
    i = int(row.get_attribute("data-index"))
    row.click()
    page.wait_for_function("document.querySelectorAll('article.step').length > 0 || "
                           "!!document.querySelector('#steps p.note')")
    return i, page.locator("article.step").count()


def test_eval_page_in_chromium(tab, tmp_path):
    out = tmp_path / "run"
    results = eval_run(out)
    b = tab.open(write_page(out, tmp_path / "eval.html"))
    assert tab.log.errors == []
    facts = dict(zip(b.locator("#facts .v").evaluate_all("es => es.map(e => e.dataset.key)"),
                     b.locator("#facts .v").all_text_contents()))
    n = sum(c["episodes"] for c in results["cells"])
    wins = sum(round(c["sr"] * c["scored"] / 100) for c in results["cells"])
    assert facts["episodes"] == str(n) and facts["successes"] == str(wins)
    rows = table_rows(b)
    assert [(r[1], r[3], r[2]) for r in rows] == [(c["perturbation"], f"{c['sr']:.1f}", str(c["scored"]))
                                                  for c in results["cells"]]
    b.screenshot(path=tmp_path / "eval-summary.png")
    assert (tmp_path / "eval-summary.png").stat().st_size > 10_000
    index = json.loads(b.locator("#r2v-index").text_content())
    i, shown = open_episode(b, 3)
    assert shown == index["episodes"][i][index["episode_columns"].index("steps")] > 0
    assert b.locator(".eid").text_content() == index["episodes"][i][1]
    b.screenshot(path=tmp_path / "eval-episode.png")
    # sorting by steps keeps the whole list, in order
    to_episodes(b)
    b.locator("th.sortable", has_text="steps").first.click()
    steps = [int(r["steps"]) for r in episode_list(b)]
    assert steps == sorted(steps) and len(steps) == n
    assert tab.log.errors == []


def test_filters_and_perturbation_markers_in_chromium(tab, tmp_path):
    """Filter the list by perturbation, outcome and id as a reader would, then open the composite episode with
    the most perturbation events: each step card lists its events and marks the spans the shards put there."""
    out = tmp_path / "run"
    results = eval_run(out)
    cell = next(c for c in results["cells"] if c["perturbation"] == "composite")
    episodes = load_rows(out / cell["run_dir"], "episodes")
    steps = load_rows(out / cell["run_dir"], "steps")
    b = tab.open(write_page(out, tmp_path / "eval.html"))
    to_episodes(b)
    b.get_by_label("perturbation").select_option("composite")
    shown = episode_list(b)
    assert {r["perturbation"] for r in shown} == {"composite"} and len(shown) == len(episodes)
    assert b.locator("#count").text_content().startswith(f"{len(episodes)} episodes")
    b.get_by_label("outcome").select_option("success")
    assert len(episode_list(b)) == sum(e["success"] for e in episodes)
    b.get_by_label("outcome").select_option("")  # "all"

    events = {}
    for s in steps:
        events.setdefault(s["episode_id"], []).append(s)
    eid, ep_steps = max(events.items(), key=lambda kv: (sum(len(json.loads(s["perturbations"])) for s in kv[1]),
                                                        kv[0]))
    assert any(json.loads(s["perturbations"]) for s in ep_steps), "composite should perturb some step"
    b.get_by_placeholder("task or episode id").fill(eid)
    only = episode_list(b)
    assert [r["task"] for r in only] == [eid.split("@")[0]] and only[0]["perturbation"] == "composite"
    b.locator("tr.ep-row").first.click()
    b.locator("article.step").first.wait_for()
    assert b.locator(".eid").text_content() == eid
    marked = 0
    for s in sorted(ep_steps, key=lambda s: s["t"]):
        card = b.locator(f"article.step[data-t='{s['t']}']")
        evs = json.loads(s["perturbations"])
        listed = card.locator("ul.events li").evaluate_all("li => li.map(e => e.querySelector('strong').textContent)")
        assert listed == [e["type"] for e in evs]
        spans = marks(s["observation"] or "", evs)
        shown_marks = card.locator("pre.obs mark.ev")
        assert shown_marks.count() == len(spans)
        for k, (start, end, kind, _) in enumerate(spans):
            assert kind in shown_marks.nth(k).get_attribute("title")
            assert shown_marks.nth(k).get_attribute("class") == f"ev ev-{kind}"
        marked += len(spans)
    b.screenshot(path=tmp_path / "eval-markers.png", full_page=True)
    assert marked > 0, "the busiest composite episode should have a marked span"
    assert tab.log.errors == []


@pytest.mark.slow  # the miniature pipeline evaluation (shared per session): ~20 s
def test_pipeline_page_in_chromium(tab, tmp_path, viewer_pipeline_run):
    run, results = viewer_pipeline_run
    b = tab.open(write_page(run, tmp_path / "pipeline.html"))
    assert tab.log.errors == []
    first = table_rows(b)  # Table 1: the main condition
    cells = main_table(results)
    assert [(r[0], r[1], r[3]) for r in first] == [(m, f"{cells[m]['sr']:.1f}", f"{cells[m]['llm_pct']:.1f}")
                                                   for m in results["methods"]]
    assert b.locator("figure img").count() >= 2  # pareto + reliability plots
    b.screenshot(path=tmp_path / "pipeline-summary.png")
    # clicking Table 1's R2V row lists that cell's episodes
    b.locator("section.report table").first.locator("tbody tr").filter(
        has=b.locator("td:first-child", has_text="r2v")).first.click()
    b.locator("tr.ep-row").first.wait_for()
    methods = [f"{r['method']}/{r['perturbation']}" for r in episode_list(b)]
    assert set(methods) == {f"r2v/{results['main_condition']}"} and len(methods) == cells["r2v"]["episodes"]
    _, shown = open_episode(b, 0)
    assert shown > 0 and b.locator(".router .meter").count() > 0
    assert b.locator("#episode table.grid tbody tr").count() >= len(results["methods"])
    b.screenshot(path=tmp_path / "pipeline-episode.png", full_page=True)
    b.locator("#side-toggle").click()
    b.locator(".side .col").first.wait_for()
    sweep = len(sweeps(results)["heuristic"])  # a swept threshold is one more method of the main condition
    assert b.locator(".side .col").count() == len(results["methods"]) + sweep
    b.screenshot(path=tmp_path / "pipeline-side.png")
    assert tab.log.errors == []


@pytest.mark.parametrize("compress", ["never", "always"])
def test_markup_renders_as_text_in_chromium(tab, tmp_path, compress):
    out = tmp_path / "runner"
    html_runner_run(out)
    b = tab.open(write_page(out, tmp_path / "html.html", compress=compress))
    open_episode(b, 0)
    for summary in b.locator("#steps details > summary").all():
        summary.click()  # open every details table, as a reader would
    text = b.locator("#steps").inner_text()
    assert SCRIPT in text and IMG in text and f"{SCRIPT} I will" in text  # observation, candidate, reply
    assert b.locator("#steps img, #steps script").count() == 0
    assert b.locator("script").count() == 3  # the page's own blocks only
    assert tab.log.dialogs == [] and tab.log.errors == []
    b.screenshot(path=tmp_path / f"html-{compress}.png", full_page=True)


@pytest.mark.parametrize("env_id, shown", [("R2V/TerminalBench-v0", "Judge outcome: resolved"),
                                           pytest.param("R2V/HumanEval-v0", "EvalPlus: base pass, plus pass",
                                                        marks=NEEDS_HUMANEVAL)])
def test_verdict_in_chromium(tab, tmp_path, env_id, shown):
    verdict_run(tmp_path / "run", env_id)
    b = tab.open(write_page(tmp_path / "run", tmp_path / "v.html"))
    open_episode(b, 0)
    assert shown in b.locator("#verdict").inner_text()
    assert tab.log.errors == []
    b.screenshot(path=tmp_path / "verdict.png", full_page=True)


def test_a_new_step_column_shows_without_code_changes(tab, tmp_path):
    """A column the runner does not write yet (a reply's grounding) reaches the page's details table and badge."""
    from r2v_eval.view.page import collect, render

    out = tmp_path / "runner"
    html_runner_run(out)
    index, details = collect(out)
    details[0]["steps"][0].setdefault("extra", {})["grounding"] = "normalised"
    page = tmp_path / "g.html"
    page.write_text(render(index, details))
    b = tab.open(page)
    open_episode(b, 0)
    card = b.locator("article.step").first
    assert card.locator(".badge.grounding").text_content() == "grounding: normalised"
    card.locator("details > summary").first.click()
    assert "grounding\tnormalised" in card.locator("details").first.inner_text()
    assert tab.log.errors == []
