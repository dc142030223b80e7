// baton dashboard: reads and acts only through the admin API (/api/...).
// No framework: a hash router, a one-second polling loop, DOM built with
// textContent (never innerHTML with data from the server).
"use strict";

const PAGE = 100;          // locks or sessions per page
const POLL_MS = 1000;      // one refresh per second while the tab is visible
const HISTORY = 120;       // chart points (two minutes)
const OWNER_DEBOUNCE_MS = 250; // the owner lookup asks once typing pauses this long

const state = { skew: 0, info: null, hist: [], prevGrants: null, seq: 0, inflight: false, again: false };
// Render timings, read by the browser tests and handy in the console.
const perf = window.batonPerf = { renders: 0, firstRenderMs: null, lastRenderMs: 0, maxRenderMs: 0, lastFetchMs: 0, ownerLookups: 0 };
const t0 = performance.now();

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ headers: { Accept: "application/json" }, cache: "no-store" }, opts));
  let body = null;
  try { body = await r.json(); } catch (_) { /* empty or not JSON */ }
  if (!r.ok) {
    const err = new Error((body && body.error) || (r.status + " " + r.statusText));
    err.status = r.status;
    throw err;
  }
  return body;
}

function now() { return Date.now() + state.skew; }
function dur(ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
}
function ago(t) { return dur(now() - Date.parse(t)); }
function ref(c) { return c.session + "/" + c.claim; }
// A range lock's owner (SESSION/OWNER) and its bytes.
function orf(h) { return h.session + "/" + h.owner; }
function bytes(h) { return h.length ? h.start + "–" + (h.start + h.length - 1) : h.start + "–EOF"; }
function who(c) {
  return [c.label, c.identity, c.remote_addr].filter(Boolean).join(" · ");
}
// The whole queue's length: the API sends one page of waiters.
function qlen(l) { return Math.max(l.waiters_total || 0, (l.waiters_offset || 0) + l.waiters.length); }
// A note for the waiters a page leaves out, or nothing.
function moreWaiters(l, tag) {
  const more = qlen(l) - (l.waiters_offset || 0) - l.waiters.length;
  return more > 0 ? [el(tag, { class: "muted more-waiters", text: "… and " + more + " more" })] : [];
}
function mode(l) {
  const c = (l.holders[0] || l.waiters[0] || {});
  return l.limit ? "semaphore (" + l.limit + ")" : (c.mode || "");
}
function status(msg, isError) {
  const s = document.getElementById("status");
  s.textContent = msg || "";
  s.className = isError ? "error" : "";
}

// ---- routing ----

function route() {
  const h = location.hash.replace(/^#/, "") || "/locks";
  const [path, query] = h.split("?");
  const q = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "lock" && parts.length > 1) return { view: "lock", name: decodeURIComponent(parts.slice(1).join("/")) };
  if (parts[0] === "sessions") return { view: "sessions", page: +q.get("page") || 0 };
  if (parts[0] === "cluster") return { view: "cluster" };
  if (parts[0] === "ranges") return { view: "ranges", match: q.get("match") || "", page: +q.get("page") || 0 };
  return { view: "locks", match: q.get("match") || "", page: +q.get("page") || 0 };
}
function go(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
  const s = q.toString();
  location.hash = "#/" + view + (s ? "?" + s : "");
}

// ---- views ----
// Each view builds its frame once (setup) and refreshes its content on
// every poll (update), so an input keeps its focus and text.

