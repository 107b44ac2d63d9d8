// agent-saga flight recorder: plain DOM, no framework, no build step.
// Everything taken from the log is written with textContent, never as markup.
"use strict";

const SYMBOL = {
  committed: "\u2192", compensated: "\u2713", kept: "=", failed: "\u2717", orphaned: "!",
  unresolved: "?", refused: "\u2298", "not applied": "\u2013", "in flight": "\u2026",
};
const OUTCOMES = ["compensated", "kept", "failed", "orphaned", "unresolved"];
const POLL_MS = 1000;
const FRAME_MS = 700;
// What the page draws of a long run at once: the browser's layout, not the data, is the limit
// (10,000 steps drawn took seconds per frame). Steps are drawn in a window around the step in
// focus (the replayed record's, or the one inspected), the records up to a cap; the rest is
// counted in a line saying so.
const MAX_STEPS_DRAWN = 300;
const MAX_RECORDS_DRAWN = 2000;

const state = {
  token: null, version: null, runs: [], filter: "all", selected: null, detail: null,
  frames: null, frame: -1, timer: null, inspected: null,
  // a replay: frames as served (each lists only the steps its record changed), the page of
  // the next ones, and the state the frames up to `at` build (step index -> step)
  total: 0, next: null, truncated: null, loading: null, at: -1, shown: null, byIndex: null,
  // the run the URL names (#run=<saga id>, and &watch=1 to replay it from its start), until it is shown
  opening: null,
  requests: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

const cls = (outcome) => "o-" + String(outcome || "open").replace(/ /g, "-");

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

// The number of requests in flight is on the body (data-requests): 0 once everything asked for
// has been drawn, which is what a screenshot waits for.
async function api(path) {
  document.body.dataset.requests = ++state.requests;
  try {
    return await request(path);
  } finally {
    document.body.dataset.requests = --state.requests;
  }
}

async function request(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const response = await fetch(path, { headers, cache: "no-store" });
  let body = null;
  try { body = await response.json(); } catch (err) { body = null; }
  if (response.status === 401) {
    throw new Error("This server needs its bearer token: open the page as " + location.origin + "/#token=<token>.");
  }
  if (!response.ok) throw new Error((body && body.error) || ("HTTP " + response.status));
  return body;
}

function time(us) {
  return us ? new Date(us / 1000).toISOString().replace("T", " ").replace("Z", " UTC") : "?";
}

function duration(us) {
  if (us < 1000) return us + " \u00b5s";
  if (us < 1e6) return (us / 1000).toFixed(1) + " ms";
  return (us / 1e6).toFixed(2) + " s";
}

// ---- the list of runs ----------------------------------------------------------------

function matches(run) {
  return state.filter === "all" || run.verdict_kind === state.filter;
}

function renderRuns() {
  const list = $("runs");
  const shown = state.runs.filter(matches);
  $("run-count").textContent = shown.length + " of " + state.runs.length + " run(s) shown";
  list.replaceChildren(...shown.map((run) => el("li", {},
    el("button", {
      type: "button", class: cls(run.verdict_kind), "data-run": run.id,
      "aria-current": run.id === state.selected ? "true" : "false",
    },
    el("span", { class: "name" }, run.name || "(unnamed)"), " ",
    el("span", { class: "tag" }, run.verdict),
    el("span", { class: "meta" }, run.id.slice(0, 8) + " \u00b7 " + run.steps + " step(s) \u00b7 " +
      run.tools.join(", "))))));
}

// ---- one run ---------------------------------------------------------------------------

function stepButton(step, label, what, unwind) {
  const outcome = unwind ? step.outcome : step.final;
  // The framework that made the call (a replay frame carries only the state: the run has the rest).
  const detail = state.byIndex && state.byIndex.get(step.index);
  const origin = !unwind && detail && detail.origin;
  return el("li", {}, el("button", {
    type: "button", class: cls(outcome), "data-step": step.index, "data-outcome": outcome,
    "data-served": step.served ? "true" : "false",
    "aria-pressed": state.inspected === step.index ? "true" : "false",
  },
  el("span", { class: "sym", "aria-hidden": "true" }, SYMBOL[outcome] || "\u2022"),
  el("span", { class: "step-text" }, el("span", {}, label), el("span", { class: "what" }, what),
    el("span", { class: "tag" }, step.label)),
  origin ? el("span", { class: "origin", title: "the framework that made the call" }, origin) : null));
}

// At most MAX_STEPS_DRAWN of `steps`, around the one whose index is `focus`; with a line for each
// part left out.
function drawWindow(list, steps, focus, draw) {
  let at = focus === null || focus === undefined ? -1 : steps.findIndex((s) => s.index === focus);
  if (at < 0) at = 0;
  const start = Math.max(0, Math.min(at - MAX_STEPS_DRAWN / 2, steps.length - MAX_STEPS_DRAWN));
  const shown = steps.slice(start, start + MAX_STEPS_DRAWN);
  const after = steps.length - start - shown.length;
  const items = shown.map(draw);
  if (start) items.unshift(el("li", { class: "elided muted" }, start + " step(s) above not drawn"));
  if (after) items.push(el("li", { class: "elided muted" }, after + " step(s) below not drawn"));
  list.replaceChildren(...items);
}

function renderSteps(view, focus) {
  // view: {steps, unwound, status, verdict, verdict_kind, tally}, from the run or from a replay frame
  const byIndex = new Map(view.steps.map((s) => [s.index, s]));
  if (focus === undefined) focus = state.inspected;
  // A step a resumed run took from the log is said so in words (the log's text stays text: el()).
  drawWindow($("forward"), view.steps, focus, (s) =>
    stepButton(s, s.index + ". " + s.tool,
      s.semantics + " \u00b7 " + s.state + (s.served ? " \u00b7 served from the log" : ""), false));
  const unwound = view.unwound.map((i) => byIndex.get(i)).filter(Boolean);
  drawWindow($("unwind"), unwound, focus, (s) => {
    const comp = state.byIndex && state.byIndex.get(s.index);
    const how = comp && comp.compensation ? (comp.compensation.description || comp.compensation.handler) : "no undo recorded";
    return stepButton(s, "undo " + s.index + ". " + s.tool, how, true);
  });
  $("unwind-title").textContent = unwound.length ? "Unwind, newest first" : "Unwind: none";
  const verdict = $("verdict");
  verdict.className = "verdict " + cls(view.verdict_kind);
  const counts = OUTCOMES.map((o) => (view.tally[o] || 0) + " " + o).join(" \u00b7 ");
  verdict.replaceChildren(el("span", { class: "tag", id: "verdict-text" }, view.verdict),
    el("span", { class: "counts" }, view.status === "completed" ? "nothing to undo" : counts));
}

function renderRun() {
  const run = state.detail;
  $("empty").hidden = !!run;
  $("run-view").hidden = !run;
  if (!run) return;
  $("run-title").textContent = (run.name || "(unnamed)") + " \u2014 " + run.verdict;
  // Two lines, always: on one, the id and the times together wrapped or not by how many digits
  // the duration had, and moved everything below them.
  $("run-meta").replaceChildren(el("span", { class: "line" }, "saga " + run.id),
    el("span", { class: "line" }, "started " + time(run.started_us) + " \u00b7 lasted " +
      duration(run.ended_us - run.started_us) + (run.recovered ? " \u00b7 finished by the recovery daemon" : "")));
  $("run-cause").textContent = run.cause ? "Cause: " + run.cause : "";
  $("run-verdicts").replaceChildren(...(run.verdicts || []).map((v) => el("li", { class: "verdict-line " + v.kind },
    "seq " + v.seq + " " + v.type + " \u2014 " + v.label)));
  const records = run.records.slice(0, MAX_RECORDS_DRAWN).map((r) => el("li", {},
    "seq " + r.seq + " " + r.type + (r.step ? " step " + r.step : "") + (r.brief ? " \u2014 " + r.brief : "")));
  if (run.records.length > records.length) {
    records.push(el("li", { class: "elided muted" }, (run.records.length - records.length) +
      " later record(s) not drawn (agent-saga graph and export show them all)"));
  }
  $("records").replaceChildren(...records);
  if (state.frames) renderSteps(frameView(), state.focus);
  else renderSteps(run);
  renderInspector();
}

async function selectRun(id, focus) {
  stopReplay(true);
  state.selected = id;
  state.inspected = null;
  renderRuns();
  try {
    setDetail(await api("/api/runs/" + encodeURIComponent(id)));
    showError("");
  } catch (err) {
    showError(err.message);
    return;
  }
  renderRun();
  if (focus) $("run").focus();
}

// ---- the inspector ---------------------------------------------------------------------

function value(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

function argsTable(args) {
  if (!args || !args.length) return el("p", { class: "muted" }, "none recorded");
  return el("table", { class: "args" },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "name"), el("th", { scope: "col" }, "value"))),
    el("tbody", {}, ...args.map((a) => el("tr", { "data-kind": a.kind },
      el("td", {}, el("code", {}, a.name)),
      el("td", {}, a.kind === "redacted"
        ? el("span", { class: "badge redacted" }, "redacted")
        : el("span", {}, a.kind === "reference" ? el("span", { class: "badge reference" }, "reference") : null,
          a.kind === "reference" ? " " : null, el("code", {}, value(a.value))))))));
}

