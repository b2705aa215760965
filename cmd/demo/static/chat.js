// Chat client of the EchoPubSub WebSocket gateway (docs/gateway.md).
// Every message is acknowledged after it is shown; coming back online it
// subscribes first, then replays from the store what it missed (pages of
// PAGE rows from the last resume cursor), showing the pending count.
"use strict";
const ROOM = "chat:lobby", TYPE = "google.protobuf.Struct", PAGE = 20;
const params = new URLSearchParams(location.search);
const node = params.get("node") || "1", user = params.get("user") || "ada";
const $ = (id) => document.getElementById(id);

let ws = null, online = false, sessionId = "", cmdSeq = 0, sent = 0;
let cursor = 0;            // the store's resume cursor of this node's room stream
let replaying = false, replayBatch = [], lastReplay = null;
let pending = 0, peak = 0, replayedShown = 0;
const shown = new Set(), messages = [], errors = [], notices = [];

function log(line) {
  const el = $("log");
  el.textContent = (new Date().toISOString().slice(11, 23)) + " " + line + "\n" + el.textContent;
}

function render() {
  $("hint").hidden = messages.length > 0; // what to do, until something happens
  $("status").textContent = online ? "online" : "offline";
  $("status").className = "badge " + (online ? "online" : "offline");
  $("pending").textContent = pending;
  $("peak").textContent = peak;
  $("replayed").textContent = replayedShown;
  $("session").textContent = sessionId || "-";
  $("lastReplay").textContent = lastReplay ? `delivered ${lastReplay.delivered}, resume ${lastReplay.resume_cursor}` +
    (lastReplay.stopped ? " (stopped: pressure)" : "") : "none";
}

function show(m, replayed) {
  shown.add(m.id);
  const item = { id: m.id, from: m.from, text: m.text, at: m.at || 0, replayed };
  let i = messages.length;
  while (i > 0 && (messages[i - 1].at > item.at || (messages[i - 1].at === item.at && messages[i - 1].id > item.id))) i--;
  messages.splice(i, 0, item);
  const li = document.createElement("li");
  if (replayed) li.className = "replayed";
  li.dataset.id = m.id;
  const from = document.createElement("span");
  from.className = "from";
  from.textContent = m.from;
  li.append(from, document.createTextNode(m.text));
  if (replayed) {
    const tag = document.createElement("span");
    tag.className = "tag";
    tag.textContent = "replayed from storage";
    li.append(tag);
  }
  const list = $("messages");
  list.insertBefore(li, list.children[i] || null);
}

function systemLine(text) {
  const li = document.createElement("li");
  li.className = "system";
  li.textContent = text;
  $("messages").append(li);
}

function send(cmd) {
  cmd.id = "c" + (++cmdSeq);
  ws.send(JSON.stringify(cmd));
  return cmd.id;
}

function replayPage() {
  replaying = true;
  send({ op: "replay", stream: ROOM, from: cursor, limit: PAGE });
}

function handle(f) {
  switch (f.type) {
  case "hello":
    sessionId = f.session_id;
    online = true;
    log(`hello: session on ${f.node}`);
    // Subscribe first, then replay: what is published from now on comes
    // live, what came before comes from the store; duplicates are skipped
    // by message id.
    send({ op: "subscribe", topic: ROOM });
    replayPage();
    break;
  case "envelope": {
    const m = f.payload || {};
    pending++;
    peak = Math.max(peak, pending);
    const isNew = m.id && !shown.has(m.id);
    if (isNew) {
      const missed = !!f.replayed && replayedShownEligible;
      show(m, missed);
      if (missed) replayedShown++;
    }
    if (f.replayed) {
      replayBatch.push(f.delivery_id); // acked once the page is shown
    } else {
      send({ op: "ack", delivery_id: f.delivery_id }); // shown above: ack it
    }
    break;
  }
  case "result":
    if (f.op === "ack" || f.op === "ack_many") {
      pending = f.result.pending;
    } else if (f.op === "replay") {
      lastReplay = f.result;
      cursor = f.result.resume_cursor;
      const more = f.result.stopped || f.result.delivered + f.result.gaps >= PAGE;
      // Ack the page after the browser painted it.
      requestAnimationFrame(() => setTimeout(() => {
        if (replayBatch.length > 0) send({ op: "ack_many", delivery_ids: replayBatch });
        replayBatch = [];
        if (more) replayPage(); else { replaying = false; replayedShownEligible = true; log(`replay done at cursor ${cursor}`); }
        render();
      }, 0));
    }
    break;
  case "notice":
    notices.push(f.kind);
    log(`notice ${f.kind}: ${JSON.stringify(f.notice)}`);
    if (f.kind === "stream_gap") systemLine(`${f.notice.missed || "some"} messages are missing from this node's store here`);
    if (f.kind === "cursor_expired") systemLine("this node fell behind: reload the room");
    break;
  case "error":
    errors.push(f.code + ": " + f.message);
    log(`error ${f.code}: ${f.message}`);
    break;
  }
  render();
}

// The first replay after the page opens loads the room's history: those
// rows are not "missed while offline". Every replay after it is.
let replayedShownEligible = false;

function connect() {
  if (ws && ws.readyState <= 1) return;
  const proto = location.protocol === "https:" ? "wss" : "ws";
  ws = new WebSocket(`${proto}://${location.host}/chat/ws/${node}?user=${encodeURIComponent(user)}`);
  ws.onmessage = (ev) => handle(JSON.parse(ev.data));
  ws.onclose = (ev) => {
    online = false;
    sessionId = "";
    pending = 0;
    replayBatch = [];
    log(`socket closed: ${ev.code} ${ev.reason}`);
    render();
  };
}

$("user").textContent = user;
$("node").textContent = node;
const peer = node === "1" ? { node: "2", user: "bob" } : { node: "1", user: "ada" };
$("peer").href = `/chat?node=${peer.node}&user=${peer.user}`;
$("peer").textContent = `${peer.user}'s page on node ${peer.node}`;
$("offline").onclick = () => { if (ws) ws.close(1000, "offline"); };
$("online").onclick = () => connect();
$("send").onsubmit = (ev) => {
  ev.preventDefault();
  const text = $("text").value.trim();
  if (!text || !online) return;
  sent++;
  const m = { id: `${user}-${Date.now()}-${sent}`, from: user, text, at: Date.now() };
  send({ op: "publish", topic: ROOM, type: TYPE, payload: m });
  $("text").value = "";
};

// For the browser test: what the page shows.
window.chatState = () => JSON.stringify({
  online, sessionId, node, user, hint: $("hint").hidden ? "" : $("hint").innerText, peer: $("peer").getAttribute("href"), pending, peak, replayed: replayedShown, replaying, lastReplay, cursor,
  messages: messages.map((m) => ({ id: m.id, from: m.from, text: m.text, replayed: m.replayed })), errors, notices,
});

render();
connect();