const views = {
  locks: {
    tab: "tab-locks",
    setup(r) {
      const input = el("input", { type: "search", id: "match", name: "match", value: r.match, placeholder: "glob, e.g. deploy/*",
        "aria-label": "Filter locks by name (glob: * and ?)" });
      const form = el("form", { class: "filter", role: "search", on: { submit: (e) => { e.preventDefault(); go("locks", { match: input.value }); } } },
        el("label", { for: "match", text: "Locks matching" }), input, el("button", { type: "submit", text: "Filter" }));
      return [form, el("div", { id: "content" })];
    },
    async update(r) {
      const q = new URLSearchParams({ limit: PAGE, offset: r.page * PAGE });
      if (r.match) q.set("match", r.match);
      const list = await api("/api/locks?" + q);
      return () => {
        const rows = list.locks.map((l) => el("tr", { "data-lock": l.name },
          el("td", { "data-label": "Lock" }, el("a", { href: "#/lock/" + encodeURIComponent(l.name), class: "mono", text: l.name })),
          el("td", { "data-label": "Mode", text: mode(l) }),
          el("td", { "data-label": "Holders" }, el("ul", { class: "holders" }, l.holders.map((h) => el("li", { class: "holder" },
            el("span", { class: "mono", text: "token " + h.token }), " ", who(h), h.value ? el("span", { class: "value mono", text: " = " + h.value }) : null, " ",
            el("span", { class: "muted", text: "held " + ago(h.since) }))), l.watchers ? el("li", { class: "watchers muted", text: l.watchers + (l.watchers === 1 ? " watcher" : " watchers") }) : null)),
          el("td", { "data-label": "Waiters" }, l.waiters.length ? el("ol", { class: "waiters" }, l.waiters.map((w) => el("li", { class: "waiter" },
            who(w) || ref(w), " ", el("span", { class: "muted", text: "waited " + ago(w.queued_at) }))), moreWaiters(l, "li")) : el("span", { class: "muted", text: "none" }))));
        const table = el("table", { "aria-label": "Locks" },
          el("thead", {}, el("tr", {}, ["Lock", "Mode", "Holders (token, who, held for)", "Waiters in order (waited for)"].map((t) => el("th", { scope: "col", text: t })))),
          el("tbody", {}, rows));
        return [pager(list.total, r, "locks", { match: r.match }), list.total ? table : el("p", { class: "muted", text: "No lock is held" + (r.match ? " matching " + r.match : "") + "." })];
      };
    },
  },

  lock: {
    tab: "tab-locks",
    setup(r) {
      return [el("p", {}, el("a", { href: "#/locks", text: "← all locks" })), el("h2", {}, "Lock ", el("code", { text: r.name })), el("div", { id: "content" })];
    },
    async update(r) {
      const [l, o] = await Promise.all([
        api("/api/locks/" + encodeURIComponent(r.name)).catch((e) => { if (e.status === 404) return null; throw e; }),
        ownerOf(r.name)]);
      const head = o ? [ownerLine(r.name, o)] : [];
      if (!l) return () => [...head, el("p", { class: "muted", id: "not-held", text: "Nobody holds or waits for this lock now" + (o && o.owner && !o.owner.self ? " on this node." : ".") })];
      return () => {
        const holders = el("table", { "aria-label": "Holders" },
          el("thead", {}, el("tr", {}, ["Token", "Claim", "Mode", "Label", "Identity", "Address", "Value", "Held for", "Lease", ""].map((t) => el("th", { scope: "col", text: t })))),
          el("tbody", {}, l.holders.map((h) => el("tr", { class: "holder", "data-token": h.token },
            el("td", { "data-label": "Token", class: "mono", text: h.token }),
            el("td", { "data-label": "Claim", class: "mono", text: ref(h) + " (v" + h.protocol + ")" }),
            el("td", { "data-label": "Mode", text: h.mode }),
            el("td", { "data-label": "Label", text: h.label || "—" }),
            el("td", { "data-label": "Identity", text: h.identity || "—" }),
            el("td", { "data-label": "Address", class: "mono", text: h.remote_addr }),
            el("td", { "data-label": "Value", class: "mono value", text: h.value || "—" }),
            el("td", { "data-label": "Held for", text: ago(h.since) }),
            el("td", { "data-label": "Lease", text: dur(h.lease_ms) }),
            el("td", {}, el("button", { class: "danger", type: "button", "aria-label": "Force-release token " + h.token + " of lock " + l.name,
              on: { click: () => confirmRelease(l, h) } }, "Force-release"))))));
        const waiters = el("table", { "aria-label": "Waiters in order" },
          el("thead", {}, el("tr", {}, ["#", "Claim", "Mode", "Label", "Identity", "Address", "Waited for", ""].map((t) => el("th", { scope: "col", text: t })))),
          el("tbody", {}, l.waiters.map((w, i) => el("tr", { class: "waiter", "data-claim": ref(w) },
            el("td", { "data-label": "Position", text: i + 1 }),
            el("td", { "data-label": "Claim", class: "mono", text: ref(w) + " (v" + w.protocol + ")" }),
            el("td", { "data-label": "Mode", text: w.mode }),
            el("td", { "data-label": "Label", text: w.label || "—" }),
            el("td", { "data-label": "Identity", text: w.identity || "—" }),
            el("td", { "data-label": "Address", class: "mono", text: w.remote_addr }),
            el("td", { "data-label": "Waited for", text: ago(w.queued_at) }),
            el("td", {}, el("button", { type: "button", "aria-label": "Kick waiter " + ref(w) + " from lock " + l.name,
              on: { click: () => confirmKick(l, w, i) } }, "Kick"))))));
        return [...head, el("p", {}, "Mode: " + mode(l)),
          el("p", { id: "watchers" }, "Watched by " + (l.watchers || 0) + (l.watchers === 1 ? " session." : " sessions.")),
          el("h2", {}, "Holders (" + l.holders.length + ")"), holders,
          el("h2", {}, "Waiters (" + qlen(l) + ")"), l.waiters.length ? waiters : el("p", { class: "muted", text: "Nobody waits." }), ...moreWaiters(l, "p")];
      };
    },
  },

  // Byte-range (fcntl) and flock locks by key: each holder's owner,
  // type and bytes, the waiting requests in order, and a release of one
  // owner's locks on the key.
  ranges: {
    tab: "tab-ranges",
    setup(r) {
      const input = el("input", { type: "search", id: "range-match", name: "match", value: r.match, placeholder: "glob, e.g. mount:etc/*",
        "aria-label": "Filter range-lock keys (glob: * and ?)" });
      const form = el("form", { class: "filter", role: "search", on: { submit: (e) => { e.preventDefault(); go("ranges", { match: input.value }); } } },
        el("label", { for: "range-match", text: "Range locks on keys matching" }), input, el("button", { type: "submit", text: "Filter" }));
      return [form, el("div", { id: "content" })];
    },
    async update(r) {
      const q = new URLSearchParams({ limit: PAGE, offset: r.page * PAGE });
      if (r.match) q.set("match", r.match);
      const list = await api("/api/ranges?" + q);
      return () => {
        const rows = list.ranges.map((k) => {
          const owners = [];
          for (const h of k.holders) if (!owners.some((o) => orf(o) === orf(h))) owners.push(h);
          return el("tr", { "data-key": k.key, "data-ns": k.ns },
            el("td", { "data-label": "Key" }, el("span", { class: "mono", text: k.key }), " ", el("span", { class: "muted", text: k.ns })),
            el("td", { "data-label": "Held" }, el("ul", { class: "holders" }, k.holders.map((h) => el("li", { class: "range-holder", "data-owner": orf(h) },
              el("span", { class: "mono", text: h.type + " " + bytes(h) }), " ", who(h) || orf(h), " ", el("span", { class: "muted", text: "owner " + orf(h) })))),
              k.holders_total > k.holders.length ? el("span", { class: "muted", text: "… and " + (k.holders_total - k.holders.length) + " more" }) : null),
            el("td", { "data-label": "Waiting" }, k.waiters.length ? el("ol", { class: "waiters" }, k.waiters.map((w) => el("li", { class: "range-waiter" },
              el("span", { class: "mono", text: w.type + " " + bytes(w) }), " ", who(w) || orf(w), " ", el("span", { class: "muted", text: "waited " + ago(w.since) })))) : el("span", { class: "muted", text: "none" }),
              k.waiters_total > k.waiters.length ? el("span", { class: "muted", text: "… and " + (k.waiters_total - k.waiters.length) + " more" }) : null),
            el("td", {}, owners.map((o) => el("button", { class: "danger", type: "button", "aria-label": "Release the range locks of owner " + orf(o) + " on " + k.key,
              on: { click: () => confirmRangeRelease(k, o) } }, "Release " + orf(o)))));
        });
        const table = el("table", { "aria-label": "Range locks" },
          el("thead", {}, el("tr", {}, ["Key", "Held (type, bytes, who)", "Waiting in order", ""].map((t) => el("th", { scope: "col", text: t })))),
          el("tbody", {}, rows));
        return [pager(list.total, r, "ranges", { match: r.match }), list.total ? table : el("p", { class: "muted", text: "No range lock is held" + (r.match ? " on a key matching " + r.match : "") + "." })];
      };
    },
  },

  sessions: {
    tab: "tab-sessions",
    setup() { return [el("h2", { text: "Sessions" }), el("div", { id: "content" })]; },
    async update(r) {
      const list = await api("/api/sessions?" + new URLSearchParams({ limit: PAGE, offset: r.page * PAGE }));
      return () => {
        const table = el("table", { "aria-label": "Sessions" },
          el("thead", {}, el("tr", {}, ["Session", "Label", "Identity", "Address", "Held", "Waiting", "Ranges held, waiting", "Lease", "Last heard"].map((t) => el("th", { scope: "col", text: t })))),
          el("tbody", {}, list.sessions.map((s) => el("tr", { class: "session" },
            el("td", { "data-label": "Session", class: "mono", text: s.session + " (v" + s.protocol + ")" }),
            el("td", { "data-label": "Label", text: s.label || "—" }),
            el("td", { "data-label": "Identity", text: s.identity || "—" }),
            el("td", { "data-label": "Address", class: "mono", text: s.remote_addr }),
            el("td", { "data-label": "Held", text: s.held }),
            el("td", { "data-label": "Waiting", text: s.waiting }),
            el("td", { "data-label": "Ranges held, waiting", text: (s.ranges_held || 0) + ", " + (s.ranges_waiting || 0) }),
            el("td", { "data-label": "Lease", text: dur(s.lease_ms) }),
            el("td", { "data-label": "Last heard", text: ago(s.last_seen) + " ago" })))));
        return [pager(list.total, r, "sessions", {}), list.total ? table : el("p", { class: "muted", text: "No session is open." })];
      };
    },
  },

  // Shown only when /api/info reports "cluster": true: the members as
  // this node sees them, each one's health, and who owns a name.
  cluster: {
    tab: "tab-cluster",
    setup() {
      const input = el("input", { type: "search", id: "owner-name", name: "owner-name", placeholder: "lock name, e.g. deploy/prod",
        autocomplete: "off", spellcheck: "false", "aria-label": "Lock name whose owner node to find",
        on: { input: () => ownerSoon(input.value, OWNER_DEBOUNCE_MS) } });
      const form = el("form", { class: "filter", role: "search", "aria-label": "Owner of a name",
        on: { submit: (e) => { e.preventDefault(); ownerSoon(input.value, 0); } } },
        el("label", { for: "owner-name", text: "Which node owns" }), input);
      state.owner = null;
      return [el("h2", { text: "Cluster" }), form, el("p", { id: "owner-answer", role: "status", "aria-live": "polite" }), el("div", { id: "content" })];
    },
    async update() {
      if (!state.info || !state.info.cluster) return () => [el("p", { class: "muted", text: "This server is not clustered." })];
      const c = await api("/api/cluster");
      // A new ring may move the name: ask again (for what the input
      // holds now).
      const input = document.getElementById("owner-name");
      if (state.owner && state.owner.ring_version !== c.ring_version && input) ownerSoon(input.value, 0);
      return () => [clusterSummary(c), membersTable(c)];
    },
  },
};

