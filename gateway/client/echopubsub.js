// EchoPubSub gateway client: one ES module, no build step, no dependencies.
// It speaks the gateway's WebSocket protocol (docs/gateway.md, "JavaScript
// client"); the gateway module serves this very file (gateway.ClientHandler).
//
//   import { GatewayClient } from "/echopubsub.js";
//   const client = new GatewayClient("wss://example.com/ws", { onNotice, onStatus, onError });
//   await client.subscribe("room", async (msg) => { show(msg.payload); }, { from: 0 });
//   client.connect();
//
// Guarantee to the application, per subscription: handlers run one at a
// time, in delivery order; a message is acked after its handler's promise
// resolves, and its cursor becomes the subscription's resume point. When the
// socket drops, the client reconnects (exponential back-off with jitter and a
// cap), opens a new session and resubscribes each topic with from = the last
// acked cursor + 1: no message past it is lost or repeated. What arrived and
// had not been handled yet when the socket dropped is not handled: it comes
// again on the new session. A handler that rejects is reported (onError) and
// its message is not acked: the client reconnects, and it comes again
// (at-least-once). Every notice reaches onNotice: never swallowed.

const SESSION_TOPICS = "echopubsub.session/";

// Notices that concern one topic: delivered in the topic's order, between
// its messages (caught_up after the last stored row it covers).
const TOPIC_NOTICES = new Set(["stream_gap", "stream_truncated", "caught_up"]);

// gapRange is what a cursor_expired or stream_gap notice says was lost:
// {incarnation, from, to}, the producer cursors [from, to) (to exclusive)
// of that producer incarnation (a decimal string: it exceeds what a
// Number holds exactly); null when the notice does not know (to or
// producer_incarnation 0: a producer that restarted without saying where
// it ended, a gap row of an earlier build; docs/gateway.md). undefined for
// other kinds.
export function gapRange(kind, n) {
  if (kind !== "cursor_expired" && kind !== "stream_gap") return undefined;
  const incarnation = String((n && n.producer_incarnation) || "0");
  const to = Number((n && n.to) || 0); // cursor_expired's are proto3 JSON strings
  if (incarnation === "0" || to === 0) return null;
  return { incarnation, from: Number(n.from || 0), to };
}

// GatewayError is a refused command (an error frame: code and message), or
// the client's own "disconnected" when the socket closed before the answer.
export class GatewayError extends Error {
  constructor(code, message, op) {
    super(`${op ? op + ": " : ""}${code}: ${message}`);
    this.name = "GatewayError";
    this.code = code;
    this.op = op || "";
  }
}

// Defaults of the options GatewayClient takes.
export const defaults = Object.freeze({
  // Reconnect delays: initialMs * factor^attempt, at most maxMs, each
  // shortened by a random share up to jitter (0.5: 50..100% of the delay).
  backoff: Object.freeze({ initialMs: 250, maxMs: 10000, factor: 2, jitter: 0.5 }),
});

export class GatewayClient {
  // url: the gateway's ws:// or wss:// URL. options:
  //   onNotice({kind, topic, notice, range}): every notice, the gateway's
  //     (cursor_expired, back_pressure, session_pressure, session_closed,
  //     stream_gap, stream_truncated, caught_up, session_stalled,
  //     session_resumed) and the client's own (live_resume, node_changed).
  //     range (cursor_expired, stream_gap): the messages lost, as
  //     gapRange gives it: {incarnation, from, to}, or null when not known.
  //     caught_up (topic: the stream): a subscribe with from has handed
  //     the stored rows up to notice.cursor to the handler, live ones
  //     follow. session_stalled (topic ""): the session held notice.pending
  //     deliveries and no ack came for notice.quiet_ms (a handler is slow
  //     or stuck); session_resumed: an ack ended that stall.
  //     Default: console.warn.
  //   onError(error): refusals no promise answers (a resubscribe refused)
  //     and handlers that rejected. Default: console.error.
  //   onStatus({state, sessionId, node, code, reason, attempt, delayMs}):
  //     state "connecting", "open", "reconnecting" (delayMs until the next
  //     try) or "disconnected" (disconnect()).
  //   onAck({topic, cursor, deliveryId, pending}): a message was acked.
  //   onPending(n): the session's pending count changed (an envelope
  //     arrived, an ack was answered).
  //   onEnvelope(msg): envelopes of no subscription (requests, replies to
  //     this session); they are acked after it resolves. Default: onError.
  //   backoff: {initialMs, maxMs, factor, jitter} (defaults.backoff).
  //   WebSocket: the WebSocket constructor (default globalThis.WebSocket).
  constructor(url, options = {}) {
    this.url = url;
    this.options = options;
    this.backoff = { ...defaults.backoff, ...(options.backoff || {}) };
    this.WebSocket = options.WebSocket || globalThis.WebSocket;
    this.subs = new Map(); // topic -> subscription state
    this.commands = new Map(); // command id -> {resolve, reject, op}
    this.ws = null;
    this.gen = 0; // socket generation: bumped when a socket opens or closes
    this.seq = 0;
    this.wanted = false; // connect() called, disconnect() not since
    this.attempt = 0;
    this.timer = null;
    this.sessionId = "";
    this.node = "";
    this.pending = 0; // durable deliveries of this session not acked (the gateway's count after each ack)
    this.sessions = 0; // sessions opened so far
    this.presences = new Map(); // topic -> {handler, list: Map key -> [{node, ref, meta}], state}
    this.tracks = new Map(); // topic -> meta: tracked again on every new session
  }

