// r2v view: renders the run inlined in this page's JSON blocks (see r2v_eval/view/page.py).
// Every string from the run is data: the DOM is built with createElement/textContent only, never innerHTML.
"use strict";
(function () {
  const INDEX = JSON.parse(document.getElementById("r2v-index").textContent);
  const COL = {};
  INDEX.episode_columns.forEach((c, i) => { COL[c] = i; });
  const EPS = INDEX.episodes;
  const CELLS = INDEX.cells;
  const PAGE = 100;
  const STEP_BATCH = 60;
  const state = { filters: { q: "", benchmark: "", condition: "", method: "", outcome: "" },
                  sort: { key: "", dir: 1 }, page: 0, list: null };
  const app = document.getElementById("app");

  // ----------------------------------------------------------------------------------------------- helpers
  function el(tag, props, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") n.textContent = String(v);
      else if (k === "class") n.className = v;
      else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, String(v));
    }
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      n.append(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
    }
    return n;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : typeof x === "number" ? +x.toFixed(d) + "" : String(x));
  const cls = (s) => String(s || "").toLowerCase().replace(/[^a-z0-9]/g, "");
  const ep = (i, c) => EPS[i][COL[c]];
  const cellOf = (i) => CELLS[ep(i, "cell")];
  const outcome = (i) => (ep(i, "not_run") ? "not run" : ep(i, "success") ? "success" : "failure");

  function outcomeBadge(i) {
    const o = outcome(i);
    return el("span", { class: "badge o-" + cls(o), text: o });
  }

  function table(columns, rows, rowProps) {
    const t = el("table", { class: "grid" });
    t.append(el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { text: c })))));
    const body = el("tbody");
    rows.forEach((r, i) => body.append(el("tr", rowProps ? rowProps(r, i) : {}, ...r.map((v) => el("td", { text: v })))));
    t.append(body);
    return t;
  }

  function markedText(text, marks, klass) {
    const pre = el("pre", { class: klass || "obs" });
    let pos = 0;
    for (const [s, e, type, detail] of marks || []) {
      if (s < pos || e > text.length) continue;
      if (s > pos) pre.append(text.slice(pos, s));
      pre.append(el("mark", { class: "ev ev-" + cls(type), title: type + (detail ? ": " + detail : "") }, text.slice(s, e)));
      pos = e;
    }
    pre.append(text.slice(pos));
    return pre;
  }

  function factList(facts, id) {
    return el("div", { class: "facts", id: id || null }, ...facts.map(([k, v]) =>
      el("div", { class: "fact" }, el("span", { class: "k", text: k }), el("span", { class: "v", "data-key": k, text: v }))));
  }

  function jsonBlock(obj) {
    return el("pre", { class: "json", text: JSON.stringify(obj, null, 2) });
  }

  // ------------------------------------------------------------------------------------------- step data
  const chunks = new Map();
  function chunk(n) {
    if (!chunks.has(n)) {
      chunks.set(n, (async () => {
        const raw = JSON.parse(document.getElementById("r2v-steps-" + n).textContent);
        if (INDEX.encoding !== "gzip") return raw;
        const bin = Uint8Array.from(atob(raw), (c) => c.charCodeAt(0));
        const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
        return JSON.parse(await new Response(stream).text());
      })());
    }
    return chunks.get(n);
  }
  async function detail(i) {
    const c = await chunk(Math.floor(i / INDEX.chunk_episodes));
    return c[i % INDEX.chunk_episodes];
  }

  // ------------------------------------------------------------------------------------------------ frame
  function header(active) {
    const tabs = [["summary", "Summary"], ["episodes", "Episodes (" + EPS.length + ")"]];
    return el("header", {},
      el("h1", {}, "r2v view ", el("span", { class: "title", text: INDEX.title })),
      el("nav", {}, ...tabs.map(([k, label]) => el("a", { href: "#" + k, class: k === active ? "active" : "", text: label }))),
      el("span", { class: "kind", text: INDEX.kind + " run" }));
  }

  function route() {
    const h = decodeURIComponent(location.hash.slice(1));
    app.replaceChildren();
    if (h.startsWith("episode/")) {
      const [, i, mode] = h.split("/");
      const idx = Number(i);
      if (Number.isInteger(idx) && idx >= 0 && idx < EPS.length) return renderEpisode(idx, mode === "side");
    }
    if (h === "episodes") return renderEpisodes();
    return renderSummary();
  }

  // ---------------------------------------------------------------------------------------------- summary
  function renderSummary() {
    const s = INDEX.summary;
    app.append(header("summary"));
    const main = el("main", { id: "summary" });
    const scored = EPS.filter((r) => !r[COL.not_run]);
    const wins = scored.filter((r) => r[COL.success]).length;
    const facts = [["episodes", EPS.length], ["scored", scored.length], ["successes", wins]];
    // one SR over a pipeline's methods and conditions together would mean nothing: its tables give them apart
    if (INDEX.kind !== "pipeline") facts.push(["SR (%)", scored.length ? (100 * wins / scored.length).toFixed(1) : "-"]);
    facts.push(["not run", EPS.length - scored.length], ["runner directories", CELLS.length]);
    if (INDEX.kind === "runner" && CELLS.length) facts.unshift(["policy", CELLS[0].method], ["env", CELLS[0].env]);
    if (s.agent) facts.unshift(["agent", s.agent]);
    const m = s.manifests.manifest || {};
    if (m.git_revision) facts.push(["git revision", m.git_revision]);
    if ((m.versions || {}).r2v) facts.push(["r2v version", m.versions.r2v]);
    main.append(factList(facts, "facts"));
    for (const t of s.tables) {
      const rowProps = (r) => ({ class: "clickable", title: "show these episodes",
        onclick: () => {
          Object.assign(state.filters, { q: "", benchmark: "", outcome: "" });
          if (INDEX.kind === "pipeline") Object.assign(state.filters, { condition: t.condition || "", method: t.condition ? r[0] : "" });
          else Object.assign(state.filters, { condition: r[1], method: "" });
          state.page = 0; location.hash = "episodes";
        } });
      main.append(el("section", { class: "report" }, el("h2", { text: t.title }),
        table(t.columns, t.rows, t.condition !== undefined || INDEX.kind === "eval" ? rowProps : null)));
    }
    if (!s.tables.length) main.append(el("p", { class: "note", text: "This run has no results.json: the counts above and the episode list come from its shards." }));
    for (const p of s.plots) {
      if (!String(p.src).startsWith("data:image/png;base64,")) continue;
      main.append(el("figure", {}, el("img", { src: p.src, alt: p.name }), el("figcaption", { text: p.name })));
    }
    for (const [name, m] of Object.entries(s.manifests)) {
      main.append(el("details", {}, el("summary", { text: name + (name === "run" ? ".json" : ".json (manifest)") }), jsonBlock(m)));
    }
    if (s.report) main.append(el("details", {}, el("summary", { text: "report.md" }), el("pre", { class: "report-md", text: s.report })));
    main.append(el("p", { class: "note", text: "Written " + INDEX.generated + " by r2v " + INDEX.r2v + " from " + INDEX.path }));
    app.append(main);
  }

  // --------------------------------------------------------------------------------------------- episodes
  const LIST_COLUMNS = [["#", null], ["benchmark", "benchmark"], ["task", "task_id"], ["z", "z"],
                        ["perturbation", "condition"], ["method", "method"], ["outcome", "outcome"],
                        ["steps", "steps"], ["LLM calls", "teacher_calls"], ["cost", "cost"],
                        ["not run", "not_run"], ["attempts", "attempts"]];
  function value(i, key) {
    if (key === "condition") return cellOf(i).condition;
    if (key === "method") return cellOf(i).method;
    if (key === "outcome") return outcome(i);
    return ep(i, key);
  }
  function filtered() {
    const f = state.filters;
    const q = f.q.toLowerCase();
    const out = [];
    for (let i = 0; i < EPS.length; i++) {
      if (f.benchmark && ep(i, "benchmark") !== f.benchmark) continue;
      if (f.condition && cellOf(i).condition !== f.condition) continue;
      if (f.method && cellOf(i).method !== f.method) continue;
      if (f.outcome && outcome(i) !== f.outcome) continue;
      if (q && !String(ep(i, "episode_id")).toLowerCase().includes(q)) continue;
      out.push(i);
    }
    const { key, dir } = state.sort;
    if (key) {
      out.sort((a, b) => {
        const x = value(a, key), y = value(b, key);
        return (x === y ? a - b : x === null ? 1 : y === null ? -1 : x < y ? -dir : dir);
      });
    }
    return out;
  }
  const distinct = (f) => [...new Set(EPS.map((_, i) => f(i)))].filter((v) => v !== "" && v !== null).sort();

  function renderEpisodes() {
    app.append(header("episodes"));
    const main = el("main", { id: "episodes" });
    const f = state.filters;
    const select = (key, label, options) => el("label", {}, label + " ",
      el("select", { onchange: (e) => { f[key] = e.target.value; state.page = 0; route(); } },
        el("option", { value: "", text: "all" }),
        ...options.map((o) => el("option", { value: o, text: o, selected: f[key] === o ? "selected" : null }))));
    const search = el("input", { type: "search", placeholder: "task or episode id", value: f.q,
      oninput: (e) => { f.q = e.target.value; state.page = 0; drawRows(); } });
    const bar = el("div", { class: "filters" }, search,
      select("benchmark", "benchmark", distinct((i) => ep(i, "benchmark"))),
      select("condition", "perturbation", distinct((i) => cellOf(i).condition)));
    const methods = distinct((i) => cellOf(i).method);
    if (methods.length) bar.append(select("method", "method", methods));
    bar.append(select("outcome", "outcome", ["success", "failure", "not run"]));
    main.append(bar);
    const holder = el("div");
    main.append(holder);
    app.append(main);

    function drawRows() {
      const list = filtered();
      state.list = list;
      const pages = Math.max(1, Math.ceil(list.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      const start = state.page * PAGE;
      const t = el("table", { class: "grid episodes" });
      t.append(el("thead", {}, el("tr", {}, ...LIST_COLUMNS.map(([label, key]) => el("th", {
        class: key ? "sortable" + (state.sort.key === key ? (state.sort.dir > 0 ? " asc" : " desc") : "") : "",
        text: label, onclick: key ? () => {
          state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : 1 }; drawRows();
        } : null })))));
      const body = el("tbody");
      for (const i of list.slice(start, start + PAGE)) {
        const c = cellOf(i);
        body.append(el("tr", { class: "ep-row", tabindex: "0", "data-index": i,
          onclick: () => { location.hash = "episode/" + i; },
          onkeydown: (e) => { if (e.key === "Enter") location.hash = "episode/" + i; } },
          el("td", { text: i }), el("td", { text: ep(i, "benchmark") }), el("td", { text: ep(i, "task_id") }),
          el("td", { text: ep(i, "z") }), el("td", { text: c.condition }), el("td", { text: c.method || "-" }),
          el("td", {}, outcomeBadge(i)), el("td", { text: ep(i, "steps") }), el("td", { text: ep(i, "teacher_calls") }),
          el("td", { text: fmt(ep(i, "cost"), 4) }), el("td", { text: ep(i, "not_run") || "" }),
          el("td", { text: ep(i, "attempts") })));
      }
      t.append(body);
      const pager = el("div", { class: "pager" },
        el("button", { text: "previous", disabled: state.page === 0 ? "disabled" : null,
          onclick: () => { state.page--; drawRows(); } }),
        el("span", { id: "count", text: list.length + " episodes; page " + (state.page + 1) + " of " + pages }),
        el("button", { text: "next", disabled: state.page >= pages - 1 ? "disabled" : null,
          onclick: () => { state.page++; drawRows(); } }));
      holder.replaceChildren(pager, t);
    }
    drawRows();
  }

  // ---------------------------------------------------------------------------------------------- episode
  function siblings(i) {  // the same episode of the same condition under every method (pipeline runs)
    const c = cellOf(i), id = ep(i, "episode_id");
    const out = [];
    for (let j = 0; j < EPS.length; j++) {
      const d = cellOf(j);
      if (ep(j, "episode_id") === id && d.condition === c.condition && d.env === c.env) out.push(j);
    }
    return out;
  }

  function renderEpisode(i, side) {
    app.append(header("episode"));
    const c = cellOf(i);
    const main = el("main", { id: "episode" });
    const list = state.list || [];
    const pos = list.indexOf(i);
    main.append(el("div", { class: "crumbs" },
      el("a", { href: "#episodes", text: "\u2190 episodes" }),
      pos > 0 ? el("a", { href: "#episode/" + list[pos - 1], text: "previous" }) : null,
      pos >= 0 && pos < list.length - 1 ? el("a", { href: "#episode/" + list[pos + 1], text: "next" }) : null));
    main.append(el("h2", {}, el("span", { class: "eid", text: ep(i, "episode_id") }), " ", outcomeBadge(i)));
    const facts = [["benchmark", ep(i, "benchmark")], ["env", c.env], ["perturbation", c.condition],
                   ["method", c.method || "-"], ["seed z", ep(i, "z")], ["steps", ep(i, "steps")],
                   ["LLM calls", ep(i, "teacher_calls")], ["cost", fmt(ep(i, "cost"), 4)], ["attempts", ep(i, "attempts")],
                   ["runner directory", c.dir]];
    if (ep(i, "error")) facts.push(["not run", ep(i, "error")]);
    main.append(factList(facts));
    const sibs = INDEX.kind === "pipeline" ? siblings(i) : [];
    if (sibs.length > 1) {
      main.append(el("h3", { text: "The same episode under each method" }),
        table(["method", "outcome", "steps", "LLM calls", "cost"],
          sibs.map((j) => [cellOf(j).method, outcome(j), ep(j, "steps"), ep(j, "teacher_calls"), fmt(ep(j, "cost"), 4)]),
          (r, k) => ({ class: "clickable" + (sibs[k] === i ? " current" : ""),
                       onclick: () => { location.hash = "episode/" + sibs[k] + (side ? "/side" : ""); } })),
        el("p", {}, el("a", { href: "#episode/" + i + (side ? "" : "/side"), id: "side-toggle",
          text: side ? "one method, step by step" : "all methods side by side" })));
    }
    const body = el("div", { id: "steps", class: "loading", text: "loading steps\u2026" });
    main.append(body);
    app.append(main);
    if (side && sibs.length > 1) sideBySide(sibs, body);
    else steps(i, body);
  }

  async function steps(i, body) {
    const d = await detail(i);
    body.replaceChildren();
    body.classList.remove("loading");
    if (!d.steps.length) body.append(el("p", { class: "note", text: "No step was logged for this episode." }));
    let shown = 0;
    const more = el("button", { class: "more" });
    const holder = el("div");
    body.append(holder);
    const draw = () => {
      for (const s of d.steps.slice(shown, shown + STEP_BATCH)) holder.append(stepCard(s));
      shown = Math.min(d.steps.length, shown + STEP_BATCH);
      more.textContent = "show " + Math.min(STEP_BATCH, d.steps.length - shown) + " more of " + (d.steps.length - shown) + " remaining steps";
      if (shown >= d.steps.length) more.remove();
    };
    more.addEventListener("click", draw);
    body.append(more);
    draw();
    if (d.final !== undefined && (d.final !== null || d.verdict)) {
      const v = el("section", { class: "verdict", id: "verdict" }, el("h3", { text: "End of the episode" }));
      if (d.final !== null) v.append(el("div", { class: "label", text: "what the env answered the last action" }), el("pre", { class: "obs", text: d.final }));
      if (d.verdict) {
        if (d.verdict.outcome) v.append(el("p", {}, "Judge outcome: ", el("strong", { text: d.verdict.outcome })));
        const ev = d.verdict.verdict;
        if (ev && typeof ev === "object" && (ev.base || ev.plus))
          v.append(el("p", {}, "EvalPlus: base ", el("strong", { text: (ev.base || {}).status || "-" }),
            ", plus ", el("strong", { text: (ev.plus || {}).status || "-" })));
        v.append(el("details", {}, el("summary", { text: "verdict record" }), jsonBlock(d.verdict)));
      }
      body.append(v);
    }
  }

  function routerLine(s) {
    if (s.p === null || s.p === undefined) return null;
    const th = s.threshold;
    const bar = el("span", { class: "meter", title: "router probability " + fmt(s.p) + (th !== null && th !== undefined ? " vs threshold " + fmt(th) : "") },
      el("span", { class: "fill", style: "width:" + Math.round(100 * Math.min(1, Math.max(0, s.p))) + "%" }),
      th !== null && th !== undefined ? el("span", { class: "tick", style: "left:" + Math.round(100 * Math.min(1, Math.max(0, th))) + "%" }) : null);
    const verdict = th === null || th === undefined ? "" : s.p >= th ? " \u2265 threshold " + fmt(th) + ": escalate" : " < threshold " + fmt(th) + ": keep the SLM";
    const slm = (s.extra || {})["meta.slm_action"];
    return el("div", { class: "router" }, "router p = ", el("strong", { text: fmt(s.p) }), verdict + " ", bar,
      slm !== undefined ? el("span", { class: "slm-action" }, " the SLM proposed ", el("code", { text: slm })) : null);
  }

  function stepCard(s) {
    const card = el("article", { class: "step src-" + cls(s.source), "data-t": s.t });
    card.append(el("div", { class: "step-head" },
      el("span", { class: "t", text: "t=" + s.t }),
      el("span", { class: "badge src", text: s.source || "-" }),
      el(String(s.action).includes("\n") ? "pre" : "code", { class: "action", text: s.action === null ? "(no action)" : s.action }),
      // how a reply became the action (a step column of agents that ground replies), also in the details table
      (s.extra || {}).grounding !== undefined ? el("span", { class: "badge grounding", title: "how the reply became the action",
        text: "grounding: " + s.extra.grounding }) : null,
      s.reward ? el("span", { class: "reward", text: "reward " + fmt(s.reward) }) : null,
      s.end ? el("span", { class: "badge end", text: s.end }) : null));
    if (s.goal !== undefined) card.append(el("div", { class: "label", text: s.t === 0 ? "goal" : "goal (changed)" }), markedText(s.goal || "", s.goal_marks, "goal"));
    if (s.events.length) {
      card.append(el("ul", { class: "events" }, ...s.events.map((e) =>
        el("li", { class: "ev-" + cls(e.type) }, el("strong", { text: e.type }), " on " + e.channel + (e.detail ? ": " : ""),
          e.detail ? el("span", { text: typeof e.detail === "string" ? e.detail : JSON.stringify(e.detail) }) : null))));
    }
    card.append(el("div", { class: "label", text: "what the agent saw" }), markedText(s.obs, s.marks));
    const r = routerLine(s);
    if (r) card.append(r);
    if (s.verifier !== null && s.verifier !== undefined) card.append(el("div", { class: "verifier", text: "verifier score of the action: " + fmt(s.verifier) }));
    if (s.cands.length) {
      card.append(table(["candidate", "log-prob", "mean entropy", "verifier"],
        s.cands.map((c) => [c.action, fmt(c.logprob), fmt(c.entropy), fmt(c.verifier)]),
        (row, k) => ({ class: s.cands[k].action === s.action ? "chosen" : "" })));
    }
    const rows = [];
    if (s.expert !== null && s.expert !== undefined) rows.push(["expert action (hidden from the agent)", s.expert]);
    if (s.cost) rows.push(["cost", fmt(s.cost, 6)]);
    if (s.admissible) rows.push(["admissible actions", s.admissible.join(" | ")]);
    if (s.features) rows.push(["router features", s.features.join(", ")]);
    for (const [k, v] of Object.entries(s.extra || {})) rows.push([k, typeof v === "string" ? v : JSON.stringify(v)]);
    if (rows.length) card.append(el("details", { class: "more-cols" }, el("summary", { text: "details" }), table(["column", "value"], rows)));
    return card;
  }

  async function sideBySide(sibs, body) {
    const all = await Promise.all(sibs.map(detail));
    body.replaceChildren();
    body.classList.remove("loading");
    const grid = el("div", { class: "side" });
    sibs.forEach((j, k) => {
      const col = el("div", { class: "col" }, el("h3", {}, el("a", { href: "#episode/" + j, text: cellOf(j).method }), " ", outcomeBadge(j)));
      for (const s of all[k].steps) {
        col.append(el("div", { class: "mini src-" + cls(s.source), title: s.obs },
          el("span", { class: "t", text: s.t }), el("span", { class: "badge src", text: s.source || "-" }),
          el("code", { text: s.action === null ? "-" : s.action }),
          s.p !== null && s.p !== undefined ? el("span", { class: "p", text: "p " + fmt(s.p, 2) }) : null,
          s.events.length ? el("span", { class: "evn", text: s.events.map((e) => e.type).join(" ") }) : null,
          s.reward ? el("span", { class: "reward", text: "+" + fmt(s.reward) }) : null));
      }
      grid.append(col);
    });
    body.append(grid);
  }

  window.addEventListener("hashchange", route);
  route();
  document.body.dataset.ready = "1";
  window.r2vReadyAt = performance.now();
})();