function clusterSummary(c) {
  const me = c.members.find((m) => m.self) || {};
  return el("p", { id: "cluster-summary", "data-leader": c.leader, "data-ring-version": c.ring_version },
    "Asked ", el("b", { text: c.node }), " (" + c.raft_state + ", epoch " + c.epoch + ")" + (me.state ? ", " + me.state : "") + ". ",
    c.leader ? ["Leader: ", el("b", { text: c.leader }), ". "] : el("span", { class: "error", text: "No leader known. " }),
    "Ring version ", el("b", { id: "ring-version", text: c.ring_version }), ": " + (c.ring.join(" ") || "empty") +
      ", committed " + ago(c.ring_committed_at) + " ago. ",
    c.max_lease_ms ? "Largest lease " + dur(c.max_lease_ms) + ". " : "No lease recorded yet. ",
    el("span", { class: "muted", text: "Health checked " + ago(c.checked_at) + " ago." }));
}

// problems lists what is wrong with what a member says of itself,
// compared with the node asked.
function problems(c, m) {
  const h = m.health, notes = [];
  if (!h) return ["not answering"];
  if (h.ring_version < c.ring_version) notes.push("behind: ring " + h.ring_version);
  if (!h.leader) notes.push("knows no leader");
  else if (c.leader && h.leader !== c.leader) notes.push("follows " + h.leader);
  return notes;
}

