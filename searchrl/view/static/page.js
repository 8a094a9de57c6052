"use strict";
// searchrl view: one script for the served page (data from the JSON API, polled) and the exported file (data
// embedded in #searchrl-data, filtered here by `matches`, the same rules as searchrl/view/listing.py).
(() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  const SVG = "http://www.w3.org/2000/svg";
  const PAGE = 50;
  const COLORS = ["#1570ef", "#dc6803", "#079455", "#c11574", "#6938ef", "#0e9384", "#b42318", "#4e5ba6"];
  const CONFIG = JSON.parse($("#searchrl-config").textContent);
  const EMBEDDED = CONFIG.mode === "export" ? JSON.parse($("#searchrl-data").textContent) : null;

  class ViewError extends Error {
    constructor(message, status) {
      super(message);
      this.status = status;
    }
  }

  const state = {
    summary: null,
    token: null,
    followLatest: true,
    rows: [],
    total: 0,
    listRequest: 0,
    selected: null,
    tab: "curves",
  };

  // ---- small DOM helpers: every text of a record goes in through textContent or esc(), never as markup.
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }
  function s(tag, attrs = {}, text = null) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (text !== null) el.textContent = text;
    return el;
  }
  function esc(text) {
    return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function fmt(v, digits = 3) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "boolean") return v ? "yes" : "no";
    return Number.isInteger(v) ? String(v) : Number(v).toFixed(digits).replace(/0+$/, "").replace(/\.$/, "");
  }
  function verdict(right) {
    return right === null || right === undefined ? h("span", {}, "–") : h("span", { class: right ? "yes" : "no" }, right ? "✓" : "✗");
  }
  function plural(n, one, many) {
    return `${n} ${n === 1 ? one : many}`;
  }
  function showError(message) {
    const box = $("#error");
    box.textContent = message;
    box.hidden = !message;
  }

  // ---- where the data comes from: the server's API, or the file's embedded JSON.
  function serverSource() {
    async function get(path) {
      const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
      const r = await fetch(path, { headers, cache: "no-store" });
      if (r.status === 401) {
        $("#auth").hidden = false;
        throw new ViewError("the server wants a bearer token (enter it above)", 401);
      }
      const body = await r.json().catch(() => ({}));
      if (!r.ok) throw new ViewError(body.detail || `${r.status} ${r.statusText}`, r.status);
      return body;
    }
    return {
      summary: () => get("api/summary"),
      episodes: (params) => get("api/episodes?" + new URLSearchParams(params)),
      episode: (id) => get("api/episode/" + encodeURIComponent(id)),
    };
  }

  function exportSource(data) {
    const byId = new Map(data.episodes.map((e) => [e.id, e]));
    return {
      summary: async () => data.summary,
      episodes: async (params) => {
        const f = parseFilter(params, data.summary);
        if (f.step !== null && !data.summary.steps.includes(f.step)) {
          throw new ViewError(`step: ${f.step} is not a step of this run`, 404);
        }
        const found = sortRows(data.episodes.filter((e) => matches(f, e)), f.sort);
        const offset = Number(params.offset || 0);
        const limit = Number(params.limit || PAGE);
        return { total: found.length, offset, limit, episodes: found.slice(offset, offset + limit) };
      },
      episode: async (id) => {
        if (!byId.has(id)) throw new ViewError(`id: no episode ${id} in this file`, 404);
        return byId.get(id);
      },
    };
  }

  function parseFilter(p, summary) {
    const num = (name) => {
      const text = (p[name] || "").trim();
      if (!text) return null;
      const v = Number(text);
      if (!Number.isFinite(v)) throw new ViewError(`${name}: ${text} is not a finite number`, 400);
      return v;
    };
    const f = { step: num("step"), min: num("min_reward"), max: num("max_reward"), violation: null, searches: null };
    if (f.min !== null && f.max !== null && f.min > f.max) throw new ViewError("min_reward: above max_reward", 400);
    const violation = (p.violation || "").trim();
    if (violation) {
      if (!["any", "none", ...summary.rules].includes(violation)) throw new ViewError(`violation: ${violation} is not a rule of this run`, 400);
      f.violation = violation;
    }
    const searches = (p.searches || "").trim();
    if (searches) {
      const m = /^(\d{1,4})(\+?)$/.exec(searches);
      if (!m) throw new ViewError(`searches: ${searches}: give a count (2) or a least count (2+)`, 400);
      f.searches = [Number(m[1]), m[2] === "+"];
    }
    f.right = { right: true, wrong: false }[p.correct] ?? null;
    f.q = (p.q || "").trim().toLowerCase();
    f.sort = p.sort || "time";
    return f;
  }

  function solutionOf(e) {
    return e.turns.map((t) => t.text + (t.documents || "")).join("");
  }

  function matches(f, e) {
    if (f.step !== null && e.step !== f.step) return false;
    if (f.min !== null && e.reward < f.min) return false;
    if (f.max !== null && e.reward > f.max) return false;
    if (f.violation === "any" && !e.violations.length) return false;
    if (f.violation === "none" && e.violations.length) return false;
    if (f.violation && f.violation !== "any" && f.violation !== "none" && !e.violations.includes(f.violation)) return false;
    if (f.searches) {
      const [n, atLeast] = f.searches;
      if (e.num_searches < n || (!atLeast && e.num_searches !== n)) return false;
    }
    if (f.right !== null && e.right !== f.right) return false;
    if (f.q && ![e.prompt, solutionOf(e), e.answer || ""].some((t) => t.toLowerCase().includes(f.q))) return false;
    return true;
  }

  function sortRows(rows, sort) {
    if (sort === "time") return rows;
    const key = sort.endsWith("reward") ? (e) => e.reward : (e) => e.num_searches;
    const dir = sort.startsWith("-") ? -1 : 1;
    return rows.slice().sort((a, b) => dir * (key(a) - key(b)));
  }

  const source = EMBEDDED ? exportSource(EMBEDDED) : serverSource();

  // ---- curves: one SVG line plot per measure, a line per source (and per rule).
  function extent(values) {
    return [Math.min(...values), Math.max(...values)];
  }

  function drawPlot(plot) {
    const W = 360, H = 170, L = 44, R = 10, T = 8, B = 24;
    const points = plot.series.flatMap((ser) => ser.points);
    let [x0, x1] = extent(points.map((p) => p[0]));
    let [y0, y1] = extent(points.map((p) => p[1]));
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (plot.unit === "rate") { y0 = Math.min(0, y0); y1 = Math.max(1, y1); }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const svg = s("svg", { class: "plot", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": plot.title });
    svg.append(s("line", { class: "grid", x1: L, x2: W - R, y1: sy((y0 + y1) / 2), y2: sy((y0 + y1) / 2) }));
    svg.append(s("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
    svg.append(s("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
    svg.append(s("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, fmt(y1)));
    svg.append(s("text", { x: L - 4, y: H - B, "text-anchor": "end" }, fmt(y0)));
    svg.append(s("text", { x: L, y: H - 8, "text-anchor": "start" }, `step ${fmt(x0)}`));
    svg.append(s("text", { x: W - R, y: H - 8, "text-anchor": "end" }, `step ${fmt(x1)}`));
    plot.series.forEach((ser, i) => {
      const color = COLORS[i % COLORS.length];
      const d = ser.points.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)} ${sy(p[1]).toFixed(1)}`).join(" ");
      svg.append(s("path", { class: `line ${ser.source}`, d, stroke: color, "data-points": ser.points.length, "data-label": ser.label }));
      for (const [x, y] of ser.points) {
        const dot = s("circle", { class: "pt", cx: sx(x).toFixed(1), cy: sy(y).toFixed(1), r: 2.6, fill: color, "data-step": x });
        dot.append(s("title", {}, `${ser.label} (${ser.source}), step ${x}: ${fmt(y, 4)}`));
        svg.append(dot);
      }
    });
    svg.addEventListener("click", (ev) => {
      const step = ev.target.getAttribute && ev.target.getAttribute("data-step");
      if (step !== null && step !== undefined && state.summary.steps.includes(Number(step))) {
        selectStep(Number(step));
        showTab("episodes");
      }
    });
    return svg;
  }

  function renderPlots() {
    const box = $("#plots");
    box.replaceChildren();
    for (const plot of state.summary.plots) {
      const legend = h("div", { class: "legend" });
      plot.series.forEach((ser, i) => {
        const swatch = h("span", { class: `swatch ${ser.source}` });
        swatch.style.background = ser.source === "tensorboard" ? "none" : COLORS[i % COLORS.length];
        swatch.style.borderColor = COLORS[i % COLORS.length];
        legend.append(h("span", {}, swatch, `${ser.label}${ser.source === "tensorboard" && ser.label !== "TensorBoard" ? " (TensorBoard)" : ""}`));
      });
      box.append(h("figure", { class: "plot-card", "data-key": plot.measure }, h("figcaption", {}, plot.title), drawPlot(plot), legend));
    }
  }

  function renderHeader() {
    const sm = state.summary;
    const steps = sm.steps.length ? `steps ${sm.steps[0]}–${sm.steps[sm.steps.length - 1]}` : "no steps yet";
    const skipped = Object.values(sm.skipped).reduce((a, b) => a + b, 0);
    $("#run-info").textContent = `${sm.run_dir} · ${sm.episodes} episodes · ${steps}` +
      (sm.has_tensorboard ? " · TensorBoard curves" : "") + (skipped ? ` · ${skipped} lines not records (skipped)` : "");
    document.title = `searchrl view · ${sm.run_dir}`;
  }

  function setStatus() {
    const st = $("#status");
    st.dataset.version = state.summary.version;
    if (EMBEDDED) {
      st.textContent = "exported file (no refresh)";
      return;
    }
    st.className = "live";
    st.textContent = `refreshed ${new Date().toLocaleTimeString()} (every ${CONFIG.refresh_s}s)`;
  }

  // ---- the episodes list and its filters.
  function fillSelect(select, options, keep) {
    select.replaceChildren(...options.map(([value, label]) => h("option", { value }, label)));
    if (options.some(([value]) => value === keep)) select.value = keep;
  }

  function renderFilterOptions() {
    const sm = state.summary;
    const latest = sm.steps.length ? String(sm.steps[sm.steps.length - 1]) : "";
    const stepKeep = state.followLatest ? latest : $("#f-step").value;
    fillSelect($("#f-step"), [["", "all steps"], ...sm.steps.map((x) => [String(x), `step ${x}`])], stepKeep);
    fillSelect($("#f-violation"), [["", "any or none"], ["any", "broke some rule"], ["none", "broke no rule"],
      ...sm.rules.map((r) => [r, r])], $("#f-violation").value);
    for (const [id, fallback] of [["#cmp-a", sm.steps[0]], ["#cmp-b", sm.steps[sm.steps.length - 1]]]) {
      const keep = $(id).value || String(fallback ?? "");
      fillSelect($(id), sm.steps.map((x) => [String(x), `step ${x}`]), keep);
    }
  }

  function filterParams() {
    const p = {
      step: $("#f-step").value, min_reward: $("#f-min").value, max_reward: $("#f-max").value,
      violation: $("#f-violation").value, searches: $("#f-searches").value, correct: $("#f-correct").value,
      q: $("#f-q").value, sort: $("#f-sort").value,
    };
    return Object.fromEntries(Object.entries(p).filter(([, v]) => v !== ""));
  }

  function rowOf(e) {
    const tr = h("tr", { "data-id": e.id, "data-step": e.step, "data-searches": e.num_searches },
      h("td", { class: "num" }, e.step),
      h("td", { class: "num" }, fmt(e.reward)),
      h("td", {}, verdict(e.right)),
      h("td", { class: "num" }, e.num_searches),
      h("td", {}, e.violations.map((v) => h("span", { class: "chip" }, v))),
      h("td", { class: "answer" }, e.answer ?? "–"),
      h("td", { class: "answer" }, e.gold.join(" | ")),
      h("td", { class: "tail", title: e.prompt_tail }, e.prompt_tail));
    if (e.id === state.selected) tr.classList.add("selected");
    tr.addEventListener("click", () => openEpisode(e.id));
    return tr;
  }

  async function loadList(append = false) {
    const ticket = ++state.listRequest;
    const params = { ...filterParams(), limit: PAGE, offset: append ? state.rows.length : 0 };
    let page;
    try {
      page = await source.episodes(params);
    } catch (err) {
      if (ticket !== state.listRequest) return;
      $("#list-error").textContent = err.message;
      $("#list-error").hidden = false;
      return;
    }
    if (ticket !== state.listRequest) return;  // a newer filter answered first
    $("#list-error").hidden = true;
    state.rows = append ? state.rows.concat(page.episodes) : page.episodes;
    state.total = page.total;
    const body = $("#episode-list tbody");
    if (!append) body.replaceChildren();
    body.append(...page.episodes.map(rowOf));
    const count = $("#list-count");
    count.dataset.total = page.total;
    count.dataset.shown = state.rows.length;
    count.dataset.sort = params.sort || "time";
    count.textContent = `${state.rows.length} shown of ${page.total} episodes that pass`;
    $("#list-more").hidden = state.rows.length >= page.total;
  }

  function selectStep(step) {
    state.followLatest = false;
    $("#f-step").value = String(step);
    loadList();
  }

  // ---- one episode: its turns, tags highlighted, documents folded, the reward beside it.
  const TAG = /<\|(?:begin|end)_of_(?:query|documents)\|>|<\/?(?:think|answer|search|information|tool_call|tool_response|documents|query)>/g;
  function kindOf(tag) {
    if (tag.includes("think")) return "think";
    if (tag.includes("answer")) return "answer";
    if (/query|search|tool_call>/.test(tag)) return "query";
    return "docs";
  }

  // `open`: the kinds open where the text starts (the prompt's `<think>`, a think left open by the turn before);
  // returns the text as markup and the kinds still open where it ends.
  function highlight(text, open = []) {
    open = open.slice();
    let out = open.map((kind) => `<span class="seg ${kind}">`).join("");
    let last = 0;
    for (const m of text.matchAll(TAG)) {
      out += esc(text.slice(last, m.index));
      last = m.index + m[0].length;
      const tag = m[0];
      const kind = kindOf(tag);
      const closing = tag.startsWith("</") || tag.includes("end_of");
      if (!closing) {
        open.push(kind);
        out += `<span class="seg ${kind}"><span class="tag">${esc(tag)}</span>`;
      } else if (open.includes(kind)) {
        while (open.length) {
          const top = open.pop();
          out += top === kind ? `<span class="tag">${esc(tag)}</span></span>` : "</span>";
          if (top === kind) break;
        }
      } else {
        // A close with nothing open: the kind of tag soup a reward hacker writes, shown as such.
        out += `<span class="tag stray" title="closes nothing">${esc(tag)}</span>`;
      }
    }
    out += esc(text.slice(last)) + "</span>".repeat(open.length);
    return { html: out, open };
  }

  function openedByPrompt(prompt) {
    const m = /(<think>)\s*$/.exec(prompt);
    return m ? ["think"] : [];
  }

  function kvTable(pairs) {
    return h("table", { class: "kv" }, pairs.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))));
  }

  function renderEpisode(e) {
    const pane = $("#episode");
    const facts = kvTable([
      ["reward", fmt(e.reward, 4)], ["score", fmt(e.score, 4)], ["right", verdict(e.right)],
      ["answer", e.answer ?? "– (none)"], ["gold", e.gold.join(" | ") || "–"],
      ["violations", e.violations.length ? e.violations.map((v) => h("span", { class: "chip" }, v)) : "none"],
      ["searches", String(e.num_searches)], ["queries", e.queries.map((q) => h("span", { class: "chip query" }, q))],
      ["tokens", `prompt ${fmt(e.prompt_tokens)} · response ${fmt(e.response_tokens)}`],
      ["seconds", `${fmt(e.seconds)} (searching ${fmt(e.search_seconds)})`],
      ["written", `${new Date(e.time * 1000).toISOString()} · ${e.source} · ${e.protocol}`],
    ]);
    facts.id = "episode-facts";
    const components = kvTable(Object.entries(e.components).sort().map(([k, v]) => [k, fmt(v, 4)]));
    components.id = "episode-components";
    const turns = h("div", { id: "episode-turns" });
    let open = openedByPrompt(e.prompt);
    e.turns.forEach((t, i) => {
      const policy = h("pre", { class: "policy" });
      const marked = highlight(t.text, open);
      policy.innerHTML = marked.html;
      open = marked.open;
      const turn = h("div", { class: "turn" }, h("div", { class: "turn-head" }, `turn ${i + 1}`), policy);
      if (t.documents !== null && t.documents !== undefined) {
        const label = t.query ? `documents for “${t.query}”` : "documents";
        turn.append(h("details", { class: "documents" }, h("summary", {}, `${label} (${t.documents.length} chars)`),
          h("pre", {}, t.documents)));
      }
      turns.append(turn);
    });
    pane.replaceChildren(
      h("h2", {}, `episode `, h("code", {}, e.id), ` · step ${e.step}`),
      h("div", { class: "facts" },
        h("div", {}, facts, h("details", { class: "prompt" }, h("summary", {}, `prompt (${e.prompt.length} chars)`), h("pre", {}, e.prompt)), turns),
        h("div", {}, h("h3", {}, "reward components"), components)));
    pane.dataset.id = e.id;
  }

  async function openEpisode(id) {
    state.selected = id;
    for (const tr of document.querySelectorAll("#episode-list tbody tr")) tr.classList.toggle("selected", tr.dataset.id === id);
    try {
      renderEpisode(await source.episode(id));
      history.replaceState(null, "", `#episode=${encodeURIComponent(id)}`);
    } catch (err) {
      $("#episode").replaceChildren(h("p", { class: "error" }, err.message));
    }
  }

  // ---- two steps side by side: their figures, their queries, their best and worst episodes.
  const MEASURES = [
    ["episodes", (x) => x.episodes], ["reward (mean)", (x) => x.reward_mean], ["reward (min)", (x) => x.reward_min],
    ["reward (max)", (x) => x.reward_max], ["score (mean)", (x) => x.score_mean], ["right rate", (x) => x.right_rate],
    ["format kept", (x) => x.format_ok_rate], ["searches / episode", (x) => x.searches_mean],
    ["searched at all", (x) => x.searched_rate], ["answer rate", (x) => x.answer_rate],
    ["distinct queries", (x) => x.distinct_queries], ["response tokens", (x) => x.response_tokens_mean],
    ["response chars", (x) => x.response_chars_mean], ["any violation", (x) => x.any_violation_rate],
    ["seconds", (x) => x.seconds_mean],
  ];

  async function renderCompare() {
    const sm = state.summary;
    const a = Number($("#cmp-a").value), b = Number($("#cmp-b").value);
    const byStep = new Map(sm.step_summaries.map((x) => [x.step, x]));
    const A = byStep.get(a), B = byStep.get(b);
    if (!A || !B) return;
    // Rules broken in neither step would only lengthen the table.
    const broken = sm.rules.filter((r) => (A.violation_rates[r] ?? 0) > 0 || (B.violation_rates[r] ?? 0) > 0);
    const rows = [...MEASURES, ...broken.map((r) => [`violation: ${r}`, (x) => x.violation_rates[r] ?? 0])];
    const table = $("#cmp-table");
    table.replaceChildren(h("tr", {}, h("th", {}, "measure"), h("th", {}, `step ${a}`), h("th", {}, `step ${b}`), h("th", {}, "B − A")));
    for (const [label, get] of rows) {
      const va = get(A), vb = get(B);
      const delta = va === null || vb === null ? null : vb - va;
      table.append(h("tr", { "data-measure": label }, h("th", {}, label), h("td", { class: "num" }, fmt(va)),
        h("td", { class: "num" }, fmt(vb)), h("td", { class: "num" }, delta === null ? "–" : (delta > 0 ? "+" : "") + fmt(delta))));
    }
    for (const [side, x] of [["a", A], ["b", B]]) {
      $(`#cmp-title-${side}`).textContent = `step ${x.step}: highest and lowest reward`;
      $(`#cmp-queries-${side}`).replaceChildren("top queries: ",
        ...(x.top_queries.length ? x.top_queries.map((q) => h("span", { class: "chip query" }, `${q.query} ×${q.count}`)) : ["none"]));
      $(`#cmp-episodes-${side}`).replaceChildren(...(await compareCards(x.step)));
    }
  }

  async function compareCards(step) {
    const [high, low] = await Promise.all([
      source.episodes({ step, sort: "-reward", limit: 2 }), source.episodes({ step, sort: "reward", limit: 2 })]);
    const seen = new Set();
    const cards = [];
    for (const row of [...high.episodes, ...low.episodes]) {
      if (seen.has(row.id)) continue;
      seen.add(row.id);
      const e = await source.episode(row.id);
      const card = h("div", { class: "cmp-episode", "data-id": e.id },
        h("div", {}, `reward ${fmt(e.reward)} · `, verdict(e.right), ` · ${plural(e.num_searches, "search", "searches")}`,
          e.violations.length ? " · " : "", e.violations.map((v) => h("span", { class: "chip" }, v))),
        h("div", {}, e.queries.map((q) => h("span", { class: "chip query" }, q))),
        h("div", {}, h("b", {}, "answer: "), e.answer ?? "– (none)", h("span", { class: "hint" }, ` · gold: ${e.gold.join(" | ")}`)),
        h("div", { class: "hint" }, e.prompt_tail.slice(-120)));
      card.addEventListener("click", () => { showTab("episodes"); openEpisode(e.id); });
      cards.push(card);
    }
    return cards;
  }

  // ---- tabs, refresh, start.
  function showTab(tab) {
    state.tab = tab;
    for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.tab === tab);
    for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== `tab-${tab}`;
    if (tab === "compare") renderCompare().catch((err) => showError(err.message));
  }

  // Refreshes overlap when the server answers slower than the interval; one that asked before the last one applied
  // must not put an older summary back (a step shown, then gone again).
  let asked = 0;
  let applied = 0;
  async function refresh(force = false) {
    const ticket = ++asked;
    let summary;
    try {
      summary = await source.summary();
    } catch (err) {
      showError(err.message);
      return;
    }
    if (ticket < applied) return;
    applied = ticket;
    showError("");
    const changed = !state.summary || summary.version !== state.summary.version;
    state.summary = summary;
    setStatus();
    if (!changed && !force) return;
    renderHeader();
    renderPlots();
    renderFilterOptions();
    await loadList();
    if (state.tab === "compare") await renderCompare();
  }

  function hashParams() {
    return new URLSearchParams(location.hash.slice(1));
  }

  function wire() {
    for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
    let timer = null;
    const later = () => { clearTimeout(timer); timer = setTimeout(() => loadList(), 250); };
    for (const id of ["#f-min", "#f-max", "#f-searches", "#f-q"]) $(id).addEventListener("input", later);
    for (const id of ["#f-violation", "#f-correct", "#f-sort"]) $(id).addEventListener("change", () => loadList());
    $("#f-step").addEventListener("change", () => { state.followLatest = false; loadList(); });
    $("#f-reset").addEventListener("click", () => {
      for (const id of ["#f-min", "#f-max", "#f-searches", "#f-q", "#f-violation", "#f-correct"]) $(id).value = "";
      $("#f-sort").value = "time";
      loadList();
    });
    $("#list-more").addEventListener("click", () => loadList(true));
    for (const id of ["#cmp-a", "#cmp-b"]) $(id).addEventListener("change", () => renderCompare().catch((err) => showError(err.message)));
    $("#auth").addEventListener("submit", (ev) => {
      ev.preventDefault();
      state.token = $("#auth-token").value.trim() || null;
      sessionStorage.setItem("searchrl-view-token", state.token || "");
      $("#auth").hidden = true;
      refresh(true);
    });
  }

  async function start() {
    const params = hashParams();
    if (!EMBEDDED) {
      state.token = params.get("token") || sessionStorage.getItem("searchrl-view-token") || null;
      if (params.has("token")) {
        sessionStorage.setItem("searchrl-view-token", state.token || "");
        history.replaceState(null, "", location.pathname + location.search);
      }
    }
    wire();
    showTab("curves");
    await refresh(true);
    if (params.get("episode")) {
      showTab("episodes");
      await openEpisode(params.get("episode"));
    }
    if (!EMBEDDED && CONFIG.refresh_s > 0) setInterval(() => refresh(), CONFIG.refresh_s * 1000);
    document.body.dataset.ready = "1";
  }

  start().catch((err) => showError(err.message));
})();
