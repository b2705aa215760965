// ScoreBoard page: renders the view the demo pushes over the WebSocket.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const nodesEl = $("#nodes");
const cards = new Map();
const words = ["Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine"];

function post(path) {
  return fetch(path, { method: "POST" }).catch(() => {});
}

$("#burst").addEventListener("click", () => post("/api/burst"));

function card(n) {
  let c = cards.get(n.index);
  if (c) return c;
  c = $("#node-tpl").content.firstElementChild.cloneNode(true);
  c.id = "node-" + n.index;
  $(".idx", c).textContent = n.index;
  $(".metrics-link", c).href = `/api/nodes/${n.index}/metrics`;
  $(".health-link", c).href = `/api/nodes/${n.index}/health`;
  c.querySelectorAll("button[data-action]").forEach((b) =>
    b.addEventListener("click", () => post(`/api/nodes/${n.index}/${b.dataset.action}`)));
  nodesEl.appendChild(c);
  cards.set(n.index, c);
  return c;
}

function ago(ms, now) {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  return s < 1 ? "just now" : s + " s ago";
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

const linkText = { online: "ONLINE", offline: "OFFLINE", blip: "BLIP", outage: "OUTAGE" };

function render(v) {
  $("#node-count").textContent = words[v.nodes.length] || v.nodes.length;
  $("#truth-home").textContent = v.truth.home;
  $("#truth-away").textContent = v.truth.away;
  $("#truth-goal").textContent = v.truth.goal;
  $("#pace").textContent = `a goal every ${v.goal_every_ms / 1000} s`;
  $("#publisher").textContent = v.publisher ? "node " + v.publisher : "an online node";
  $("#burst-size").textContent = v.burst_size;
  document.querySelectorAll(".buffer-size").forEach((e) => (e.textContent = v.buffer_size));
  $("#burst-hint").textContent =
    `${v.burst_size} goals is more than the ${v.buffer_size} messages a peer keeps: a node offline during the burst cannot be caught up by replay.`;

  const conv = $("#converged");
  if (v.converged) {
    conv.className = "pill ok";
    conv.textContent = `✓ Converged: every node shows goal #${v.truth.goal}`;
  } else {
    conv.className = "pill bad";
    conv.textContent = `Diverged: node ${v.behind.join(", ")} behind the true score`;
  }

  for (const n of v.nodes) {
    const c = card(n);
    const b = n.board.board;
    c.className = "card node " + n.status_kind;
    const link = $(".link", c);
    link.className = "link pill " + n.link;
    link.textContent = n.link === "outage" && n.restore_in_ms
      ? `OUTAGE ${Math.ceil(n.restore_in_ms / 1000)} s` : linkText[n.link] || n.link;
    $(".addr", c).textContent = `advertised ${n.addr}` + (n.pid ? ` · pid ${n.pid}` : "");
    $(".home", c).textContent = b.home;
    $(".away", c).textContent = b.away;
    $(".goal-num", c).textContent = b.goal;

    const held = $(".held", c);
    held.className = "held " + (n.expired ? "red" : n.held > 0 ? "orange" : "ok");
    $(".held-count", c).textContent = n.held;
    $(".held-label", c).textContent = n.expired
      ? `held, more than ${v.buffer_size}: lost its place`
      : n.held === 1 ? "message held for it by peers" : "messages held for it by peers";
    $(".held-by", c).textContent = (n.held_by || [])
      .map((h) => `node ${h.peer}: ${h.lag}${h.expired ? " (overflowed)" : ""}`).join(" · ");

    const st = $(".status", c);
    st.className = "status " + n.status_kind;
    st.textContent = n.status;

    const ex = $(".expiry", c);
    const last = n.board.last_expiry;
    if (last) {
      const from = peerName(v, last.from);
      let text = `Told it fell behind ${from} (CursorExpired, ${last.missed} message${last.missed === 1 ? "" : "s"} lost from the buffer) ${ago(last.at_unix_ms, v.now_unix_ms)}. `;
      text += last.reloaded ? `Reloaded from the source of truth at goal #${last.reload_goal}.`
        : last.reload_error ? `Reload failed: ${last.reload_error}; retrying.` : "Reloading from the source of truth…";
      ex.textContent = text;
      ex.hidden = false;
    } else {
      ex.hidden = true;
    }

    $(".applied", c).textContent = n.board.applied;
    $(".replayed", c).textContent = n.board.replayed;
    $(".duplicates", c).textContent = n.board.duplicates;
    $(".reloads", c).textContent = n.board.reloads;
    $(".gaps", c).textContent = n.board.gaps;
    $(".gapbox", c).className = "gapbox" + (n.board.gaps ? " bad" : "");

    const ol = $(".recent", c);
    ol.replaceChildren(...(n.board.recent || []).slice(0, 6).map((d) => {
      const li = document.createElement("li");
      li.className = d.kind;
      const left = document.createElement("span");
      const right = document.createElement("span");
      if (d.kind === "reload") {
        left.textContent = `goal #${d.goal}  ${d.home}–${d.away}`;
        right.textContent = "reloaded from truth";
      } else {
        left.textContent = `goal #${d.goal}  ${d.home}–${d.away}  via node ${d.via}`;
        right.textContent = d.kind === "duplicate" ? "stale or repeat, ignored"
          : d.kind === "replayed" ? `replayed, ${(d.late_ms / 1000).toFixed(1)} s late` : `live, ${d.late_ms} ms`;
      }
      li.append(left, right);
      return li;
    }));
  }

  $("#events").replaceChildren(...v.events.map((e) => {
    const li = document.createElement("li");
    li.className = e.kind;
    const t = document.createElement("time");
    t.textContent = clock(e.at_unix_ms);
    li.append(t, document.createTextNode(e.text));
    return li;
  }));
}

function peerName(v, addr) {
  const n = v.nodes.find((x) => x.addr === addr);
  return n ? "node " + n.index : addr;
}

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.onmessage = (m) => {
    try { render(JSON.parse(m.data)); } catch (e) { console.error(e); }
  };
  ws.onclose = () => {
    const conv = $("#converged");
    conv.className = "pill wait";
    conv.textContent = "Disconnected from the demo: retrying…";
    setTimeout(connect, 1000);
  };
}
connect();
