// Chat page of the EchoPubSub demo, on the gateway's JavaScript client
// (/static/echopubsub.js: the gateway module's client/echopubsub.js). The
// room is one durable subscription from the stream's start (from: 0): the
// room's history, then live. Each message is acked once the browser painted
// it. Offline and back (or a dropped socket: the client reconnects with
// back-off) the client opens a new session and resumes from the last acked
// cursor + 1: what was missed comes from this node's store, once, in order.
import { GatewayClient } from "/static/echopubsub.js";

const ROOM = "chat:lobby", TYPE = "google.protobuf.Struct";
const params = new URLSearchParams(location.search);
const node = params.get("node") || "1", user = params.get("user") || "ada";
const $ = (id) => document.getElementById(id);

let status = { state: "connecting" }, subscribed = false, sent = 0, pending = 0, peak = 0, replayedShown = 0;
const messages = [], handled = [], errors = [], notices = [], statuses = [];

function log(line) {
  const el = $("log");
  el.textContent = (new Date().toISOString().slice(11, 23)) + " " + line + "\n" + el.textContent;
}

const online = () => status.state === "open";

function render() {
  $("hint").hidden = messages.length > 0; // what to do, until something happens
  let label = status.state === "open" ? "online" : status.state === "reconnecting" ?
    `reconnecting in ${status.delayMs} ms (attempt ${status.attempt})` : status.state === "connecting" ? "connecting" : "offline";
  $("status").textContent = label;
  $("status").className = "badge " + (online() ? "online" : "offline");
  $("pending").textContent = pending;
  $("peak").textContent = peak;
  $("replayed").textContent = replayedShown;
  $("cursor").textContent = client.cursor(ROOM) || "-";
  $("session").textContent = client.sessionId || "-";
}

function show(m, replayed) {
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

const painted = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

// The room's handler: show the message, resolve once it is painted (the
// client acks then). The first session's stored rows are the room's
// history; a later session's are what this page missed while away.
async function onMessage(msg) {
  const m = msg.payload || {};
  handled.push({ cursor: msg.cursor, id: m.id || "", text: m.text || "", session: msg.sessions, replayed: msg.replayed });
  const missed = msg.replayed && msg.sessions > 1;
  show(m, missed);
  if (missed) replayedShown++;
  render();
  await painted();
}

const client = new GatewayClient(
  `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/chat/ws/${node}?user=${encodeURIComponent(user)}`, {
    onStatus(s) {
      status = s;
      statuses.push({ state: s.state, at: Date.now(), attempt: s.attempt || 0 });
      log(`${s.state}${s.sessionId ? " session " + s.sessionId + " on " + s.node : ""}${s.code ? ` (close ${s.code} ${s.reason || ""})` : ""}` +
        (s.state === "reconnecting" ? ` in ${s.delayMs} ms` : ""));
      render();
    },
    onNotice(n) {
      notices.push(n.kind);
      log(`notice ${n.kind}: ${JSON.stringify(n.notice)}`);
      if (n.kind === "stream_gap") systemLine(`${n.notice.missed || "some"} messages are missing from this node's store here`);
      if (n.kind === "stream_truncated") systemLine(`messages before #${n.notice.first_kept} are no longer kept`);
      if (n.kind === "cursor_expired") systemLine("this node fell behind: reload the room");
      if (n.kind === "live_resume" || n.kind === "node_changed") systemLine("resumed live: messages sent meanwhile are not shown");
      render();
    },
    onError(e) {
      errors.push(e.message);
      log(`error ${e.message}`);
      render();
    },
    onPending(n) {
      pending = n;
      peak = Math.max(peak, n);
      render();
    },
  });

$("user").textContent = user;
$("node").textContent = node;
const peer = node === "1" ? { node: "2", user: "bob" } : { node: "1", user: "ada" };
$("peer").href = `/chat?node=${peer.node}&user=${peer.user}`;
$("peer").textContent = `${peer.user}'s page on node ${peer.node}`;
$("offline").onclick = () => client.disconnect(1000, "offline");
$("online").onclick = () => client.connect();
// The node's graceful stop and restart (the demo's web server); the client
// retries with back-off and tracks the user again when the node is back.
const nodeAction = (action) => fetch(`/chat/nodes/${node}/${action}`, { method: "POST" })
  .then(async (r) => systemLine(`node ${node}: ${(await r.text()).trim()}`))
  .catch((e) => systemLine(`node ${node} ${action}: ${e}`));
$("stop-node").onclick = () => nodeAction("stop");
$("start-node").onclick = () => nodeAction("start");

function say(text) {
  sent++;
  const m = { id: `${user}-${Date.now()}-${sent}`, from: user, text, at: Date.now() };
  return client.publish(ROOM, TYPE, m).then(() => m, (e) => { errors.push(e.message); log(`publish: ${e.message}`); throw e; });
}

$("send").onsubmit = (ev) => {
  ev.preventDefault();
  const text = $("text").value.trim();
  if (!text || !online()) return;
  say(text).catch(() => {});
  $("text").value = "";
};

// For the browser tests: what the page shows and did, and a way to publish
// a numbered series as a burst (each publish is recorded once the gateway
// took it).
const published = [];
window.chatState = () => JSON.stringify({
  online: online(), subscribed, status: status.state, attempt: status.attempt || 0, sessionId: client.sessionId, sessions: client.sessions,
  node, user, hint: $("hint").hidden ? "" : $("hint").innerText, peer: $("peer").getAttribute("href"),
  pending, peak, replayed: replayedShown, cursor: client.cursor(ROOM), backlog: client.backlog(ROOM),
  messages: messages.map((m) => ({ id: m.id, from: m.from, text: m.text, replayed: m.replayed })),
  handled, errors, notices, statuses, published, onlineUsers,
});
window.chatSeries = (prefix, n) => {
  // All sent at once (the gateway publishes them in order): a burst.
  for (let i = 1; i <= n; i++) {
    const text = `${prefix}${i}`;
    say(text).then(() => published.push({ text, at: Date.now() }), () => {});
  }
};

// Who is online in the room: this page tracks its user; the list is the
// tracker's, across both nodes (docs/gateway.md "Presence").
let onlineUsers = [];
function renderOnline() {
  const ul = $("online-users");
  ul.replaceChildren(...onlineUsers.map((u) => { const li = document.createElement("li"); li.textContent = u; return li; }));
}
client.onPresence(ROOM, (list) => {
  onlineUsers = Object.keys(list).sort();
  renderOnline();
}).catch((e) => { errors.push(e.message); log(`presence: ${e.message}`); });
client.track(ROOM, { name: user }).catch((e) => { errors.push(e.message); log(`track: ${e.message}`); });

client.subscribe(ROOM, onMessage, { from: 0 }).then(
  () => { subscribed = true; log("subscribed from the room's start"); render(); },
  (e) => { errors.push(e.message); log(`subscribe: ${e.message}`); render(); });
client.connect();
render();