function dl(pairs) {
  const list = el("dl", {});
  for (const [k, v] of pairs) if (v !== null && v !== undefined && v !== "") list.append(el("dt", {}, k), el("dd", {}, v));
  return list;
}

function setDetail(run) {
  state.detail = run;
  state.byIndex = new Map(run.steps.map((s) => [s.index, s]));  // looked up per step drawn
}

function renderInspector() {
  const box = $("inspect");
  const step = state.byIndex && state.byIndex.get(state.inspected);
  $("inspect-empty").hidden = !!step;
  if (!step) { box.replaceChildren(); return; }
  const parts = [
    el("h3", {}, "Step " + step.index + ": " + step.tool),
    dl([["semantics", step.semantics], ["state", step.state], ["outcome", step.label],
      ["resumed run", step.served ? "served from the log: nothing ran" : null],
      ["operation id", step.op ? el("code", {}, step.op) : null], ["framework", step.origin], ["error", step.error],
      ["refused by", step.refusal ? (step.refusal.rule + ": " + step.refusal.reason) : null],
      ["verdict", step.note]]),
    el("h3", {}, "Arguments"), argsTable(step.args),
    ...(step.provenance && step.provenance.length
      ? [el("h3", {}, "Provenance"), dl(step.provenance.map((p) => [p.name, p.claim]))] : []),
    el("h3", {}, "Compensation"),
  ];
  const comp = step.compensation;
  if (comp) {
    parts.push(dl([["handler", comp.handler ? el("code", {}, comp.handler) : "(an in-process callable)"],
      ["call", comp.description ? el("code", {}, comp.description) : null],
      ["idempotency key", comp.key ? el("code", {}, comp.key) : null],
      ["after a crash", comp.recoverable ? "another process can run it" : "only this process could run it"]]),
    el("h3", {}, "Its arguments"), argsTable(comp.kwargs));
  } else {
    parts.push(el("p", { class: "muted" }, "none recorded for this step"));
  }
  parts.push(el("h3", {}, "What the unwind did"));
  parts.push(step.undo_records.length
    ? el("ol", { class: "undo-records" }, ...step.undo_records.map((r) => el("li", {},
      "seq " + r.seq + " " + r.type + ["attempt", "attempts", "by", "error", "kind"]
        .filter((k) => r[k] !== undefined).map((k) => " \u00b7 " + k + " " + r[k]).join(""))))
    : el("p", { class: "muted" }, "nothing: the saga did not unwind this step"));
  box.replaceChildren(...parts);
}