function health(c, m) {
  const p = problems(c, m);
  if (!p.length) return "ok";
  return [el("span", { class: "error", text: p.join(", ") }), m.error ? el("div", { class: "muted small", text: m.error }) : null];
}

function membersTable(c) {
  const view = (m) => {
    if (m.leader_view === "unreachable") return el("span", { class: "error", text: "unreachable" + (m.last_contact ? ", last heard " + ago(m.last_contact) + " ago" : "") });
    return m.leader_view === "reachable" ? (m.leader ? "leads" : "reachable") : el("span", { class: "muted", text: "unknown" });
  };
  const link = (addr, hash) => addr ? el("a", { href: location.protocol + "//" + addr + "/" + hash, class: "mono", text: addr }) : "—";
  const bad = (m) => m.leader_view === "unreachable" || problems(c, m).length > 0;
  return el("table", { "aria-label": "Members" },
    el("thead", {}, el("tr", {}, ["Node", "State", "Raft state", "Ring", "Epoch", "Leader sees", "Health", "Locks · waiters · connections", "Addresses"].map((t) => el("th", { scope: "col", text: t })))),
    el("tbody", {}, c.members.map((m) => el("tr", { class: "member" + (bad(m) ? " unhealthy" : ""), "data-node": m.id, "data-leader": m.leader ? "true" : null },
      el("td", { "data-label": "Node" }, el("b", { class: "mono", text: m.id }),
        m.leader ? el("span", { class: "badge", text: "leader" }) : null, m.self ? el("span", { class: "badge self", text: "this node" }) : null),
      el("td", { "data-label": "State", text: m.state }),
      el("td", { "data-label": "Raft state", text: m.health ? m.health.raft_state : "—" }),
      el("td", { "data-label": "Ring version", text: m.health ? m.health.ring_version : "—" }),
      el("td", { "data-label": "Epoch", class: "mono", text: m.epoch || "—" }),
      el("td", { "data-label": "Leader sees" }, view(m)),
      el("td", { "data-label": "Health" }, health(c, m)),
      el("td", { "data-label": "Locks · waiters · connections", text: m.health ? m.health.locks + " · " + m.health.waiters + " · " + m.health.connections : "—" }),
      el("td", { "data-label": "Addresses" }, el("ul", { class: "addrs" },
        el("li", {}, "protocol ", el("span", { class: "mono", text: m.protocol_addr || "—" })),
        el("li", {}, "admin ", link(m.admin_addr, "#/cluster")),
        el("li", {}, "raft ", el("span", { class: "mono", text: m.raft_addr || "—" }))))))));
}

