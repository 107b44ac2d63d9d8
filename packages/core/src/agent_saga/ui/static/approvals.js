// agent-saga approvals: every string the server sends is already inert (control and bidi
// characters arrive as visible escapes); it is still only ever put into the page as text.
"use strict";

const $ = (id) => document.getElementById(id);
// The request on show and the digest shown with it: every passkey request sends that digest, and
// the server refuses (409) when the request is no longer what the person read.
let current = null;
let shown = null;
// The registration under way: the session the server issued with its options.
let session = null;

function text(el, value) { el.textContent = value == null ? "" : String(value); }
function shout(message) { const e = $("error"); text(e, message); e.hidden = !message; if (message) text($("status"), ""); }
function say(message) { text($("status"), message); shout(""); }

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const res = await fetch(path, init);
  const data = await res.json();
  if (!res.ok) {
    const err = new Error(data.error || res.statusText);
    err.status = res.status;
    throw err;
  }
  return data;
}

async function loadList() {
  const data = await api("/api/requests");
  text($("store"), "store: " + data.store);
  const list = $("pending");
  list.replaceChildren();
  for (const r of data.pending) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.request = r.id;
    text(b, r.tool + " (rule " + r.rule + ", saga " + r.saga + ", step " + r.step + ", id " + r.id.slice(0, 8) + ")");
    b.addEventListener("click", () => show(r.id).catch((e) => shout(e.message)));
    li.append(b);
    list.append(li);
  }
  $("none").hidden = data.pending.length > 0;
}

async function show(id) {
  const a = await api("/api/requests/" + encodeURIComponent(id));
  current = a.id;
  shown = a.digest;
  text($("a-tool"), a.tool);
  text($("a-rule"), a.rule);
  text($("a-reason"), a.reason);
  text($("a-where"), a.saga + ", step " + a.step + " (" + a.semantics + ")");
  text($("a-expires"), a.expires_at);
  text($("a-id"), a.id);
  text($("a-digest"), "sha256:" + a.digest);
  const body = $("a-args").tBodies[0];
  body.replaceChildren();
  for (const [name, value] of a.args) {
    const tr = document.createElement("tr");
    const k = document.createElement("td");
    const v = document.createElement("td");
    text(k, name);
    text(v, value);
    tr.append(k, v);
    body.append(tr);
  }
  $("deny-note").value = "";
  $("action").hidden = false;
  say("");
}

async function approve() {
  if (!current) return;
  const options = await api("/api/requests/" + current + "/options", { digest: shown });
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
  const credential = await navigator.credentials.get({ publicKey });
  const done = await api("/api/requests/" + current + "/approve", { credential: credential.toJSON(), digest: shown });
  say("approved by " + done.approver + " (action sha256:" + done.digest + ")");
  $("action").hidden = true;
  current = null;
  await loadList();
}

async function deny() {
  if (!current) return;
  // The note is signed with the denial: the same text goes to the options and to the decision.
  const note = $("deny-note").value;
  const options = await api("/api/requests/" + current + "/deny-options", { note, digest: shown });
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
  const credential = await navigator.credentials.get({ publicKey });
  const done = await api("/api/requests/" + current + "/deny", { credential: credential.toJSON(), note, digest: shown });
  say("denied by " + done.approver + (done.note ? " (note: " + done.note + ")" : "") +
    " (action sha256:" + done.digest + ")");
  $("action").hidden = true;
  $("deny-note").value = "";
  current = null;
  await loadList();
}

async function register() {
  const approver = $("approver").value;
  const issued = await api("/api/register/options", { approver });
  session = issued.session;
  const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(issued.options);
  const credential = await navigator.credentials.create({ publicKey });
  // The enrolment token, when this server adds passkeys itself, is in the URL it printed.
  const token = new URLSearchParams(location.hash.slice(1)).get("enroll");
  const done = await api("/api/register", { session, credential: credential.toJSON(), enroll_token: token });
  session = null;
  const out = $("enrol");
  text(out, done.enrolled ? "registered on this host: " + done.line
    : "verified. To let gateways on the agent host accept it, run there as root:\n" + done.command);
  out.hidden = false;
  say("passkey registered for " + done.approver);
}

// A request changed since it was shown: show it again as it is now, then say why.
async function lookAgain(e) {
  if (e.status === 409 && current) await show(current).catch(() => {});
  shout(e.message);
}

document.addEventListener("DOMContentLoaded", () => {
  $("approve").addEventListener("click", () => approve().catch(lookAgain));
  $("deny").addEventListener("click", () => deny().catch(lookAgain));
  $("register").addEventListener("click", () => register().catch((e) => shout(e.message)));
  loadList().catch((e) => shout(e.message));
});