function inspect(index) {
  state.inspected = index;
  for (const b of document.querySelectorAll(".timeline button")) {
    b.setAttribute("aria-pressed", Number(b.dataset.step) === index ? "true" : "false");
  }
  renderInspector();
}

// ---- replay ("watch from start") --------------------------------------------------------

// The run after frame `n`: the changes of frames 0..n applied in order (going back starts over,
// which costs what going forward did: one pass over the frames, never one per step).
function frameView() {
  const f = state.frames[state.frame];
  if (state.frame < state.at) { state.shown = new Map(); state.at = -1; state.focus = null; }
  for (let i = state.at + 1; i <= state.frame; i++) {
    for (const s of state.frames[i].changed) state.shown.set(s.index, s);
    if (state.frames[i].step) state.focus = state.frames[i].step;  // the drawn window follows the records
  }
  state.at = state.frame;
  const steps = [...state.shown.values()].sort((a, b) => a.index - b.index);
  const unwound = steps.filter((s) => s.outcome).map((s) => s.index).reverse();
  return { steps, unwound, status: f.status, verdict: f.verdict, verdict_kind: f.verdict_kind, tally: f.tally };
}

function showFrame(n) {
  state.frame = Math.max(0, Math.min(n, state.frames.length - 1));
  const f = state.frames[state.frame];
  renderSteps(frameView(), state.focus);
  const loaded = state.frame === state.frames.length - 1;
  const last = loaded && state.next === null;
  $("replay-status").textContent = "record " + (state.frame + 1) + " of " + state.total + ": seq " + f.seq +
    " " + f.type + (f.step ? " (step " + f.step + ")" : "") +
    (last && state.truncated ? " \u2014 " + state.truncated : last ? " \u2014 end of the run: " + f.verdict : "");
  $("step-back").disabled = state.frame === 0;
  $("step-fwd").disabled = last;
  $("to-end").disabled = last;
  if (last) pauseReplay();
  else if (loaded) more();  // fetch the next page before it is needed
}

// The next page of frames, once (a page is a bounded amount of the server's work).
function more() {
  if (state.next === null) return Promise.resolve();
  if (!state.loading) {
    const id = state.selected;
    state.loading = api("/api/runs/" + encodeURIComponent(id) + "/replay?from=" + state.next).then((page) => {
      if (state.selected !== id || !state.frames) return;
      for (const f of page.frames) state.frames.push(f);  // (a spread of a whole page would hit the argument limit)
      state.next = page.next;
      state.total = page.total;  // the log may have grown since the first page
      state.truncated = page.truncated;
    }).catch((err) => showError(err.message)).finally(() => { state.loading = null; });
  }
  return state.loading;
}