// ---- owner of a name ----

let ownerTimer = null, ownerSeq = 0;

// ownerSoon looks up the owner of name after delay, unless asked again
// meanwhile: one request per pause in typing.
function ownerSoon(name, delay) {
  clearTimeout(ownerTimer);
  ownerTimer = setTimeout(() => lookupOwner(name), delay);
}

async function lookupOwner(name) {
  const seq = ++ownerSeq;
  const out = () => (seq === ownerSeq ? document.getElementById("owner-answer") : null); // null: a later lookup or another view
  if (!name) {
    state.owner = null;
    if (out()) out().replaceChildren();
    return;
  }
  perf.ownerLookups++;
  let o;
  try {
    o = await api("/api/cluster/owner?" + new URLSearchParams({ name }));
  } catch (e) {
    if (out()) out().replaceChildren(el("span", { class: "error", text: e.message }));
    return;
  }
  if (!out()) return;
  state.owner = o;
  out().dataset.owner = o.owner ? o.owner.id : "";
  out().replaceChildren(...ownerText(name, o, true));
}

// ownerOf asks the owner of name when the server is clustered (null
// otherwise); a failure is reported in the answer, not thrown.
function ownerOf(name) {
  if (!state.info || !state.info.cluster) return Promise.resolve(null);
  return api("/api/cluster/owner?" + new URLSearchParams({ name })).catch((e) => ({ name, error: e.message }));
}

