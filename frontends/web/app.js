// deck's web page: a client of the server's wire over a WebSocket (/ws), as `deck attach` is on the
// socket. It keeps what DeckService.Snapshot gave and applies the events that follow (by `seq`),
// and draws at most once a frame: a turn of 200,000 chunks costs a string append per chunk.
// What agents send is put in the page as text (textContent, deckMarkdown), never as HTML, and may
// have any shape: it is read through asText/asList/asObjects, and an event, a message or a part that
// still cannot be drawn is shown as its text (a line in the console says why), never stopping the rest.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const TOKEN_KEY = "deck-token";
  //: A streamed text part is drawn as Markdown again at most this often, and up to this size.
  const MARKDOWN_EVERY_MS = 300;
  const MARKDOWN_LIVE_MAX = 60000;
  const MARKDOWN_MAX = 1000000;
  //: Messages drawn at once (the older ones behind a button), live terminal output kept.
  const SHOWN_MESSAGES = 150;
  const TERMINAL_TAIL = 16384;

  // -- what came, whatever its shape -------------------------------------------------------------

  const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);
  const asList = (x) => (Array.isArray(x) ? x : []);
  const asObjects = (x) => asList(x).filter(isObject);
  //: A string, a number or a boolean as text; anything else (null, an object, a list) as "".
  const asText = (x) => (typeof x === "string" ? x : typeof x === "number" || typeof x === "boolean" ? String(x) : "");

  //: How much of something that cannot be drawn is shown, as JSON.
  const RAW_MAX = 20000;

  function raw(value) {
    try {
      const json = JSON.stringify(value, null, 1);
      return (json === undefined ? String(value) : json).slice(0, RAW_MAX);
    } catch {
      return "(not readable)";
    }
  }

  function report(what, error) {
    console.error(`deck: ${what}:`, error);
  }

  const state = {
    seq: 0, agents: new Map(), conversations: {}, pending: new Map(), selected: null, clients: 0,
    tab: "chat", usage: null, terminals: new Map(), shownFrom: {}, deckNotices: [], actions: [],
  };

  // -- numbers, amounts and times, as the terminal shows them ------------------------------------

  const COUNTS = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  //: A count with thousands separators: 1,207.
  const count = (n) => (Number.isFinite(Number(n)) && asText(n) !== "" ? COUNTS.format(Number(n)) : "?");

  //: An amount as the terminal frontends write it: two decimals (0.30), or, below a cent, up to its
  //: second significant digit (0.0042); never in a notation of powers.
  function amountText(value) {
    const amount = Number(value);
    if (typeof value === "boolean" || !Number.isFinite(amount) || asText(value) === "") return "?";
    const size = Math.abs(amount);
    if (size === 0 || size >= 0.01) return amount.toFixed(2);
    const decimals = Math.min(20, 1 - Math.floor(Math.log10(size)));
    return amount.toFixed(decimals).replace(/0+$/, "");
  }

  //: `0.30 USD`, or "cost unknown": never 0 for a cost not reported.
  function money(m) {
    if (!isObject(m)) return "cost unknown";
    return `${amountText(m.amount)} ${asText(m.currency).toUpperCase()}`.trim();
  }

  //: Amounts by currency (`{USD: 1.1}`) as `1.10 USD + 3.00 EUR`, currencies in order; "" for none.
  function sum(totals) {
    if (!isObject(totals)) return "";
    return Object.keys(totals).sort().map((c) => money({ amount: totals[c], currency: c })).join(" + ");
  }

  const two = (n) => String(n).padStart(2, "0");

  //: A stored time (ISO 8601) in the browser's time zone: 2026-12-06 14:03; what cannot be read, as it is.
  function when(iso) {
    const text = asText(iso);
    const date = new Date(text);
    if (!text || Number.isNaN(date.getTime())) return text;
    return `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ${two(date.getHours())}:${two(date.getMinutes())}`;
  }

  //: What the user calls an agent: its title (AgentService.List), else its name.
  function agentTitle(name) {
    const agent = state.agents.get(name);
    return (agent && asText(agent.title)) || asText(name);
  }

  //: The levels a notice may have; anything else is shown as info.
  const LEVELS = ["info", "warning", "error"];
  const levelOf = (x) => (LEVELS.includes(x) ? x : "info");

  // -- the token ---------------------------------------------------------------------------------

  function token() {
    const match = /(?:^#|&)token=([A-Za-z0-9_-]+)/.exec(location.hash);
    if (match) {
      sessionStorage.setItem(TOKEN_KEY, match[1]);
      history.replaceState(null, "", location.pathname + location.search); // off the address bar
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  // -- the connection ----------------------------------------------------------------------------

  let ws = null;
  let nextId = 1;
  const calls = new Map();
  let synced = false;
  let early = [];
  let retry = 500;
  let failures = 0; // connections closed before they opened: a wrong token (a server started again), or no server

  function connect() {
    const secret = token();
    if (!secret) {
      link("no token: open the address `deck web` prints", "down");
      return;
    }
    link("connecting…");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // "deck.lines": the lines written together come as one message (fewer messages, the same lines).
    ws = new WebSocket(`${scheme}://${location.host}/ws`, ["deck", "deck.lines", "deck.token." + secret]);
    synced = false;
    early = [];
    ws.onopen = () => {
      retry = 500;
      failures = -1;
      call("DeckService.Snapshot").then(resync, (e) => toast(e.message));
    };
    ws.onmessage = (m) => {
      for (const line of String(m.data).split("\n")) {
        if (!line) continue;
        try { receive(line); } catch (error) { report("a line from the server could not be read", error); }
      }
    };
    ws.onclose = () => {
      for (const [, pending] of calls) pending.reject(new Error("connection lost"));
      calls.clear();
      failures = failures < 0 ? 0 : failures + 1;
      const why = failures >= 3 ? "refused or unreachable: if the server was started again, open the address `deck web` prints; " : "";
      link(`${why}reconnecting in ${Math.round(retry / 100) / 10} s…`, "down");
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 8000);
    };
  }

  function receive(line) {
    let data;
    try { data = JSON.parse(line); } catch { return; }
    if (!isObject(data)) return;
    if (data.event) {
      if (!synced) early.push(data);
      else apply(data);
      return;
    }
    const pending = calls.get(data.id);
    if (!pending) {
      if (data.error) toast(data.error.message);
      return;
    }
    calls.delete(data.id);
    if (data.error) pending.reject(Object.assign(new Error(data.error.message), { data: data.error.data }));
    else pending.resolve(data.result);
  }

  function call(method, params) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
      const id = nextId++;
      calls.set(id, { resolve, reject });
      ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: params || {} }));
    });
  }

  function act(method, params) {
    return call(method, params).catch((e) => { toast(e.message); throw e; });
  }

  // A snapshot, then the events that came after it (seq greater): nothing shown twice.
  function resync(snapshot) {
    state.seq = snapshot.seq;
    state.agents = new Map(asObjects(snapshot.agents).map((a) => [a.name, a]));
    state.conversations = isObject(snapshot.conversations) ? snapshot.conversations : {};
    state.pending = new Map(asObjects(snapshot.pending).map((p) => [p.id, p]));
    state.deckNotices = [];
    state.actions = asObjects(snapshot.actions).filter((a) => typeof a.name === "string" && typeof a.method === "string");
    $("actions-open").hidden = !state.actions.length;
    if (!state.selected || !state.agents.has(state.selected)) state.selected = state.agents.size ? state.agents.keys().next().value : null;
    synced = true;
    const held = early;
    early = [];
    for (const event of held) apply(event);
    link("connected", "up");
    dirty.all = true;
    schedule();
    refreshUsage();
  }

  function link(text, how) {
    const node = $("link");
    node.textContent = text;
    node.title = text; // on a phone, where a dot stands for "connected" and longer words are cut short
    node.className = "link" + (how ? " " + how : "");
  }

  // -- events ------------------------------------------------------------------------------------

  function conversation(agent) {
    return (state.conversations[agent] ||= { messages: [], busy: false, queued: 0, usage: null, commands: [], modes: null, configOptions: [], title: null });
  }

  function findMessage(conv, id) {
    const messages = asList(conv.messages);
    for (let i = messages.length - 1; i >= 0; i--) if (isObject(messages[i]) && messages[i].id === id) return messages[i];
    return null;
  }

  const handlers = {
    "agent:state"(e) {
      const known = state.agents.get(e.agent) || { name: e.agent, title: e.agent, icon: "" };
      state.agents.set(e.agent, { ...known, state: e.state, error: e.error ?? null, outdated: e.outdated });
      dirty.agents = true;
      if (e.agent === state.selected) dirty.head = true;
    },
    "message:updated"(e) {
      if (!isObject(e.message)) return;
      const conv = conversation(e.agent);
      if (!Array.isArray(conv.messages)) conv.messages = [];
      const at = conv.messages.findIndex((m) => isObject(m) && m.id === e.message.id);
      if (at >= 0) conv.messages[at] = e.message;
      else conv.messages.push(e.message);
      touch(e.agent, e.message.id, true);
      if (e.agent === state.selected) dirty.turn = true;
    },
    "message:delta"(e) {
      const message = findMessage(conversation(e.agent), e.messageId);
      if (!message) return;
      if (!Array.isArray(message.parts)) message.parts = [];
      const parts = message.parts;
      if (!Number.isInteger(e.index) || e.index < 0 || e.index > parts.length) return; // a part out of place: not one of its parts
      if (e.part) parts[e.index] = e.part;
      else if (isObject(parts[e.index]) && parts[e.index].type === e.kind) parts[e.index].text = asText(parts[e.index].text) + asText(e.text);
      else parts[e.index] = { type: e.kind, text: asText(e.text) };
      touch(e.agent, e.messageId, false);
      if (e.part && e.agent === state.selected) dirty.turn = true; // a tool call's part: what goes on may change
    },
    "turn:changed"(e) {
      const conv = conversation(e.agent);
      conv.busy = e.busy;
      conv.queued = e.queued;
      dirty.agents = true;
      if (e.agent === state.selected) dirty.head = true;
    },
    "permission:requested"(e) { state.pending.set(e.id, { ...e, kind: "permission" }); needsYou(e); },
    "question:requested"(e) { state.pending.set(e.id, { ...e, kind: "question" }); needsYou(e); },
    "permission:resolved"(e) { resolved(e.id); },
    "question:resolved"(e) { resolved(e.id); },
    "usage:changed"(e) {
      conversation(e.agent).usage = e.usage;
      usageSoon();
      if (e.agent === state.selected) dirty.head = true;
    },
    "conversation:reset"(e) {
      call("ChatService.Conversation", { agent: e.agent }).then((c) => {
        state.conversations[e.agent] = c;
        delete state.shownFrom[e.agent];
        if (e.agent === state.selected) dirty.all = true;
        schedule();
      }, () => {});
    },
    "conversation:changed"(e) {
      if (typeof e.field !== "string" || e.field === "__proto__") return;
      if (e.field !== "cut") conversation(e.agent)[e.field] = e.value;
      else call("ChatService.Conversation", { agent: e.agent }).then((c) => { state.conversations[e.agent] = c; dirty.all = true; schedule(); }, () => {});
      if (e.agent === state.selected) dirty.head = true;
    },
    "terminal:output"(e) {
      const key = e.agent + "\u0000" + e.terminalId;
      state.terminals.set(key, ((state.terminals.get(key) || "") + e.text).slice(-TERMINAL_TAIL));
      if (e.agent === state.selected) dirty.all = true;
    },
    "clients:changed"(e) { state.clients = e.clients; },
    "config:changed"() { call("DeckService.Snapshot").then(resync, () => {}); },
    "worktree:changed"(e) { if (state.tab === "worktree" && e.agent === state.selected) showWorktree(); },
    "deck:notice"(e) { notice(e); },
    "subagent:changed"(e) {
      if (typeof e.session !== "string") return;
      const conv = conversation(e.agent);
      if (!Array.isArray(conv.children)) conv.children = [];
      const index = childIndex(conv);
      const known = index.get(e.session);
      const child = { session: e.session, parent: e.parent, title: e.title, state: e.state, cancel: e.cancel };
      if (!known) {
        conv.children.push(child);
        index.set(e.session, child);
        return; // a new child has no message yet
      }
      const renamed = known.title !== e.title;
      Object.assign(known, child);
      if (renamed && e.agent === state.selected) dirty.all = true; // the heads of its messages name it
    },
  };

  // -- subagents: their messages nest under their parent's name, folded with a click -------------

  //: The subagent sessions folded (agent NUL session).
  const folded = new Set();

  //: A conversation's children by session id, made once for each `children` list it is given.
  const childIndexes = new WeakMap();

  function childIndex(conv) {
    const children = Array.isArray(conv.children) ? conv.children : [];
    let index = childIndexes.get(children);
    if (!index) {
      index = new Map(asObjects(children).filter((c) => typeof c.session === "string").map((c) => [c.session, c]));
      childIndexes.set(children, index);
    }
    return index;
  }

  function childOf(agent, session) {
    return (typeof session === "string" && childIndex(conversation(agent)).get(session)) || null;
  }

  // A session of the agent's as the user reads it: a child's title (else its id); the agent's own as the agent.
  function sessionName(agent, session) {
    const child = session ? childOf(agent, session) : null;
    return child ? asText(child.title) || asText(session) : agentTitle(agent);
  }

  // Who asks: the agent, and the subagent after it when one asks ("agent › child").
  function asker(request) {
    const session = typeof request.session === "string" ? request.session : null;
    return session ? `${agentTitle(request.agent)} › ${sessionName(request.agent, session)}` : agentTitle(request.agent);
  }

  function depthOf(agent, session) {
    let depth = 0;
    const seen = new Set();
    for (let child = childOf(agent, session); child && !seen.has(child.session) && depth < 32; child = childOf(agent, child.parent)) {
      seen.add(child.session);
      depth += 1;
    }
    return depth;
  }

  // A subagent's message: indented by how deep it nests, headed "agent › child" (a click folds that
  // child's messages); a message between sessions headed "sender → recipient".
  function drawNesting(entry, message) {
    let head = entry.node.querySelector(":scope > .sub");
    const agent = asText(message.agent) || state.selected;
    const session = typeof message.session === "string" ? message.session : null;
    const between = typeof message.sender === "string" || typeof message.recipient === "string";
    if (!session && !between) {
      if (head) head.remove();
      entry.node.style.marginLeft = "";
      return;
    }
    const key = agent + "\u0000" + session;
    const depth = session ? depthOf(agent, session) : 0;
    entry.node.classList.add("child");
    entry.node.classList.toggle("folded", session !== null && folded.has(key));
    entry.node.style.marginLeft = `${Math.min(depth, 8) * 1.5}em`;
    if (!head) { head = el("button", "sub"); entry.node.prepend(head); }
    let words = session ? `${agentTitle(agent)} › ${sessionName(agent, session)}` : agentTitle(agent);
    if (between) words += ` · ✉ ${sessionName(agent, message.sender)} → ${sessionName(agent, message.recipient)}`;
    head.textContent = (session ? (folded.has(key) ? "▸ " : "▾ ") : "") + words;
    head.disabled = !session;
    head.onclick = () => {
      if (folded.has(key)) folded.delete(key); else folded.add(key);
      dirty.all = true;
      schedule();
    };
  }

  // What a plugin tells the user, in its words: a toast; a sticky one stays on its agent (or on the
  // page, for one on no agent) until the same source sends "" for it. An alert (`bell`, `desktop`:
  // the notify plugin's) is for a terminal to ring: the page tells of what needs you on its own
  // ("needs you", and its notification when "Notify me" allowed it), and shows no toast for it.
  function notice(e) {
    if (e.bell === true || e.desktop === true) return;
    const text = asText(e.text);
    const level = levelOf(e.level);
    const source = asText(e.source);
    const agentName = typeof e.agent === "string" ? e.agent : null;
    if (e.sticky !== true) {
      // An agent's own notice is a note in its conversation: a toast only when another agent is shown.
      const shown = source === "agent" && agentName !== null && agentName === state.selected;
      if (text && !shown) toast((agentName ? `${agentTitle(agentName)}: ` : "") + text, level);
      return;
    }
    const agent = agentName === null ? null : state.agents.get(agentName);
    if (agentName !== null && !agent) return;
    const kept = asObjects(agent ? agent.notices : state.deckNotices).filter((n) => n.source !== source);
    if (text) kept.push({ source, level, text });
    if (agent) agent.notices = kept;
    else state.deckNotices = kept;
    dirty.agents = true;
    if (agentName === null || agentName === state.selected) dirty.head = true;
    if (state.tab === "usage" && state.usage) guarded("the usage", () => drawUsage(state.usage));
  }

  // One event that cannot be applied is logged and passed over: the next ones are applied as usual.
  function apply(event) {
    if (!isObject(event) || event.seq <= state.seq) return; // already in the snapshot
    state.seq = event.seq;
    const name = event.event;
    if (typeof name === "string" && Object.hasOwn(handlers, name)) {
      try { handlers[name](event); } catch (error) { report(`the event ${name} could not be applied, passed over`, error); }
    }
    schedule();
  }

  function touch(agent, messageId, whole) {
    if (agent !== state.selected) return;
    if (whole) dirty.messages.add(messageId);
    else dirty.streamed.add(messageId);
  }

  function needsYou(e) {
    dirty.agents = true;
    dirty.ask = true;
    dirty.turn = true;
    if (document.hidden && window.Notification && Notification.permission === "granted") {
      const what = e.kind === "question" || e.message ? e.message : e.toolCall && e.toolCall.title;
      new Notification(`${agentTitle(e.agent)} needs you`, { body: String(what || "").slice(0, 200), tag: e.id });
    }
  }

  function resolved(id) {
    state.pending.delete(id);
    dirty.agents = true;
    dirty.ask = true;
    dirty.turn = true;
  }

  // -- drawing, at most once a frame -------------------------------------------------------------

  const dirty = { all: true, agents: true, head: true, turn: true, ask: true, messages: new Set(), streamed: new Set() };
  let scheduled = false;

  function schedule() {
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(draw);
    }
  }

  let draws = 0;

  // Each flag is cleared before its drawing, and each drawing is guarded: one that throws is not
  // tried again every frame, and never keeps the others from being drawn.
  function draw() {
    scheduled = false;
    draws++;
    if (dirty.all) {
      dirty.all = false;
      dirty.agents = dirty.head = dirty.turn = dirty.ask = true;
      dirty.messages.clear();
      dirty.streamed.clear();
      guarded("the conversation", drawMessages);
    }
    if (dirty.agents) { dirty.agents = false; guarded("the agents", drawAgents); }
    if (dirty.head) { dirty.head = false; dirty.turn = true; guarded("the agent's bar", drawHead); }
    if (dirty.turn) { dirty.turn = false; guarded("the turn's line", drawTurn); }
    if (dirty.ask) { dirty.ask = false; guarded("the request", drawAsk); }
    if (dirty.messages.size || dirty.streamed.size) {
      const ids = new Set([...dirty.messages, ...dirty.streamed]);
      dirty.messages.clear();
      dirty.streamed.clear();
      const stick = nearBottom();
      const conv = conversation(state.selected);
      for (const id of ids) {
        const message = findMessage(conv, id);
        if (message) drawMessage(message);
      }
      if (stick) scrollDown();
    }
  }

  function guarded(what, drawing) {
    try { drawing(); } catch (error) { report(`${what} could not be drawn`, error); }
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function waiting(agent) {
    let n = 0;
    for (const p of state.pending.values()) if (p.agent === agent) n++;
    return n;
  }

  //: An agent's sandbox (AgentService.List's `sandbox`) in words: "sandboxed", "sandboxed, no network"; "" for none.
  function sandboxText(agent) {
    const box = isObject(agent.sandbox) ? agent.sandbox : null;
    if (!box || box.enabled !== true) return "";
    return box.network === false ? "sandboxed, no network" : "sandboxed";
  }

  function sandboxTitle(agent) {
    const writes = asList(agent.sandbox.write).map(asText).filter(Boolean);
    return `Runs in a sandbox${agent.sandbox.network === false ? " without the network" : ""}` +
      (writes.length ? `; it may write in ${writes.join(", ")}` : "");
  }

  //: A small padlock, the mark of a sandboxed agent where its words do not fit.
  function lockIcon(label) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 16 16");
    svg.setAttribute("class", "lock");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", "M4 7V5a4 4 0 0 1 8 0v2h1v8H3V7h1zm2 0h4V5a2 2 0 0 0-4 0v2z");
    svg.append(path);
    return svg;
  }

  function noticeNodes(notices) {
    return asObjects(notices).map((n) => el("div", "notice " + levelOf(n.level), asText(n.text)));
  }

  function drawAgents() {
    const list = $("agent-list");
    list.replaceChildren();
    for (const agent of state.agents.values()) {
      const li = el("li");
      const b = el("button");
      b.dataset.agent = agent.name;
      if (agent.name === state.selected) b.setAttribute("aria-current", "true");
      b.append(el("span", "dot " + asText(agent.state)), el("span", "agent-icon", asText(agent.icon)), el("span", "name", agentTitle(agent.name)));
      const boxed = sandboxText(agent);
      if (boxed) b.append(lockIcon(boxed));
      const notices = asObjects(agent.notices);
      if (notices.length) { // the worst level's mark, for where the words do not fit
        const worst = LEVELS.filter((l) => notices.some((n) => levelOf(n.level) === l)).pop();
        b.append(el("span", "flag " + worst, "!"));
        b.dataset.level = worst;
      }
      const n = waiting(agent.name);
      if (n) b.append(el("span", "needs", String(n)));
      if (boxed || notices.length) {
        const more = el("div", "more");
        if (boxed) more.append(el("div", "badge sandbox", boxed));
        more.append(...noticeNodes(notices));
        b.append(more);
      }
      b.title = [`${agent.name}: ${asText(agent.state)}`, boxed, ...notices.map((x) => asText(x.text))].filter(Boolean).join("\n");
      b.onclick = () => select(agent.name);
      li.append(b);
      list.append(li);
    }
    const total = state.pending.size;
    $("inbox").hidden = total === 0;
    $("inbox-count").textContent = String(total);
    document.title = total ? `(${total}) deck` : "deck";
    const bar = $("deck-notices");
    bar.replaceChildren(...noticeNodes(state.deckNotices));
    bar.hidden = !state.deckNotices.length;
  }

  function drawHead() {
    const agent = state.agents.get(state.selected);
    $("agent-name").textContent = agent ? agentTitle(agent.name) : "no agent";
    $("agent-icon").textContent = agent ? asText(agent.icon) : "";
    $("agent-state").textContent = agent ? asText(agent.state) + (agent.outdated ? " (outdated)" : "") : "";
    $("agent-state").className = "state " + (agent ? asText(agent.state) : "");
    const error = $("agent-error");
    error.hidden = !(agent && agent.error);
    error.textContent = agent && agent.error ? asText(agent.error) || raw(agent.error) : "";
    const marks = $("agent-marks");
    marks.replaceChildren();
    const boxed = agent ? sandboxText(agent) : "";
    if (boxed) {
      const badge = el("span", "badge sandbox");
      badge.append(lockIcon(boxed), document.createTextNode(boxed));
      badge.title = sandboxTitle(agent);
      marks.append(badge);
    }
    if (agent) marks.append(...noticeNodes(agent.notices));
    marks.hidden = !marks.childElementCount;
    const conv = conversation(state.selected);
    $("cancel").disabled = !conv.busy;
    for (const b of document.querySelectorAll("#agent-head [data-act]")) b.disabled = !agent;
    drawOptions(conv);
  }

  // What goes on in the agent's turn, not what its conversation is called: "working…", or the tool
  // call it runs, or that it waits for the user; nothing between turns. Its usage beside it.
  function drawTurn() {
    const conv = conversation(state.selected);
    const bits = [];
    if (conv.busy) {
      bits.push(waiting(state.selected) ? "waits for you" : "working…");
      const tool = currentTool(conv);
      if (tool) bits.push(tool);
    }
    if (conv.queued) bits.push(`${count(conv.queued)} queued`);
    $("turn-now").textContent = bits.join(" · ");
    $("turn-usage").textContent = isObject(conv.usage) ? usageText(conv.usage) : "";
  }

  //: The title of the tool call the agent's answer runs now (pending or in progress), or "".
  function currentTool(conv) {
    const messages = asList(conv.messages);
    for (let i = messages.length - 1; i >= 0 && i >= messages.length - 4; i--) {
      const message = messages[i];
      if (!isObject(message) || message.role !== "agent" || message.done) continue;
      const parts = asList(message.parts);
      for (let j = parts.length - 1; j >= 0; j--) {
        const part = parts[j];
        if (isObject(part) && part.type === "tool" && (part.status === "pending" || part.status === "in_progress")) {
          return asText(part.title) || asText(part.kind) || "a tool call";
        }
      }
      return "";
    }
    return "";
  }

  // The agent's config options (model, mode, thought level…: a select, or a checkbox for a boolean
  // one), and its legacy session modes when no option of category mode stands for them.
  function drawOptions(conv) {
    const row = $("options");
    row.replaceChildren();
    const agent = state.selected;
    const options = asObjects(conv.configOptions).filter((o) => typeof o.id === "string");
    for (const option of options) {
      const label = el("label", "", asText(option.name) || option.id);
      label.title = asText(option.description) || option.id;
      if (option.type === "boolean") {
        const box = Object.assign(el("input"), { type: "checkbox", checked: !!option.currentValue });
        box.dataset.option = option.id;
        box.onchange = () => act("ChatService.SetConfigOption", { agent, configId: option.id, value: box.checked }).catch(() => {});
        label.append(box);
      } else {
        const select = el("select");
        select.dataset.option = option.id;
        for (const item of asObjects(option.options)) {
          for (const choice of item.group !== undefined ? asObjects(item.options) : [item]) {
            select.append(Object.assign(el("option", "", asText(choice.name) || asText(choice.value)), { value: asText(choice.value) }));
          }
        }
        select.value = String(option.currentValue);
        select.onchange = () => act("ChatService.SetConfigOption", { agent, configId: option.id, value: select.value }).catch(() => {});
        label.append(select);
      }
      row.append(label);
    }
    const modes = isObject(conv.modes) ? conv.modes : {};
    const available = asObjects(modes.availableModes).filter((m) => typeof m.id === "string");
    if (available.length && !options.some((o) => o.category === "mode")) {
      const label = el("label", "", "Mode");
      const select = el("select");
      select.dataset.option = "mode";
      for (const mode of available) select.append(Object.assign(el("option", "", asText(mode.name) || mode.id), { value: mode.id }));
      select.value = asText(modes.currentModeId);
      select.onchange = () => act("ChatService.SetMode", { agent, modeId: select.value }).catch(() => {});
      label.append(select);
      row.append(label);
    }
  }

  function usageText(usage) {
    const parts = [];
    const used = Number(usage.used), size = Number(usage.size);
    if (size > 0 && Number.isFinite(used)) parts.push(`context ${Math.round((100 * used) / size)}%`);
    parts.push(money(usage.cost));
    return parts.join(" · ");
  }

  // -- the conversation --------------------------------------------------------------------------

  const drawn = new Map(); // message id → {node, parts: [{node, kind, size, markdownAt}]}

  function drawMessages() {
    const box = $("messages");
    box.replaceChildren();
    drawn.clear();
    if (!state.selected) { box.append(el("div", "empty", "No agent in the config.")); return; }
    const messages = asObjects(conversation(state.selected).messages);
    const from = Math.max(0, state.shownFrom[state.selected] ?? messages.length - SHOWN_MESSAGES);
    if (from > 0) {
      const more = el("button", "", `Show ${count(from)} earlier messages`);
      more.onclick = () => { state.shownFrom[state.selected] = Math.max(0, from - SHOWN_MESSAGES); dirty.all = true; schedule(); };
      box.append(more);
    }
    if (!messages.length) box.append(el("div", "empty", "No messages yet: say something below."));
    for (const message of messages.slice(from)) drawMessage(message);
    scrollDown();
  }

  // A part that cannot be drawn is shown as its text (drawPart), and a message that still cannot be
  // drawn as its parts' text: the messages after it are drawn as usual.
  function drawMessage(message) {
    let entry = drawn.get(message.id);
    if (!entry) {
      entry = { node: el("div"), parts: [] };
      entry.node.dataset.id = asText(message.id);
      drawn.set(message.id, entry);
      const box = $("messages");
      const empty = box.querySelector(".empty");
      if (empty) empty.remove();
      box.append(entry.node);
    }
    try {
      fillMessage(entry, message);
    } catch (error) {
      report(`the message ${asText(message.id)} could not be drawn, shown as text`, error);
      for (const slot of entry.parts) clearTimeout(slot.later);
      entry.parts = [];
      const texts = asList(message.parts).map((p) => (isObject(p) && typeof p.text === "string" ? p.text : raw(p)));
      entry.node.replaceChildren(el("pre", "plain", texts.join("\n").slice(0, MARKDOWN_MAX)));
      entry.asText = true;
    }
  }

  function fillMessage(entry, message) {
    if (entry.asText) { entry.node.replaceChildren(); entry.asText = false; } // drawn as text last time
    entry.node.className = `msg ${asText(message.role)}` + (message.queued ? " queued" : "") + (message.done ? " done" : " live");
    drawLevel(entry, message);
    drawNesting(entry, message);
    const parts = asList(message.parts);
    parts.forEach((part, i) => drawPart(entry, i, part, message));
    for (let i = parts.length; i < entry.parts.length; i++) entry.parts[i].node.remove();
    entry.parts.length = Math.min(entry.parts.length, parts.length);
    drawQueued(entry, message);
    let meta = entry.node.querySelector(":scope > .meta");
    const said = metaText(message);
    if (said) {
      if (!meta) { meta = el("div", "meta"); entry.node.append(meta); }
      meta.textContent = said;
      entry.node.append(meta);
    } else if (meta) meta.remove();
  }

  //: How an agent's notice (a system note of code "notice") says its level.
  const LEVEL_WORDS = { info: "notice", warning: "warning", error: "error" };

  // An agent's notice: its level said first, and the note in its level's colour.
  function drawLevel(entry, message) {
    let label = entry.node.querySelector(":scope > .level");
    if (!(message.role === "system" && message.code === "notice")) {
      if (label) label.remove();
      return;
    }
    const level = levelOf(message.level);
    entry.node.classList.add("said", level);
    if (!label) { label = el("div"); entry.node.prepend(label); }
    label.className = "level " + level;
    label.textContent = LEVEL_WORDS[level];
  }

  // A message that waits to be sent can be edited or taken out of the queue.
  function drawQueued(entry, message) {
    let bar = entry.node.querySelector(":scope > .queued-actions");
    if (!(message.role === "user" && message.queued)) {
      if (bar) bar.remove();
      return;
    }
    if (bar) return;
    bar = el("div", "actions queued-actions");
    const edit = el("button", "", "Edit");
    edit.onclick = () => {
      const text = prompt("The message, before it is sent:", asObjects(message.parts).map((p) => asText(p.text)).join(""));
      if (text !== null && text.trim()) act("ChatService.EditQueued", { agent: message.agent, id: message.id, text }).catch(() => {});
    };
    const remove = el("button", "", "Remove");
    remove.onclick = () => act("ChatService.Unqueue", { agent: message.agent, id: message.id }).catch(() => {});
    bar.append(edit, remove);
    entry.node.append(bar);
  }

  function metaText(message) {
    const bits = [];
    if (message.queued) bits.push("queued");
    if (message.error) bits.push(asText(message.error) || raw(message.error));
    if (message.stopReason && message.stopReason !== "end_turn") bits.push(asText(message.stopReason));
    if (typeof message.durationMs === "number" && message.durationMs) bits.push(`${(message.durationMs / 1000).toFixed(1)} s`);
    return bits.join(" · ");
  }

  function drawPart(entry, i, part, message) {
    let slot = entry.parts[i];
    const kind = isObject(part) ? asText(part.type) : "";
    if (slot && slot.kind !== kind) { slot.node.remove(); slot = null; }
    if (!slot) {
      slot = { node: el("div"), kind, size: -1, markdownAt: 0, plain: null };
      const before = entry.parts[i + 1] ? entry.parts[i + 1].node : entry.node.querySelector(":scope > .meta");
      entry.node.insertBefore(slot.node, before || null);
      entry.parts[i] = slot;
    }
    try {
      if (kind === "text" && message.role === "user") drawTyped(slot, asText(part.text));
      else if (kind === "text" || kind === "thought") drawText(slot, asText(part.text), !!message.done, kind);
      else if (kind === "plan") drawPlan(slot, part);
      else if (kind === "tool") drawTool(slot, part, message.agent);
      else if (kind === "compaction") drawCompaction(slot, part);
      else { slot.node.className = "text"; slot.node.textContent = isObject(part) && typeof part.text === "string" ? part.text : raw(part); }
    } catch (error) { // shown as its text, drawn afresh next time
      report(`a part of the message ${asText(message.id)} could not be drawn, shown as text`, error);
      clearTimeout(slot.later);
      Object.assign(slot, { size: -1, plain: null, thought: null, later: null });
      slot.node.className = "text";
      slot.node.replaceChildren(el("pre", "plain", isObject(part) && typeof part.text === "string" ? part.text.slice(0, MARKDOWN_MAX) : raw(part)));
    }
  }

  // Markdown while it is small, redrawn at most every MARKDOWN_EVERY_MS; past that, while it streams,
  // only the new text is appended as a text node; once done, Markdown once (up to MARKDOWN_MAX).
  function drawText(slot, text, done, kind) {
    if (slot.size === text.length && slot.done === done) return;
    const now = performance.now();
    const box = kind === "thought" ? thoughtBox(slot) : slot.node;
    if (kind !== "thought") slot.node.className = "text";
    const live = !done && text.length > MARKDOWN_LIVE_MAX;
    if (live || text.length > MARKDOWN_MAX) {
      if (!slot.plain || slot.plainSize > text.length) {
        slot.plain = el("pre", "plain");
        box.replaceChildren(slot.plain);
        slot.plainSize = 0;
      }
      slot.plain.append(document.createTextNode(text.slice(slot.plainSize)));
      slot.plainSize = text.length;
    } else {
      if (!done && now - slot.markdownAt < MARKDOWN_EVERY_MS && slot.size >= 0) {
        slot.later ||= setTimeout(() => { // one redraw at the end of the wait, however many chunks came
          slot.later = null;
          dirty.streamed.add(slot.node.closest(".msg")?.dataset.id);
          schedule();
        }, MARKDOWN_EVERY_MS);
        return;
      }
      slot.plain = null;
      box.replaceChildren(window.deckMarkdown.render(text));
      slot.markdownAt = now;
    }
    slot.size = text.length;
    slot.done = done;
  }

  // What the user typed is shown as typed: its text, its spaces and its lines, no Markdown.
  function drawTyped(slot, text) {
    if (slot.typed === text) return;
    slot.node.className = "text";
    slot.node.replaceChildren(el("pre", "plain typed", text.slice(0, MARKDOWN_MAX)));
    slot.typed = text;
  }

  function thoughtBox(slot) {
    if (!slot.thought) {
      slot.node.className = "thought";
      const details = el("details");
      details.open = true;
      details.append(el("summary", "", "thinking"));
      slot.thought = el("div", "text");
      details.append(slot.thought);
      slot.node.replaceChildren(details);
    }
    return slot.thought;
  }

  function drawPlan(slot, part) {
    slot.node.className = "";
    const list = el("ul", "plan");
    for (const entry of asObjects(part.entries)) list.append(el("li", asText(entry.status), asText(entry.content)));
    slot.node.replaceChildren(list);
  }

  function drawTool(slot, part, agent) {
    slot.node.className = "tool";
    const head = el("div");
    const status = asText(part.status);
    const title = asText(part.title) || asText(part.kind) || "tool call";
    head.append(el("span", "title", title));
    const name = asText(part.name); // the tool's programmatic name, beside the title the agent words
    if (name && name !== title) head.append(el("span", "name", `(${name})`));
    head.append(el("span", "status " + status, status));
    const nodes = [head];
    for (const loc of asObjects(part.locations)) nodes.push(el("div", "snippet", asText(loc.path) + (loc.line ? ":" + asText(loc.line) : "")));
    for (const diff of asObjects(part.diffs)) nodes.push(diffBlock(diff));
    for (const term of asObjects(part.terminals)) {
      const live = state.terminals.get(agent + "\u0000" + term.terminalId) || "";
      const sent = asText(term.output);
      const output = live.length > sent.length ? live : sent;
      const pre = el("pre", "terminal", output || "…");
      nodes.push(pre);
      const exit = isObject(term.exitStatus) ? term.exitStatus : null;
      if (exit) nodes.push(el("div", "snippet", `exit ${asText(exit.exitCode ?? exit.signal)}`));
    }
    if (part.output) nodes.push(el("pre", "output", (asText(part.output) || raw(part.output)).slice(-20000)));
    slot.node.replaceChildren(...nodes);
  }

  //: The statuses of a context compaction; another one is said as it is, nothing read into it.
  const COMPACTION_STATUSES = ["in_progress", "completed", "failed", "cancelled"];

  // A context compaction, one line: in progress, done (its summary's first line), failed (why), cancelled.
  function drawCompaction(slot, part) {
    const known = COMPACTION_STATUSES.includes(part.status);
    const status = known ? part.status : "other";
    const firstLine = (x) => asText(x).trim().split("\n")[0];
    const summary = firstLine(part.summary);
    const error = firstLine(part.error);
    slot.node.className = "compaction " + status;
    slot.node.textContent = {
      in_progress: "compacting…",
      completed: summary ? `compacted: ${summary}` : "compacted",
      failed: error ? `compaction failed: ${error}` : "compaction failed",
      cancelled: "compaction cancelled",
      other: `compaction: ${asText(part.status)}`,
    }[status];
  }

  function diffBlock(diff) {
    const pre = el("pre", "diff");
    pre.append(el("span", "file", (diff.newFile ? "new file " : "") + asText(diff.path)));
    for (const [sign, line] of lineDiff(asText(diff.oldText), asText(diff.newText))) {
      pre.append(el("span", sign === "+" ? "add" : sign === "-" ? "del" : "", sign + " " + line + "\n"));
    }
    return pre;
  }

  // The lines removed and added (a longest common subsequence, for diffs of a sensible size).
  function lineDiff(a, b) {
    const x = a ? a.replace(/\n$/, "").split("\n") : [];
    const y = b ? b.replace(/\n$/, "").split("\n") : [];
    if (x.length * y.length > 400000) return [...x.map((l) => ["-", l]), ...y.map((l) => ["+", l])];
    const n = x.length, m = y.length;
    const t = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) t[i][j] = x[i] === y[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
      else if (t[i + 1][j] >= t[i][j + 1]) out.push(["-", x[i++]]);
      else out.push(["+", y[j++]]);
    }
    while (i < n) out.push(["-", x[i++]]);
    while (j < m) out.push(["+", y[j++]]);
    return out;
  }

  function nearBottom() {
    const tab = $("tab-chat");
    return tab.scrollHeight - tab.scrollTop - tab.clientHeight < 80;
  }

  function scrollDown() {
    const tab = $("tab-chat");
    tab.scrollTop = tab.scrollHeight;
  }

  // -- permission requests and questions ---------------------------------------------------------

  let asking = null;

  function oldestWaiting(agent) {
    for (const p of state.pending.values()) if (!agent || p.agent === agent) return p;
    return null;
  }

  function drawAsk() {
    const dialog = $("ask");
    if (asking && !state.pending.has(asking)) {
      asking = null;
      if (dialog.open) dialog.close();
    }
    if (asking) return;
    const next = oldestWaiting(state.selected);
    if (!next) return;
    asking = next.id;
    $("ask-error").hidden = true;
    try {
      if (next.kind === "permission") askPermission(next);
      else askQuestion(next);
    } catch (error) { // shown as its text: it can still be declined, or left for later
      report(`the request ${asText(next.id)} could not be drawn, shown as text`, error);
      $("ask-title").textContent = `${agentTitle(next.agent)} asks`;
      $("ask-body").replaceChildren(el("pre", "plain", raw(next)));
      $("ask-options").replaceChildren(...(next.kind === "question" ? [declineButton(next)] : []), laterButton());
    }
    if (!dialog.open) dialog.showModal();
    const first = $("ask-options").querySelector("[autofocus]");
    if (first) first.focus();
  }

  // The option offered first (Enter takes it): deck.frontend.default_option's reading, mirrored once
  // here — the one that allows once, else the first that is not an "always", else the first.
  function defaultOption(options) {
    const kinds = options.map((o) => asText(o.kind));
    const once = kinds.indexOf("allow_once");
    if (once >= 0) return once;
    const plain = kinds.findIndex((k) => !k.endsWith("_always"));
    return plain >= 0 ? plain : 0;
  }

  function askPermission(p) {
    const tool = isObject(p.toolCall) ? p.toolCall : {};
    $("ask-title").textContent = `${asker(p)} asks: ${asText(tool.title) || asText(tool.kind) || "permission"}`;
    const body = $("ask-body");
    body.replaceChildren();
    const diffs = asObjects(tool.diffs);
    for (const diff of diffs) body.append(diffBlock(diff));
    if (tool.input && !diffs.length) body.append(el("pre", "", (asText(tool.input) || raw(tool.input)).slice(0, 4000)));
    const options = $("ask-options");
    options.replaceChildren();
    const choices = asObjects(p.options).filter((o) => typeof o.optionId === "string");
    if (!choices.length) body.append(el("p", "", "The agent offers no option to choose from."));
    const first = defaultOption(choices);
    for (const [index, option] of choices.entries()) { // never "always" by default
      const once = index === first;
      const b = el("button", once ? "primary" : "", asText(option.name) || option.optionId);
      b.type = "button";
      b.dataset.option = option.optionId;
      b.dataset.kind = asText(option.kind);
      if (once) b.autofocus = true;
      b.onclick = () => act("ChatService.AnswerPermission", { id: p.id, optionId: option.optionId }).catch(() => {});
      options.append(b);
    }
    options.append(laterButton());
  }

  // A choice of a question's field, as text: a string or a number as it is, anything else as JSON.
  const choiceText = (c) => (c !== null && typeof c === "object" ? raw(c) : String(c));

  // A question's form: each field under its title (`Branch *` when the form requires it) and its
  // description; Answer sends nothing until each required field is filled, and says which are not.
  // An optional field left empty is left out of the answer, as the console does.
  function askQuestion(q) {
    $("ask-title").textContent = `${asker(q)} asks`;
    const body = $("ask-body");
    body.replaceChildren(el("p", "", asText(q.message)));
    const url = typeof q.url === "string" && /^https?:\/\//i.test(q.url);
    if (url) { // a URL-mode question: the page to open, then go ahead or not
      const link = Object.assign(el("a", "", "Open the page"), { href: q.url, target: "_blank", rel: "noopener noreferrer nofollow" });
      body.append(link);
    }
    const schema = isObject(q.schema) ? q.schema : {};
    const props = isObject(schema.properties) ? schema.properties : {};
    const required = new Set(asList(schema.required).filter((x) => typeof x === "string"));
    const fields = [];
    for (const [name, given] of Object.entries(props)) {
      const spec = isObject(given) ? given : {};
      const title = asText(spec.title) || name;
      const label = el("label", "field");
      const head = el("span", "field-name", title);
      if (required.has(name)) head.append(" ", Object.assign(el("abbr", "required", "*"), { title: "required" }));
      label.append(head);
      const about = asText(spec.description);
      if (about) label.append(el("span", "hint", about));
      let input;
      let byText = null; // a choice's text → the choice itself (a number stays a number)
      const choices = Array.isArray(spec.enum) ? spec.enum : asObjects(spec.oneOf).map((o) => o.const).filter((c) => c !== undefined);
      if (choices.length) {
        input = el("select");
        byText = new Map();
        for (const c of choices) {
          byText.set(choiceText(c), c);
          input.append(Object.assign(el("option", "", choiceText(c)), { value: choiceText(c) }));
        }
        if (spec.default !== undefined && byText.has(choiceText(spec.default))) input.value = choiceText(spec.default);
      } else if (spec.type === "boolean") {
        input = Object.assign(el("input"), { type: "checkbox", checked: spec.default === true });
      } else {
        input = Object.assign(el("input"), { type: spec.type === "number" || spec.type === "integer" ? "number" : "text" });
        if (spec.type === "integer") input.step = "1";
        if (spec.default !== undefined) input.value = asText(spec.default);
      }
      input.name = name;
      if (required.has(name)) { input.required = true; input.setAttribute("aria-required", "true"); }
      label.append(input);
      body.append(label);
      fields.push({ name, spec, title, input, byText, needed: required.has(name) });
    }
    if (fields.some((f) => f.needed)) body.append(el("p", "hint", "* required"));
    const problem = $("ask-error");
    problem.textContent = "";
    problem.hidden = true;
    const options = $("ask-options");
    const answer = el("button", "primary", url ? "Done, go on" : "Answer");
    answer.type = "button";
    answer.onclick = () => {
      const values = {};
      const missing = [];
      const wrong = [];
      for (const f of fields) {
        f.input.removeAttribute("aria-invalid");
        if (f.spec.type === "boolean" && !f.byText) { values[f.name] = f.input.checked; continue; }
        const text = f.input.value;
        if (!text.trim()) {
          if (f.needed) missing.push(f);
          continue;
        }
        if (f.byText) values[f.name] = f.byText.has(text) ? f.byText.get(text) : text;
        else if (f.spec.type === "number" || f.spec.type === "integer") {
          const n = Number(text);
          if (!Number.isFinite(n) || (f.spec.type === "integer" && !Number.isInteger(n))) wrong.push(f);
          else values[f.name] = n;
        } else values[f.name] = text;
      }
      if (missing.length || wrong.length) {
        const said = [];
        const names = (list) => list.map((f) => f.title).join(", ");
        if (missing.length) said.push(`${names(missing)} ${missing.length > 1 ? "are" : "is"} required`);
        if (wrong.length) said.push(`${names(wrong)} must be ${wrong.length > 1 ? "numbers" : "a number"}`);
        problem.textContent = said.join("; ") + ". Nothing was sent.";
        problem.hidden = false;
        for (const f of [...missing, ...wrong]) f.input.setAttribute("aria-invalid", "true");
        [...missing, ...wrong][0].input.focus();
        return;
      }
      problem.hidden = true;
      act("ChatService.AnswerQuestion", { id: q.id, values }).catch(() => {});
    };
    options.replaceChildren(answer, declineButton(q), laterButton());
  }

  function declineButton(q) {
    const decline = el("button", "", "Decline");
    decline.type = "button";
    decline.onclick = () => act("ChatService.AnswerQuestion", { id: q.id, values: null }).catch(() => {});
    return decline;
  }

  function laterButton() {
    const later = el("button", "quiet", "Later");
    later.type = "button";
    later.onclick = () => { $("ask").close(); };
    return later;
  }

  // -- the other tabs ----------------------------------------------------------------------------

  function showTab(name) {
    state.tab = name;
    for (const b of document.querySelectorAll("[data-tab]")) b.setAttribute("aria-selected", String(b.dataset.tab === name));
    for (const t of ["chat", "history", "worktree", "usage"]) $("tab-" + t).hidden = t !== name;
    $("composer").hidden = name !== "chat";
    if (name === "history") showHistory();
    if (name === "worktree") showWorktree();
    if (name === "usage") refreshUsage(true);
    if (name === "chat") scrollDown();
  }

  function showHistory() {
    const box = $("history");
    box.replaceChildren(el("div", "empty", "Loading…"));
    call("ChatService.History", { agent: state.selected, limit: 50 }).then((rows) => {
      box.replaceChildren();
      if (!rows.length) box.append(el("div", "empty", "No stored conversation for this agent."));
      const list = el("div", "list");
      for (const row of asObjects(rows)) list.append(conversationItem(row, false, () => showTab("chat")));
      box.append(list);
    }, (e) => box.replaceChildren(el("div", "empty", e.message)));
  }

  function search(query) {
    const box = $("history");
    call("ChatService.Search", { query, limit: 50 }).then((rows) => {
      box.replaceChildren();
      if (!rows.length) box.append(el("div", "empty", `Nothing found for “${query}”.`));
      const list = el("div", "list");
      for (const row of asObjects(rows)) list.append(hitItem(row, () => showTab("chat")));
      box.append(list);
    }, (e) => box.replaceChildren(el("div", "empty", e.message)));
  }

  //: A stored conversation (ChatService.History's row): its title, messages and time (its agent's
  //: title first, `withAgent`), and Open, which makes it its agent's current one, then `opened()`.
  function conversationItem(row, withAgent, opened) {
    const item = el("div", "item");
    const said = el("div", "snippet", `${withAgent ? agentTitle(row.agent) + " · " : ""}${count(row.messages)} messages · `);
    said.append(timeNode(row.updatedAt));
    item.append(el("div", "", asText(row.title) || "(untitled)"), said);
    const open = el("button", "", "Open");
    open.type = "button";
    open.onclick = () => act("ChatService.OpenConversation", { id: row.id }).then(() => {
      if (state.agents.has(row.agent)) select(row.agent);
      opened();
    }, () => {});
    item.append(open);
    return item;
  }

  //: A stored message found (ChatService.Search's row): its agent, role and time, the words found
  //: highlighted, and Open.
  function hitItem(row, opened) {
    const item = el("div", "item");
    const said = el("div", "", `${agentTitle(row.agent)} · ${asText(row.role)} · `);
    said.append(timeNode(row.at));
    item.append(said, snippetNode(row.snippet));
    const open = el("button", "", "Open");
    open.type = "button";
    open.onclick = () => act("ChatService.OpenConversation", { id: row.conversationId }).then(() => {
      if (state.agents.has(row.agent)) select(row.agent);
      opened();
    }, () => {});
    item.append(open);
    return item;
  }

  //: A stored time, in the browser's time zone; the time as stored in its tooltip.
  function timeNode(iso) {
    const node = el("time", "", when(iso));
    if (asText(iso)) { node.dateTime = asText(iso); node.title = asText(iso); }
    return node;
  }

  // A search hit's words, the matches (between the `**` the search puts around them) highlighted;
  // everything is text. A `**` left unpaired is shown as it is.
  function snippetNode(snippet) {
    const node = el("div", "snippet");
    const bits = asText(snippet).split("**");
    if (bits.length % 2 === 0) bits.splice(-2, 2, bits.at(-2) + "**" + bits.at(-1));
    bits.forEach((bit, i) => {
      if (i % 2) node.append(el("mark", "", bit));
      else if (bit) node.append(document.createTextNode(bit));
    });
    return node;
  }

  function showWorktree() {
    const box = $("worktree");
    const agent = state.selected;
    call("WorktreeService.Diff", { agent }).then((diff) => {
      box.replaceChildren(diff ? diffNode(diff) : el("div", "empty", "No changes in this agent's worktree."));
    }, (e) => box.replaceChildren(el("div", "empty", e.message)));
  }

  //: A unified diff, each line coloured by what it does (a file's header, added, removed, a hunk).
  function diffNode(text) {
    const pre = el("pre", "diff");
    for (const line of String(text).split("\n")) {
      const cls = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") ? "file" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(el("span", cls, line + "\n"));
    }
    return pre;
  }

  let usageTimer = null;
  function usageSoon() {
    if (!usageTimer) usageTimer = setTimeout(() => { usageTimer = null; refreshUsage(); }, 1000);
  }

  // The header's sum; on the Usage tab, the whole of `deck usage` and `deck usage --by day`.
  function refreshUsage(show) {
    const shown = show || state.tab === "usage";
    call("DeckService.Usage", shown ? { by: "day" } : {}).then((usage) => {
      if (!isObject(usage)) return;
      state.usage = usage;
      const total = sum(usage.sinceStart) || sum(usage.total);
      $("spent").replaceChildren(...(total ? [el("span", "wide", "spent "), total] : []));
      $("spent").title = total ? "What the agents spent since the server started" : "";
      if (shown) guarded("the usage", () => drawUsage(usage));
    }, (e) => { if (shown) $("usage").replaceChildren(el("div", "empty", e.message)); });
  }

  function table(headings, rows, cls) {
    const t = el("table", cls);
    const head = el("tr");
    for (const h of headings) head.append(el("th", "", h));
    t.append(head);
    for (const cells of rows) {
      const tr = el("tr");
      for (const [i, cell] of cells.entries()) {
        const td = el("td");
        td.dataset.label = headings[i]; // on a phone a row is a card, each value under its heading
        if (cell instanceof Node) td.append(cell);
        else td.textContent = cell;
        tr.append(td);
      }
      t.append(tr);
    }
    const box = el("div", "table");
    box.append(t);
    return box;
  }

  const orNothing = (text) => text || "nothing spent yet";

  function drawUsage(usage) {
    const box = $("usage");
    const tokens = isObject(usage.tokens) ? usage.tokens : {};
    const lines = el("div", "totals");
    lines.append(
      el("p", "", `Since the server started: ${orNothing(sum(usage.sinceStart))} · today: ${orNothing(sum(usage.today))}`),
      el("p", "", `The agents' conversations: ${sum(usage.total) || "no cost reported"}`),
    );
    if (Number(tokens.sinceStart)) lines.append(el("p", "", `Tokens reported: ${count(tokens.sinceStart)} since the server started, ${count(tokens.today)} today`));
    const rows = [];
    for (const [name, given] of Object.entries(isObject(usage.agents) ? usage.agents : {})) {
      const row = isObject(given) ? given : {};
      const used = Number(row.used) || 0, size = Number(row.size) || 0;
      const counted = isObject(row.tokens) ? row.tokens : {};
      const unknown = !isObject(row.cost) && !sum(row.spent);
      const agent = state.agents.get(name);
      const budget = asObjects(agent && agent.notices).filter((n) => n.source === "budget");
      const budgetCell = el("div", "");
      if (budget.length) budgetCell.append(...noticeNodes(budget));
      else budgetCell.textContent = "—";
      rows.push([
        agentTitle(name),
        size ? `${count(used)} / ${count(size)}` : used ? count(used) : "not reported",
        Number(counted.conversation) ? count(counted.conversation) : "—",
        unknown ? "cost unknown (not counted)" : money(row.cost),
        unknown ? "—" : orNothing(sum(row.spent)),
        unknown ? "—" : orNothing(sum(row.today)),
        budgetCell,
      ]);
    }
    const parts = [lines, table(["agent", "context", "tokens", "conversation", "since start", "today", "budget"], rows, "usage")];
    if (asList(usage.notCounted).length) parts.push(el("p", "snippet", `Not counted (they report no cost): ${asList(usage.notCounted).map(agentTitle).join(", ")}`));
    if (Array.isArray(usage.days)) {
      parts.push(el("h3", "", "Per day"));
      const days = asObjects(usage.days);
      if (!days.length) parts.push(el("div", "empty", "No cost reported yet."));
      else {
        const dayRows = [...days].reverse().map((day) => [
          asText(day.day),
          orNothing(sum(day.total)),
          Object.keys(isObject(day.agents) ? day.agents : {}).sort().map((name) => `${agentTitle(name)} ${sum(day.agents[name])}`).join(", ") || "—",
          Number(day.tokens) ? count(day.tokens) : "—",
        ]);
        parts.push(table(["day", "spent", "by agent", "tokens"], dayRows, "usage days"));
      }
    }
    box.replaceChildren(...parts);
  }

  // -- the plugins' actions ---------------------------------------------------------------------
  // What the plugins offer to do, as data (DeckService.Actions, in the snapshot): each names a service
  // method, its parameters and how its result reads. The page knows none of them: a plugin's action
  // is offered here with no code of the page's.

  //: How an action is typed in line mode: `/history [AGENT]`, `/search WORDS`.
  function actionUsage(action) {
    const words = ["/" + asText(action.name)];
    for (const param of asObjects(action.params)) {
      const shown = asText(param.metavar) || asText(param.name).toUpperCase();
      words.push(param.required ? shown : `[${shown}]`);
    }
    return words.join(" ");
  }

  function actionButton(label, onclick, primary) {
    const b = el("button", primary ? "primary" : "", label);
    b.type = "button";
    b.onclick = onclick;
    return b;
  }

  //: The dialog's parts, each emptied and hidden but for what `shown` names.
  function actionsDialog(title, help) {
    $("actions-title").textContent = title;
    $("actions-help").textContent = help || "";
    $("actions-help").hidden = !help;
    for (const id of ["actions-list", "actions-params", "actions-result"]) $(id).replaceChildren();
    $("actions-error").hidden = true;
    $("actions-form").onsubmit = (e) => e.preventDefault();
    $("actions-buttons").replaceChildren(actionButton("Close", () => $("actions").close()));
    const dialog = $("actions");
    if (!dialog.open) dialog.showModal();
  }

  function openActions() {
    actionsDialog("Actions", "");
    const list = $("actions-list");
    if (!state.actions.length) list.append(el("div", "empty", "No plugin offers an action."));
    for (const action of state.actions) {
      const b = el("button", "item action");
      b.type = "button";
      b.dataset.action = asText(action.name);
      b.append(el("code", "usage", actionUsage(action)), el("span", "snippet", ` ${asText(action.help)}`));
      if (action.source) b.append(el("span", "source", ` · ${asText(action.source)}`));
      b.onclick = () => chooseAction(action);
      list.append(b);
    }
    const first = list.querySelector("button");
    if (first) first.focus();
  }

  // Its parameters, in the order typed: an agent's as a choice of the agents (the selected one at
  // first), the others as text; `*` after a required one. Run (or Enter) calls its method.
  function chooseAction(action) {
    const params = asObjects(action.params).filter((p) => typeof p.name === "string");
    actionsDialog(actionUsage(action), asText(action.help));
    const box = $("actions-params");
    const fields = [];
    for (const param of params) {
      const label = el("label");
      const name = el("span", "field-name", asText(param.metavar) || param.name);
      if (param.required) name.append(el("abbr", "required", " *"));
      label.append(name);
      if (param.help) label.append(el("span", "hint", asText(param.help)));
      let input;
      if (param.agent) {
        input = el("select");
        if (!param.required) input.append(Object.assign(el("option", "", "(any)"), { value: "" }));
        for (const agent of state.agents.values()) input.append(Object.assign(el("option", "", agentTitle(agent.name)), { value: agent.name }));
        input.value = state.selected || "";
      } else {
        input = Object.assign(el("input"), { type: "text" });
      }
      input.name = param.name;
      if (param.required) input.setAttribute("aria-required", "true");
      label.append(input);
      box.append(label);
      fields.push({ param, input });
    }
    if (fields.some((f) => f.param.required)) box.append(el("p", "hint", "* required"));
    const run = () => {
      const values = {};
      const missing = [];
      for (const f of fields) {
        f.input.removeAttribute("aria-invalid");
        const text = f.input.value.trim();
        if (text) values[f.param.name] = text;
        else if (f.param.required) missing.push(f);
      }
      const problem = $("actions-error");
      if (missing.length) {
        const names = missing.map((f) => asText(f.param.metavar) || f.param.name).join(", ");
        problem.textContent = `${names} ${missing.length > 1 ? "are" : "is"} required. Nothing was run.`;
        problem.hidden = false;
        for (const f of missing) f.input.setAttribute("aria-invalid", "true");
        missing[0].input.focus();
        return;
      }
      problem.hidden = true;
      const typed = [`/${action.name}`, ...Object.values(values)].join(" ");
      $("actions-result").replaceChildren(el("div", "empty", "Running…"));
      call(action.method, values).then((result) => showResult(action, typed, result), (e) => {
        $("actions-result").replaceChildren();
        problem.textContent = e.message;
        problem.hidden = false;
      });
    };
    $("actions-form").onsubmit = (e) => { e.preventDefault(); run(); };
    $("actions-buttons").replaceChildren(actionButton("Run", run, true), actionButton("Back", openActions), actionButton("Close", () => $("actions").close()));
    if (fields.length) fields[0].input.focus();
    else run();
  }

  //: What an action gave, as its `shows` says it reads: text, a table and a diff pre-formatted,
  //: stored conversations and messages as lists (Open makes one current), a conversation made
  //: current by showing its agent; an empty result in the action's own words.
  function showResult(action, typed, result) {
    const box = $("actions-result");
    box.replaceChildren(el("div", "ran", typed));
    const empty = result === null || result === undefined || result === "" || (Array.isArray(result) && !result.length);
    if (empty) { box.append(el("div", "empty", asText(action.empty) || "Nothing.")); return; }
    const shows = asText(action.shows);
    const done = () => { $("actions").close(); showTab("chat"); };
    if (shows === "conversation") {
      const agent = isObject(result) ? asText(result.agent) : "";
      if (state.agents.has(agent)) select(agent);
      toast(`Opened a conversation of ${agentTitle(agent)}`, "info");
      done();
    } else if (shows === "conversations" && Array.isArray(result)) {
      const list = el("div", "list");
      for (const row of asObjects(result)) list.append(conversationItem(row, true, done));
      box.append(list);
    } else if (shows === "messages" && Array.isArray(result)) {
      const list = el("div", "list");
      for (const row of asObjects(result)) list.append(hitItem(row, done));
      box.append(list);
    } else if (shows === "diff" && typeof result === "string") {
      box.append(diffNode(result));
    } else if (shows === "table") {
      const rows = Array.isArray(result) ? result : [result];
      const headings = [];
      for (const row of asObjects(rows)) for (const key of Object.keys(row)) if (!headings.includes(key)) headings.push(key);
      box.append(table(headings, asObjects(rows).map((row) => headings.map((h) => cellText(row[h]))), "result"));
      const others = rows.filter((row) => !isObject(row));
      if (others.length) box.append(el("pre", "plain", others.map(cellText).join("\n")));
    } else {
      const text = isObject(result) && typeof result.summary === "string" ? result.summary : typeof result === "string" ? result : raw(result);
      box.append(el("pre", "plain", text));
    }
  }

  //: A value of a table as its cell's text: text as it is, nothing for null, the rest as JSON.
  function cellText(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "string") return value;
    if (typeof value === "number" || typeof value === "boolean") return String(value);
    try { return JSON.stringify(value) ?? String(value); } catch { return "(not readable)"; }
  }

  // -- what the user does ------------------------------------------------------------------------

  function select(name) {
    if (name === state.selected) return;
    state.selected = name;
    asking = null;
    if ($("ask").open) $("ask").close();
    dirty.all = true;
    schedule();
    if (state.tab !== "chat") showTab(state.tab);
  }

  function send() {
    const box = $("prompt");
    const text = box.value;
    if (!text.trim() || !state.selected) return;
    act("ChatService.Send", { agent: state.selected, text }).then(() => { box.value = ""; }, () => {});
  }

  //: A passing word: an error unless `level` says info or warning; a click takes it away.
  // The toasts are a popover: in the top layer, above a permission's or a question's dialog too.
  function toast(text, level) {
    const box = $("toasts");
    const node = el("div", "toast " + (level || "error"), text);
    const gone = () => {
      node.remove();
      if (!box.childElementCount && box.matches(":popover-open")) box.hidePopover();
    };
    node.onclick = gone;
    box.append(node);
    if (box.showPopover) {
      if (box.matches(":popover-open")) box.hidePopover(); // shown again: on top of what opened since
      box.showPopover();
    }
    setTimeout(gone, 6000);
  }

  function wire() {
    $("composer").onsubmit = (e) => { e.preventDefault(); send(); };
    // On a touch screen Enter is a new line (there is no Shift to hold): the Send button sends.
    const touch = matchMedia("(pointer: coarse)").matches;
    if (touch) $("prompt").placeholder = "Message the agent";
    $("prompt").onkeydown = (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !touch) { e.preventDefault(); send(); }
    };
    $("cancel").onclick = () => act("ChatService.Cancel", { agent: state.selected }).catch(() => {});
    const actions = { start: "AgentService.Start", stop: "AgentService.Stop", restart: "AgentService.Restart" };
    for (const b of document.querySelectorAll("#agent-head [data-act]")) {
      b.onclick = () => {
        if (b.dataset.act === "new") act("ChatService.NewConversation", { agent: state.selected }).catch(() => {});
        else act(actions[b.dataset.act], { name: state.selected }).catch(() => {});
      };
    }
    for (const b of document.querySelectorAll("[data-tab]")) b.onclick = () => showTab(b.dataset.tab);
    $("inbox").onclick = () => {
      const next = oldestWaiting(null);
      if (!next) return;
      select(next.agent);
      showTab("chat");
      asking = null;
      dirty.ask = true;
      schedule();
    };
    $("search-form").onsubmit = (e) => {
      e.preventDefault();
      const query = $("search").value.trim();
      if (query) search(query);
      else showHistory();
    };
    $("wt-refresh").onclick = showWorktree;
    $("actions-open").onclick = openActions;
    $("wt-merge").onclick = () => {
      if (!confirm(`Merge ${state.selected}'s worktree into its base branch?`)) return;
      act("WorktreeService.Merge", { agent: state.selected }).then((r) => { toast(`merged ${r.files} file(s) into ${r.base}`, "info"); showWorktree(); }, () => {});
    };
    const notify = $("notify");
    notify.hidden = !window.Notification || Notification.permission === "granted";
    notify.onclick = () => Notification.requestPermission().then((p) => { notify.hidden = p === "granted"; });
    $("ask").addEventListener("close", () => { /* "Later": asked again when it comes back to this agent */ });
    document.addEventListener("visibilitychange", () => { if (!document.hidden) schedule(); });
  }

  wire();
  connect();
  // For the tests and the benchmark: what the page holds, its socket, how often it drew.
  window.deckPage = { state, call, socket: () => ws, draws: () => draws };
})();