async function toEnd() {
  pauseReplay();
  while (state.frames && state.next !== null) await more();
  if (state.frames) showFrame(state.frames.length - 1);
}

function pauseReplay() {
  clearInterval(state.timer);
  state.timer = null;
  $("pause").disabled = true;
}

function stopReplay(forget) {
  pauseReplay();
  if (forget) {
    state.frames = null;
    state.frame = -1;
    state.next = null;
    state.at = -1;
    $("replay-status").textContent = "";
    for (const id of ["step-back", "step-fwd", "to-end"]) $(id).disabled = true;
  }
}

function play() {
  pauseReplay();
  $("pause").disabled = false;
  state.timer = setInterval(() => {
    if (state.frame < state.frames.length - 1) showFrame(state.frame + 1);
    else more();  // the next page is on its way: wait for it
  }, FRAME_MS / Number($("speed").value));
}

async function watchFromStart() {
  if (!state.selected) return;
  stopReplay(true);
  let page;
  try {
    page = await api("/api/runs/" + encodeURIComponent(state.selected) + "/replay");
  } catch (err) {
    showError(err.message);
    return;
  }
  if (!page.frames.length) return;
  Object.assign(state, { frames: page.frames, next: page.next, total: page.total, truncated: page.truncated,
    at: -1, shown: new Map(), focus: null });
  showFrame(0);
  play();
}

// ---- live updates ------------------------------------------------------------------------

async function poll() {
  try {
    const since = state.version === null ? "" : "?since=" + state.version;
    const data = await api("/api/runs" + since);
    showError("");
    if (!data.unchanged) {
      const before = state.runs.find((r) => r.id === state.selected);
      state.version = data.version;
      state.runs = data.runs;
      $("log-location").textContent = data.location;
      const chain = $("chain");
      chain.textContent = "chain: " + data.chain.label;
      chain.className = "chain " + (data.chain.status === "intact" ? "ok" : "bad");
      $("live").textContent = "live \u00b7 " + data.chain.records + " record(s) \u00b7 updated " +
        new Date().toLocaleTimeString();
      renderRuns();
      if (state.opening) await openNamedRun();
      const after = state.runs.find((r) => r.id === state.selected);
      if (after && before && !state.frames &&
          (after.ended_us !== before.ended_us || after.verdict !== before.verdict || after.steps !== before.steps)) {
        setDetail(await api("/api/runs/" + encodeURIComponent(state.selected)));
        renderRun();
      }
    }
  } catch (err) {
    showError(err.message);
  }
  setTimeout(poll, POLL_MS);
}

// The run the URL named, once the log has been read: selected, and replayed if asked.
async function openNamedRun() {
  const { run, watch } = state.opening;
  state.opening = null;
  if (!state.runs.some((r) => r.id === run)) {
    showError("The address names run " + run + ", which is not in this log.");
    return;
  }
  await selectRun(run, false);
  if (watch) await watchFromStart();
}

// ---- keyboard: arrows move within a list, Enter/Space (native buttons) open ---------------

function arrowKeys(list) {
  list.addEventListener("keydown", (event) => {
    const buttons = [...list.querySelectorAll("button")];
    const at = buttons.indexOf(document.activeElement);
    if (at < 0) return;
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: buttons.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const target = buttons[Math.max(0, Math.min(to, buttons.length - 1))];
    if (target) target.focus();
  });
}

function start() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem("agent-saga-token", hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);  // keep it out of the address bar
  }
  state.token = sessionStorage.getItem("agent-saga-token");
  if (hash.get("run")) state.opening = { run: hash.get("run"), watch: hash.get("watch") === "1" };
  for (const radio of document.querySelectorAll("input[name=filter]")) {
    radio.addEventListener("change", () => { state.filter = radio.value; renderRuns(); });
  }
  $("runs").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-run]");
    if (button) selectRun(button.dataset.run, false);
  });
  for (const id of ["forward", "unwind"]) {
    $(id).addEventListener("click", (event) => {
      const button = event.target.closest("button[data-step]");
      if (button) inspect(Number(button.dataset.step));
    });
    arrowKeys($(id));
  }
  arrowKeys($("runs"));
  $("watch").addEventListener("click", watchFromStart);
  $("pause").addEventListener("click", pauseReplay);
  $("step-back").addEventListener("click", () => { pauseReplay(); showFrame(state.frame - 1); });
  $("step-fwd").addEventListener("click", () => { pauseReplay(); showFrame(state.frame + 1); });
  $("to-end").addEventListener("click", toEnd);
  $("speed").addEventListener("change", () => { if (state.timer) play(); });
  poll();
}

document.addEventListener("DOMContentLoaded", start);