function ownerText(name, o, long) {
  if (o.error) return [el("span", { class: "error", text: "Owner node unknown: " + o.error })];
  if (!o.owner) return [el("span", { class: "muted", text: "No owner: this node has applied no ring yet." })];
  const m = o.owner;
  const parts = long ? [el("code", { text: name }), " is owned by ", el("b", { class: "mono", text: m.id }), m.self ? " (this node)" : "",
    " in ring version " + o.ring_version + "."] : [el("b", { class: "mono", text: m.id }), (m.self ? " (this node)" : "") + ", ring version " + o.ring_version + "."];
  if (!m.self && m.admin_addr) {
    parts.push(" Its claims are held there: ", el("a", { href: location.protocol + "//" + m.admin_addr + "/#/lock/" + encodeURIComponent(name),
      text: "open " + m.id + "'s dashboard" }), ".");
  }
  if (long && m.protocol_addr) parts.push(" ", el("span", { class: "muted", text: "Protocol address " + m.protocol_addr + "." }));
  return parts;
}

function ownerLine(name, o) {
  return el("p", { id: "lock-owner", "data-owner": o.owner ? o.owner.id : "" }, "Owner node: ", ...ownerText(name, o, false));
}

function pager(total, r, view, params) {
  const pages = Math.max(1, Math.ceil(total / PAGE));
  const first = total ? r.page * PAGE + 1 : 0, last = Math.min(total, (r.page + 1) * PAGE);
  return el("div", { class: "pager" },
    el("button", { type: "button", "aria-label": "Previous page", disabled: r.page <= 0, on: { click: () => go(view, Object.assign({}, params, { page: r.page - 1 })) } }, "‹"),
    el("span", { id: "page-info", text: first + "–" + last + " of " + total }),
    el("button", { type: "button", "aria-label": "Next page", disabled: r.page + 1 >= pages, on: { click: () => go(view, Object.assign({}, params, { page: r.page + 1 })) } }, "›"));
}

// ---- actions ----