  get connected() { return this.sessionId !== ""; }

  // connect opens the socket now (again after disconnect()); from then on
  // the client reconnects whenever it drops.
  connect() {
    this.wanted = true;
    clearTimeout(this.timer);
    this.timer = null;
    if (!this.ws) this._open();
  }

  // disconnect closes the socket and stops reconnecting. Subscriptions and
  // their cursors are kept: connect() resumes them.
  disconnect(code = 1000, reason = "client disconnect") {
    this.wanted = false;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.ws) this.ws.close(code, reason);
  }

  // subscribe registers handler for topic's messages and resolves once the
  // gateway confirmed the subscription (rejects with a GatewayError when it
  // refused it; the subscription is then dropped). opts: from (a cursor:
  // catch up from the stream's stored rows, 0 = its start; absent = live
  // only), consumer (a durable consumer's name, 1..128 of [A-Za-z0-9._-]:
  // the gateway's store keeps its committed cursor, so a subscribe with the
  // same name, from this page or another, a reload, or after a restart,
  // resumes after it; from then only places a consumer that is new), class
  // ("durable" or "ephemeral"), context (object of strings).
  // handler(msg) gets {topic, cursor, deliveryId, replayed, class, context,
  // payloadType, payload, payloadError, payloadBase64, request, traceparent,
  // tracestate}: traceparent and tracestate are the W3C trace context the
  // message was published in ("" when its publisher does not trace), to
  // continue the trace in the browser (e.g. as the parent of a span).
  // Before connect() or while reconnecting it waits for the next session.
  subscribe(topic, handler, opts = {}) {
    if (typeof handler !== "function") return Promise.reject(new TypeError("subscribe needs a handler function"));
    if (opts.from !== undefined && !(Number.isSafeInteger(opts.from) && opts.from >= 0)) {
      return Promise.reject(new TypeError(`from must be a cursor (an integer >= 0), got ${opts.from}`));
    }
    if (opts.consumer !== undefined && !(typeof opts.consumer === "string" && /^[A-Za-z0-9._-]{1,128}$/.test(opts.consumer))) {
      return Promise.reject(new TypeError(`consumer must be 1 to 128 of [A-Za-z0-9._-], got ${JSON.stringify(opts.consumer)}`));
    }
    if (this.subs.has(topic)) return Promise.reject(new Error(`already subscribed to ${topic}`));
    const sub = {
      topic, handler, cls: opts.class, context: opts.context,
      resumeFrom: opts.from, // undefined: live only (with a consumer: where the gateway's cursor says)
      consumer: opts.consumer,
      acked: 0, // last acked cursor, 0: none yet
      node: "", // the node whose store the cursors are of
      queue: [], busy: null, confirmed: false,
    };
    this.subs.set(topic, sub);
    return new Promise((resolve, reject) => {
      sub.waiters = { resolve, reject };
      if (this.connected) this._resubscribe(sub, this.gen);
    });
  }

  // unsubscribe stops topic's subscription (what is queued for it is not
  // handled).
  unsubscribe(topic) {
    const sub = this.subs.get(topic);
    if (!sub) return Promise.resolve();
    this.subs.delete(topic);
    sub.queue = [];
    return this.connected ? this.command({ op: "unsubscribe", topic }) : Promise.resolve();
  }

  // backlog is how many of topic's messages arrived and wait for their
  // handler.
  backlog(topic) {
    const sub = this.subs.get(topic);
    return sub ? sub.queue.length : 0;
  }

  // cursor is the last acked cursor of topic (0: none yet).
  cursor(topic) {
    const sub = this.subs.get(topic);
    return sub ? sub.acked : 0;
  }

  // publish broadcasts payload (the message of protobuf type, in protojson)
  // on topic; the gateway must enable it (Config.Publish). It resolves once
  // the gateway queued the message. opts: traceparent and tracestate, the
  // page's W3C trace context, which the broadcast continues when the pubsub
  // traces; receipt (true): resolve with the receipt instead, once every
  // member delivered the message or after the gateway's ReceiptTimeout:
  // { node, group, incarnation (a string), cursor, complete, nodes: [{ node,
  // status }] }, status "delivered", "pending", "unreachable", "expired",
  // "not_owed" or "unknown" (docs/gateway.md, publish with "receipt").
  publish(topic, type, payload, opts = {}) {
    const frame = { op: "publish", topic, type, payload };
    if (opts.traceparent) frame.traceparent = opts.traceparent;
    if (opts.tracestate) frame.tracestate = opts.tracestate;
    if (!opts.receipt) return this.command(frame);
    frame.receipt = true;
    return this.command(frame).then((res) => res.receipt);
  }

  // onPresence follows topic's presence (the gateway's Config.Presence):
  // handler(list) gets the whole list after each change, as an object
  // key -> [{node, ref, meta}] (one entry per socket or process tracking
  // that key). The gateway sends the list (presence_state), then its
  // changes (presence_diff), applied here by ref like phoenix.js's
  // Presence.syncState and syncDiff; a new session sends the list again.
  // Resolves once the gateway confirmed (rejects with a GatewayError, e.g.
  // "presence_disabled"); before connect() it waits for the next session.
  onPresence(topic, handler) {
    if (typeof handler !== "function") return Promise.reject(new TypeError("onPresence needs a handler function"));
    this.presences.set(topic, { handler, list: new Map(), state: false });
    return this.connected ? this.command({ op: "presence", topic }) : Promise.resolve();
  }

  // track makes this socket present in topic under its own identity (the
  // one the gateway authenticated: a client cannot track another key), with
  // meta (an object of strings, at most 1 KiB as JSON). The client tracks
  // again on every new session; closing the socket untracks.
  track(topic, meta = {}) {
    this.tracks.set(topic, meta);
    return this.connected ? this.command({ op: "track", topic, meta }) : Promise.resolve();
  }

  // untrack ends this socket's presence in topic.
  untrack(topic) {
    if (!this.tracks.delete(topic)) return Promise.resolve();
    return this.connected ? this.command({ op: "untrack", topic }) : Promise.resolve();
  }

  _presenceFrame(f) {
    const p = this.presences.get(f.topic);
    if (!p) return;
    if (f.type === "presence_state") {
      p.list = new Map();
      p.state = true;
      syncJoins(p.list, f.presences);
    } else {
      if (!p.state) return; // the gateway sends the list first
      for (const [key, metas] of Object.entries(f.leaves || {})) {
        const refs = new Set(metas.map((m) => m.ref));
        const kept = (p.list.get(key) || []).filter((m) => !refs.has(m.ref));
        if (kept.length > 0) p.list.set(key, kept);
        else p.list.delete(key);
      }
      syncJoins(p.list, f.joins);
    }
    const out = {};
    for (const [key, metas] of p.list) out[key] = metas.slice();
    try {
      p.handler(out);
    } catch (e) {
      this._error(e);
    }
  }

  // command sends one command frame of the protocol and resolves with its
  // result, or rejects with a GatewayError (also when not connected).
  command(frame) {
    if (!this.connected) return Promise.reject(new GatewayError("disconnected", "not connected", frame.op));
    const id = "c" + (++this.seq);
    return new Promise((resolve, reject) => {
      this.commands.set(id, { resolve, reject, op: frame.op });
      this.ws.send(JSON.stringify({ ...frame, id }));
    });
  }

  _open() {
    const ws = new this.WebSocket(this.url);
    this.ws = ws;
    const gen = ++this.gen;
    this._status({ state: "connecting", attempt: this.attempt });
    ws.onmessage = (ev) => {
      if (gen !== this.gen) return;
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch (e) {
        this._error(new GatewayError("malformed_frame", `server frame is not JSON: ${e.message}`));
        return;
      }
      this._frame(f, gen);
    };
    ws.onclose = (ev) => { if (gen === this.gen) this._closed(ev); };
  }

  _closed(ev) {
    this.gen++; // frames and acks of the old session are void from here
    this.ws = null;
    this.sessionId = "";
    this._pending(0);
    for (const sub of this.subs.values()) sub.queue = []; // not handled: they come again
    const why = `socket closed: ${ev.code}${ev.reason ? " " + ev.reason : ""}`;
    for (const c of this.commands.values()) c.reject(new GatewayError("disconnected", why, c.op));
    this.commands.clear();
    if (!this.wanted) {
      this._status({ state: "disconnected", code: ev.code, reason: ev.reason });
      return;
    }
    const b = this.backoff;
    const full = Math.min(b.maxMs, b.initialMs * Math.pow(b.factor, this.attempt));
    const delayMs = Math.round(full * (1 - b.jitter * Math.random()));
    this.attempt++;
    this._status({ state: "reconnecting", code: ev.code, reason: ev.reason, attempt: this.attempt, delayMs });
    this.timer = setTimeout(() => { this.timer = null; if (this.wanted && !this.ws) this._open(); }, delayMs);
  }

  _frame(f, gen) {
    switch (f.type) {
    case "hello":
      this.sessionId = f.session_id;
      this.node = f.node;
      this.attempt = 0;
      this.sessions++;
      this._status({ state: "open", sessionId: f.session_id, node: f.node });
      for (const sub of this.subs.values()) this._resubscribe(sub, gen);
      for (const topic of this.presences.keys()) this.command({ op: "presence", topic }).catch((e) => this._error(e));
      for (const [topic, meta] of this.tracks) this.command({ op: "track", topic, meta }).catch((e) => this._error(e));
      break;
    case "presence_state":
    case "presence_diff":
      this._presenceFrame(f);
      break;
    case "envelope":
      this._envelope(f, gen);
      break;
    case "notice": {
      const topic = (f.notice && f.notice.stream) || "";
      const sub = TOPIC_NOTICES.has(f.kind) ? this.subs.get(topic) : undefined;
      const n = { kind: f.kind, topic, notice: f.notice };
      const range = gapRange(f.kind, f.notice);
      if (range !== undefined) n.range = range;
      if (sub) this._enqueue(sub, { notice: n, gen });
      else this._notice(n);
      break;
    }
    case "result":
    case "error": {
      const c = f.id && this.commands.get(f.id);
      if (c) {
        this.commands.delete(f.id);
        if (f.type === "result") c.resolve(f.result);
        else c.reject(new GatewayError(f.code, f.message, f.op));
      } else if (f.type === "error") {
        this._error(new GatewayError(f.code, f.message, f.op));
      }
      break;
    }
    }
  }

  // _resubscribe subscribes sub on the session of gen once its handler is
  // idle (the cursor of a message still being handled counts), from its
  // resume point.
  async _resubscribe(sub, gen) {
    await sub.busy;
    if (gen !== this.gen || this.subs.get(sub.topic) !== sub) return;
    const frame = { op: "subscribe", topic: sub.topic };
    if (sub.cls) frame.class = sub.cls;
    if (sub.context) frame.context = sub.context;
    let from = sub.resumeFrom;
    if (sub.consumer) {
      // A named consumer resumes where the gateway committed it (the last
      // contiguously acked): from only places a new one, on the first subscribe.
      frame.consumer = sub.consumer;
      if (sub.confirmed) from = undefined;
    } else if (from !== undefined && sub.acked > 0 && sub.node && sub.node !== this.node) {
      // Cursors are positions in one node's store: another node's mean
      // nothing. Live from here, and told.
      this._notice({ kind: "node_changed", topic: sub.topic, notice: { from_node: sub.node, to_node: this.node, cursor: sub.acked } });
      from = sub.resumeFrom = undefined;
      sub.node = "";
    } else if (!sub.consumer && from === undefined && sub.confirmed) {
      // Live only: what was published while disconnected is not delivered.
      this._notice({ kind: "live_resume", topic: sub.topic, notice: { reason: "resubscribed live only: messages published while disconnected are not delivered" } });
    }
    if (from !== undefined) frame.from = from;
    try {
      await this.command(frame);
    } catch (e) {
      if (e.code === "disconnected") return; // the next session tries again
      this.subs.delete(sub.topic);
      if (sub.waiters) sub.waiters.reject(e);
      else this._error(e);
      sub.waiters = null;
      return;
    }
    sub.confirmed = true;
    if (sub.waiters) sub.waiters.resolve(sub);
    sub.waiters = null;
  }

  _envelope(f, gen) {
    if (f.delivery_id > 0) this._pending(this.pending + 1);
    const msg = {
      topic: f.topic, cursor: f.cursor || 0, deliveryId: f.delivery_id, replayed: !!f.replayed, class: f.class,
      context: f.context || {}, payloadType: f.payload_type, payload: f.payload, payloadError: f.payload_error,
      payloadBase64: f.payload_base64, request: f.request, sessions: this.sessions,
      traceparent: f.traceparent || "", tracestate: f.tracestate || "",
    };
    const sub = this.subs.get(f.topic);
    if (sub) {
      this._enqueue(sub, { msg, gen, node: this.node });
      return;
    }
    if (f.topic.startsWith(SESSION_TOPICS)) {
      const h = this.options.onEnvelope;
      if (!h) {
        this._error(new GatewayError("no_handler", `envelope on ${f.topic} and no onEnvelope option`));
        return;
      }
      Promise.resolve().then(() => h(msg)).then(() => this._ack(null, msg, gen), (e) => this._error(e));
      return;
    }
    this._ack(null, msg, gen); // a topic unsubscribed meanwhile
  }

  _enqueue(sub, item) {
    sub.queue.push(item);
    if (!sub.busy) sub.busy = this._drain(sub).finally(() => { sub.busy = null; });
  }

  // _drain runs sub's queue, one item at a time, in order.
  async _drain(sub) {
    while (sub.queue.length > 0) {
      const item = sub.queue.shift();
      if (item.gen !== this.gen) continue; // the socket it came on closed
      if (item.notice) {
        this._notice(item.notice);
        const n = item.notice.notice || {};
        // Told once: a resume starts after what the notice covered.
        if (item.notice.kind === "stream_gap" && n.cursor > 0) sub.resumeFrom = Math.max(sub.resumeFrom || 0, n.cursor + 1);
        if (item.notice.kind === "stream_truncated" && n.first_kept > 0) sub.resumeFrom = Math.max(sub.resumeFrom || 0, n.first_kept);
        continue;
      }
      try {
        await sub.handler(item.msg);
      } catch (e) {
        this._error(Object.assign(new Error(`handler for ${sub.topic} rejected message ${item.msg.cursor || item.msg.deliveryId}: ${e && e.message}`), { cause: e, topic: sub.topic, msg: item.msg }));
        sub.queue = [];
        // Not acked, not passed: it comes again on a new session.
        if (item.gen === this.gen && this.ws) this.ws.close(4000, "handler rejected a message");
        return;
      }
      if (item.msg.cursor > 0) {
        sub.acked = item.msg.cursor;
        sub.resumeFrom = item.msg.cursor + 1;
        sub.node = item.node;
      }
      this._ack(sub, item.msg, item.gen);
    }
  }

  _ack(sub, msg, gen) {
    if (!(msg.deliveryId > 0) || gen !== this.gen) return; // ephemeral, or its session is gone
    this.command({ op: "ack", delivery_id: msg.deliveryId }).then((res) => {
      if (gen !== this.gen) return;
      this._pending(res.pending);
      if (this.options.onAck) this.options.onAck({ topic: msg.topic, cursor: msg.cursor, deliveryId: msg.deliveryId, pending: res.pending });
    }, (e) => { if (e.code !== "disconnected") this._error(e); });
  }

  _pending(n) {
    this.pending = n;
    if (this.options.onPending) this.options.onPending(n);
  }

  _notice(n) {
    if (this.options.onNotice) this.options.onNotice(n);
    else console.warn("echopubsub notice", n.kind, n.topic, n.notice); // never swallowed
  }

  _error(e) {
    if (this.options.onError) this.options.onError(e);
    else console.error("echopubsub", e);
  }

  _status(s) {
    if (this.options.onStatus) this.options.onStatus({ sessionId: this.sessionId, node: this.node, ...s });
  }
}

// syncJoins adds joins (key -> [{node, ref, meta}]) to list, once per ref.
function syncJoins(list, joins) {
  for (const [key, metas] of Object.entries(joins || {})) {
    const cur = list.get(key) || [];
    for (const m of metas) if (!cur.some((c) => c.ref === m.ref)) cur.push(m);
    if (cur.length > 0) list.set(key, cur);
  }
}