// promoted describes who a release of holder h of lock l lets in, as far
// as the listing tells.
function promoted(l, h) {
  const w = l.waiters[0];
  if (!w) return "Nobody waits: the lock becomes free.";
  const others = l.holders.length - 1;
  if (l.limit) return "The first waiter, claim " + ref(w) + " (" + (who(w) || "unlabelled") + "), takes the freed slot if it fits in the limit of " + l.limit + ".";
  if (others > 0) return others + " other holder(s) keep the lock; the first waiter, claim " + ref(w) + " (" + (who(w) || "unlabelled") + "), waits for them.";
  if (w.mode === "shared") {
    let n = 0;
    while (n < l.waiters.length && l.waiters[n].mode === "shared") n++;
    return "The first " + n + " waiter(s), shared, are promoted, starting with claim " + ref(w) + " (" + (who(w) || "unlabelled") + ").";
  }
  return "Claim " + ref(w) + " (" + (who(w) || "unlabelled") + ") is promoted next.";
}

function ask(title, lines, ok) {
  const d = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(...lines.map((t) => el("p", { text: t })));
  const b = document.getElementById("confirm-ok");
  b.textContent = ok;
  b.setAttribute("aria-label", title);
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "";
    d.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

async function confirmRelease(l, h) {
  const kind = h.protocol === 1 ? "Its version 1 connection is sent ERROR 0x02 and closed." : "Its session is sent REVOKED and lives on; its other claims are kept.";
  const sure = await ask("Force-release token " + h.token + " of lock " + l.name + "?", [
    "Holder: claim " + ref(h) + ", " + h.mode + ", " + (who(h) || "unlabelled") + ", held for " + ago(h.since) + ".",
    kind, promoted(l, h), "The audit log records this release with your identity."], "Force-release");
  if (!sure) return;
  await act("POST", "/api/locks/" + encodeURIComponent(l.name) + "/release?token=" + h.token, "Released token " + h.token + " of " + l.name + ".");
}

async function confirmKick(l, w, i) {
  const kind = w.protocol === 1 ? "Its version 1 connection is sent ERROR 0x02 and closed." : "Its session is sent REVOKED for this claim and lives on.";
  const sure = await ask("Kick waiter " + ref(w) + " from lock " + l.name + "?", [
    "Waiter #" + (i + 1) +  " of " + qlen(l) + ": claim " + ref(w) + ", " + w.mode + ", " + (who(w) || "unlabelled") + ", waiting for " + ago(w.queued_at) + ".",
    kind, "The holders keep the lock; the waiters behind move up one place.", "The audit log records this kick with your identity."], "Kick");
  if (!sure) return;
  // A version 1 waiter is named by its address, a version 2 claim by SESSION/CLAIM.
  const id = w.protocol === 1 ? w.remote_addr : ref(w);
  await act("DELETE", "/api/locks/" + encodeURIComponent(l.name) + "/waiters/" + encodeURIComponent(id), "Kicked " + ref(w) + " from " + l.name + ".");
}

async function confirmRangeRelease(k, o) {
  const sure = await ask("Release owner " + orf(o) + "'s range locks on " + k.key + "?", [
    "Owner " + o.owner + " of session " + o.session + " (" + (who(o) || "unlabelled") + ") loses its fcntl and flock locks and waiting requests on this key.",
    "Its session is sent ERROR 0x02 and closed: a client or mount treats all its locks as lost (EIO).",
    "The waiting requests that now fit are granted. The audit log records this release with your identity."], "Release");
  if (!sure) return;
  await act("POST", "/api/ranges/" + encodeURIComponent(k.key) + "/release?owner=" + encodeURIComponent(orf(o)), "Released owner " + orf(o) + " on " + k.key + ".");
}

async function act(method, path, done) {
  try {
    await api(path, { method });
    status(done);
  } catch (e) {
    status(method === "POST" ? "Release failed: " + e.message : "Kick failed: " + e.message, true);
  }
  refresh(true);
}

// ---- chart ----

function chart(id, title, values, fmt) {
  const max = Math.max(1, ...values);
  const pts = values.map((v, i) => (HISTORY - values.length + i) + "," + (47 - (v / max) * 45).toFixed(1)).join(" ");
  const last = values.length ? values[values.length - 1] : 0;
  return el("figure", { class: "chart", id },
    el("figcaption", {}, el("span", { text: title }), el("b", { text: fmt(last) })),
    svg(pts, title + ": now " + fmt(last) + ", peak " + fmt(max) + " over the last " + values.length + " s"));
}
function svg(points, label) {
  const ns = "http://www.w3.org/2000/svg";
  const s = document.createElementNS(ns, "svg");
  s.setAttribute("viewBox", "0 0 " + HISTORY + " 48");
  s.setAttribute("preserveAspectRatio", "none");
  s.setAttribute("role", "img");
  s.setAttribute("aria-label", label);
  const p = document.createElementNS(ns, "polyline");
  p.setAttribute("points", points);
  s.append(p);
  return s;
}
function drawCharts(sum) {
  const t = Date.parse(sum.time);
  let rate = 0;
  if (sum.grants_total !== undefined && state.prevGrants) {
    const dt = (t - state.prevGrants.t) / 1000;
    if (dt > 0) rate = (sum.grants_total - state.prevGrants.n) / dt;
  }
  if (sum.grants_total !== undefined) state.prevGrants = { t, n: sum.grants_total };
  state.hist.push({ rate, waiters: sum.waiters, wait: sum.longest_wait_ms });
  if (state.hist.length > HISTORY) state.hist.shift();
  const h = state.hist;
  const charts = [
    chart("chart-waiters", "Waiters", h.map((x) => x.waiters), String),
    chart("chart-wait", "Longest wait", h.map((x) => x.wait), dur),
  ];
  if (sum.grants_total !== undefined) charts.unshift(chart("chart-grants", "Grants/s", h.map((x) => x.rate), (v) => v.toFixed(1)));
  document.getElementById("charts").replaceChildren(...charts);
  document.getElementById("server").textContent = "locks held: " + sum.locks + " · waiters: " + sum.waiters + " · connections: " + sum.sessions;
}

// ---- loop ----

let current = null;

function show() {
  const r = route();
  const v = views[r.view];
  for (const k of Object.keys(views)) {
    const a = document.getElementById(views[k].tab);
    if (a) a.removeAttribute("aria-current");
  }
  document.getElementById(v.tab).setAttribute("aria-current", "page");
  document.getElementById("main").replaceChildren(...v.setup(r));
  current = r;
  refresh(true);
}

async function refresh(force) {
  if (state.inflight) { state.again = state.again || force; return; } // run once more when this one ends
  if (!force && document.hidden) return;
  state.inflight = true;
  const r = current, seq = ++state.seq;
  try {
    const f0 = performance.now();
    const [build, sum] = await Promise.all([views[r.view].update(r), api("/api/summary")]);
    perf.lastFetchMs = performance.now() - f0;
    if (seq !== state.seq || r !== current) return; // the route changed meanwhile
    const r0 = performance.now();
    state.skew = Date.parse(sum.time) - Date.now();
    document.getElementById("content").replaceChildren(...build());
    drawCharts(sum);
    const ms = performance.now() - r0;
    perf.renders++;
    perf.lastRenderMs = ms;
    perf.maxRenderMs = Math.max(perf.maxRenderMs, ms);
    if (perf.firstRenderMs === null) perf.firstRenderMs = performance.now() - t0;
    document.body.dataset.renders = perf.renders;
    if (document.getElementById("status").className === "error") status("");
  } catch (e) {
    status("Cannot reach the admin API: " + e.message, true);
  } finally {
    state.inflight = false;
    if (state.again) { state.again = false; refresh(true); }
  }
}

async function start() {
  try {
    state.info = await api("/api/info");
    document.getElementById("tab-cluster").hidden = !state.info.cluster;
    document.title = "baton " + state.info.version;
  } catch (e) {
    status("Cannot reach the admin API: " + e.message, true);
  }
  window.addEventListener("hashchange", show);
  show();
  setInterval(() => refresh(false), POLL_MS);
}

start();
