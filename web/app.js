// The Drover dashboard: plain JavaScript, no framework, no build step.
//
// Data flow:
// - registry (same origin): GET /v1/watch?from=REV, a chunked stream of JSON lines (RESYNC,
//   PUT, DELETE, PROGRESS), read with fetch() and a ReadableStream; after a break it resumes
//   from the last revision seen, with a growing back-off. Every 2 s GET /v1/services and each
//   service's instance list for what events do not carry: degraded flags and lease times.
// - the fleet's own parts, found in the registry: every instance of drover-gateway and
//   drover-agent gets a panel, fed through the registry (same origin, with the token):
//   GET /v1/fleet/drover-gateway/ID (the gateway's /admin/snapshot) every second and
//   GET /v1/fleet/drover-agent/ID (the agent's /v1/deploys) every 2 s. So the page needs no flags,
//   works over HTTPS and never reaches a gateway or agent itself.
// - /ui/config.json (same origin): gateways' admin URLs and agents' URLs named by flags, fetched
//   directly (other origins, CORS).
// - gateways: GET /admin/snapshot every second; new-connection shares are deltas of the
//   per-instance counters between polls.
// - the registry's deploy history (same origin, with the token): GET /v1/deploys every 2 s, the
//   fleet's deploys as their controllers keep them; running ones are marked.
// - agents (other origins, CORS): GET /v1/deploys every 2 s, the copy each agent keeps.
// With auth on, the registry answers 401 and the page asks for a bearer token, kept in
// localStorage and sent only to the registry. Everything is drawn with textContent: no data
// ever becomes markup.
'use strict';

(() => {
  const TOKEN_KEY = 'drover.registry.token';
  const GATEWAY_POLL_MS = 1000;
  const AGENT_POLL_MS = 2000;
  const LEASE_POLL_MS = 2000;
  const FETCH_TIMEOUT_MS = 3000;
  const WATCH_IDLE_MS = 20000;  // the registry sends PROGRESS every 5 s on an idle stream
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 10000;
  const CHART_SAMPLES = 60;     // one per gateway poll
  const SHARE_WINDOW = 10;      // samples behind the "share" column
  const GONE_KEEP_MS = 15000;   // removed instances stay visible, struck through
  const MAX_EVENTS = 30;
  const MAX_DEPLOYS = 12;
  const PALETTE = ['#4e9af1', '#f1a34e', '#5cc98b', '#e0637a', '#b18cf2', '#e6d45c', '#4fd1d9',
                   '#f07fc8', '#9bbf5a', '#c98a5c'];

  const $ = (id) => document.getElementById(id);

  const state = {
    revision: 0,
    complete: 0,           // the last revision whose every event arrived: where a watch resumes
    newest: new Set(),     // the events of `revision` applied: "TYPE service/id generation"
    instances: new Map(),  // "service/id" -> instance JSON
    gone: new Map(),       // "service/id" -> {instance, reason, at}
    leases: new Map(),     // "service/id" -> {generation, remaining_ms, at}
    degraded: new Map(),   // service -> bool
    events: [],            // newest first: {at, text, kind}
    lastEventAt: null,
    connects: 0,           // watch streams opened; more than one means reconnects
    liveSince: null,
    token: localStorage.getItem(TOKEN_KEY) || '',
    tokenWaiters: [],
    synced: false,         // a RESYNC snapshot has arrived: an empty list means no instances
    tokenNeeded: false,    // the registry refused us until a token is given
    // {url, fleet, snapshot, error, at, history: Map(upstream key -> samples)}; `fleet`: the
    // registry key ("drover-gateway/ID") of one found there, fetched through the registry.
    gateways: [],
    agents: [],            // {url, fleet, registry, deploys, error, at}; the registry's history first
    openDeploys: new Set(),
  };

  // ---- small helpers -------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') node.className = v;
      else if (k === 'text') node.textContent = v;
      else if (k === 'dataset') Object.assign(node.dataset, v);
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  function table(headers, rows, cls) {
    return el('table', {class: cls || 'grid'},
              el('thead', {}, el('tr', {}, ...headers.map((h) => el('th', {text: h})))),
              el('tbody', {}, ...rows));
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const jitter = (ms) => ms * (0.8 + 0.4 * Math.random());

  function seconds(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '–';
    const s = ms / 1000;
    if (s < 10) return s.toFixed(1) + ' s';
    if (s < 120) return Math.round(s) + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    return Math.round(s / 3600) + ' h';
  }

  function clock(ms) {
    if (!ms) return '–';
    const d = new Date(ms);
    const pad = (n) => String(n).padStart(2, '0');
    const today = new Date();
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (d.toDateString() === today.toDateString()) return time;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
  }

  function colorOf(id) {
    let h = 2166136261;
    for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619);
    return PALETTE[(h >>> 0) % PALETTE.length];
  }

  function badge(text, kind) {
    return el('span', {class: `badge badge-${kind}`, text});
  }

  function stateBadge(name) {
    const kind = {READY: 'ok', STARTING: 'warn', DRAINING: 'drain'}[name] || 'muted';
    return badge(name, kind);
  }

  // fetch with a deadline; the registry's own requests carry the token.
  async function getJson(url, {registry = false} = {}) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
    try {
      const headers = registry ? authHeaders() : {};
      const res = await fetch(url, {headers, cache: 'no-store', signal: ctrl.signal});
      if (registry && res.status === 401) throw new AuthError();
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return await res.json();
    } catch (e) {
      if (e.name === 'AbortError') throw new Error('timed out');
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  class AuthError extends Error {
    constructor() {
      super('the registry needs a token');
      this.name = 'AuthError';
    }
  }

  // ---- token -----------------------------------------------------------------------------------

  function authHeaders() {
    return state.token ? {Authorization: `Bearer ${state.token}`} : {};
  }

  // Resolves once the user has given a token (the one that was refused is dropped).
  function needToken(message) {
    if (state.token) {
      state.token = '';
      localStorage.removeItem(TOKEN_KEY);
      message = message || 'The registry refused the saved token.';
    }
    showTokenPanel(message);
    return new Promise((resolve) => state.tokenWaiters.push(resolve));
  }

  function showTokenPanel(message) {
    $('token-panel').hidden = false;
    $('token-button').hidden = false;
    const error = $('token-error');
    error.hidden = !message;
    error.textContent = message || '';
    setConn('auth', 'token needed');
    state.tokenNeeded = true;
    renderServices();
    $('token-input').focus();
  }

  function setupToken() {
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const value = $('token-input').value.trim();
      if (!value) return;
      state.token = value;
      localStorage.setItem(TOKEN_KEY, value);
      $('token-input').value = '';
      $('token-panel').hidden = true;
      state.tokenNeeded = false;
      renderServices();
      const waiters = state.tokenWaiters.splice(0);
      for (const resolve of waiters) resolve();
    });
    $('token-forget').addEventListener('click', () => {
      state.token = '';
      localStorage.removeItem(TOKEN_KEY);
      $('token-error').hidden = false;
      $('token-error').textContent = 'Saved token forgotten.';
    });
    $('token-button').addEventListener('click', () => {
      $('token-panel').hidden = !$('token-panel').hidden;
    });
  }

  // ---- registry watch --------------------------------------------------------------------------

  function setConn(kind, text, why) {
    const conn = $('conn');
    conn.dataset.state = kind;
    conn.dataset.connects = state.connects;
    conn.textContent = text;
    const reconnects = state.connects > 1 ? `; reconnected ${state.connects - 1} time(s)` : '';
    conn.title = kind === 'live'
      ? `Registry watch stream: live since ${clock(state.liveSince)}${reconnects}`
      : `Registry watch stream: ${why || text}${reconnects}`;
  }

  function noteEvent(kind, text) {
    state.lastEventAt = Date.now();
    state.events.unshift({at: state.lastEventAt, kind, text});
    state.events.length = Math.min(state.events.length, MAX_EVENTS);
  }

  const keyOf = (inst) => `${inst.service}/${inst.id}`;

  function apply(ev) {
    if (typeof ev.revision === 'number') {
      // Events of one revision can span lines, and a stream can break between two of them: a
      // revision is whole once a later one, a RESYNC or a PROGRESS says so, and the watch resumes
      // from the last whole one. The events of the newest revision already applied are
      // remembered, so that those it replays are skipped.
      if (ev.type === 'PUT' || ev.type === 'DELETE') {
        const seen = `${ev.type} ${keyOf(ev.instance)} ${ev.instance.generation}`;
        if (ev.revision < state.revision) return;  // stale
        if (ev.revision > state.revision) {
          state.complete = state.revision;
          state.newest.clear();
        } else if (state.newest.has(seen)) {
          return;  // replayed
        }
        state.newest.add(seen);
      } else if (ev.type === 'RESYNC' || ev.type === 'PROGRESS') {
        if (ev.revision > state.revision) state.newest.clear();
        state.complete = Math.max(state.complete, ev.revision);
      }
      state.revision = Math.max(state.revision, ev.revision);
    }
    switch (ev.type) {
      case 'RESYNC': {
        const next = new Map();
        for (const inst of ev.instances || []) next.set(keyOf(inst), inst);
        for (const [key, inst] of state.instances) {
          if (!next.has(key)) state.gone.set(key, {instance: inst, reason: 'resync', at: Date.now()});
        }
        state.instances = next;
        state.synced = true;
        noteEvent('resync', `RESYNC at revision ${ev.revision}: ${next.size} instance(s)`);
        break;
      }
      case 'PUT': {
        const inst = ev.instance;
        const key = keyOf(inst);
        const before = state.instances.get(key);
        state.instances.set(key, inst);
        state.gone.delete(key);
        let what = before ? describeChange(before, inst) : `registered ${inst.state}`;
        noteEvent('put', `${key} ${what}`);
        break;
      }
      case 'DELETE': {
        const inst = ev.instance;
        const key = keyOf(inst);
        const current = state.instances.get(key);
        if (current && current.generation <= inst.generation) {
          state.instances.delete(key);
          state.gone.set(key, {instance: inst, reason: ev.reason, at: Date.now()});
        }
        noteEvent('delete', `${key} removed (${ev.reason})`);
        break;
      }
      case 'PROGRESS':
        break;
      default:
        break;
    }
    scheduleRender();
  }

  function describeChange(before, after) {
    const parts = [];
    if (before.generation !== after.generation) parts.push(`generation ${after.generation}`);
    if (before.state !== after.state) parts.push(`${before.state} → ${after.state}`);
    if (before.accepting !== after.accepting) {
      parts.push(after.accepting ? 'accepting' : 'not accepting');
    }
    if (before.weight !== after.weight) parts.push(`weight ${after.weight}`);
    return parts.length ? parts.join(', ') : 'updated';
  }

  async function watchLoop() {
    let backoff = BACKOFF_MIN_MS;
    for (;;) {
      const ctrl = new AbortController();
      let idle = null;
      const armIdle = () => {
        clearTimeout(idle);
        idle = setTimeout(() => ctrl.abort(), WATCH_IDLE_MS);
      };
      try {
        setConn(state.revision ? 'reconnecting' : 'connecting',
                state.revision ? 'reconnecting' : 'connecting');
        armIdle();
        const res = await fetch(`../v1/watch?from=${state.complete}`,
                                {headers: authHeaders(), cache: 'no-store', signal: ctrl.signal});
        if (res.status === 401) {
          clearTimeout(idle);
          await needToken();
          continue;
        }
        if (res.status === 400 && state.complete) {
          // Ahead of the registry: it lost its state (a new data directory). Start over.
          state.revision = 0;
          state.complete = 0;
          state.newest.clear();
          continue;
        }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        state.connects++;
        state.liveSince = Date.now();
        setConn('live', 'live');
        $('token-button').hidden = !state.token;
        backoff = BACKOFF_MIN_MS;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          armIdle();
          const {value, done} = await reader.read();
          if (done) break;
          buffer += value;
          let nl;
          while ((nl = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, nl).trim();
            buffer = buffer.slice(nl + 1);
            if (line) apply(JSON.parse(line));
          }
        }
        throw new Error('stream ended');
      } catch (e) {
        clearTimeout(idle);
        const wait = jitter(backoff);
        setConn('down', `reconnecting in ${seconds(wait)}`,
                `${e.message}; resuming from revision ${state.complete}`);
        await sleep(wait);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      } finally {
        clearTimeout(idle);
      }
    }
  }

  // Leases and degraded flags: not in events (a heartbeat changes no revision), so read.
  async function leaseLoop() {
    for (;;) {
      try {
        const services = await getJson('../v1/services', {registry: true});
        for (const s of services.services || []) state.degraded.set(s.name, !!s.degraded);
        const names = new Set([...state.instances.values()].map((i) => i.service));
        for (const name of names) {
          const list = await getJson(`../v1/services/${encodeURIComponent(name)}/instances`,
                                     {registry: true});
          const at = performance.now();
          for (const inst of list.instances || []) {
            if (typeof inst.lease_remaining_ms !== 'number') continue;
            state.leases.set(keyOf(inst), {generation: inst.generation,
                                           remaining_ms: inst.lease_remaining_ms, at});
          }
        }
        scheduleRender();
      } catch (e) {
        // The watch loop reports the registry's health and asks for a token.
      }
      await sleep(LEASE_POLL_MS);
    }
  }

  // ---- gateways ----------------------------------------------------------------------------------

  // Each listener (tcp) or route (http) of a gateway is one upstream: a routing table.
  function upstreamsOf(snapshot) {
    const out = [];
    for (const l of snapshot.listeners || []) {
      if (l.protocol === 'http') {
        for (const r of l.routes || []) {
          out.push({key: `${l.name} ${r.prefix}`, listener: l, view: r, counter: 'requests'});
        }
      } else {
        out.push({key: l.name, listener: l, view: l, counter: 'connections'});
      }
    }
    return out;
  }

  function recordGatewaySample(gw, snapshot, at) {
    const seen = new Set();
    for (const u of upstreamsOf(snapshot)) {
      seen.add(u.key);
      const counts = {};
      for (const inst of u.view.instances || []) counts[inst.id] = inst[u.counter] || 0;
      const samples = gw.history.get(u.key) || [];
      const prev = samples[samples.length - 1];
      const deltas = {};
      let total = 0;
      if (prev) {
        for (const [id, c] of Object.entries(counts)) {
          // Counters of an instance new to the table start at its first poll.
          if (!(id in prev.counts)) continue;
          const d = Math.max(0, c - prev.counts[id]);
          deltas[id] = d;
          total += d;
        }
      }
      samples.push({at, counts, deltas, total, interval: prev ? at - prev.at : 0});
      while (samples.length > CHART_SAMPLES + 1) samples.shift();
      gw.history.set(u.key, samples);
    }
    for (const key of [...gw.history.keys()]) if (!seen.has(key)) gw.history.delete(key);
  }

  // Where a panel's data comes from: through the registry for a part found there, else directly.
  function partSource(part, path) {
    if (!part.fleet) return {url: `${part.url}${path}`, registry: false};
    const [service, id] = part.fleet.split('/');
    return {url: `/v1/fleet/${encodeURIComponent(service)}/${encodeURIComponent(id)}`, registry: true};
  }

  // A part found in the registry is followed while it is registered; its panel then goes.
  function partGone(part, list) {
    if (!part.fleet || state.instances.has(part.fleet)) return false;
    list.splice(list.indexOf(part), 1);
    scheduleRender();
    return true;
  }

  function fetchError(e) {
    if (e.message === 'Failed to fetch') return 'unreachable';
    if (e.message === 'HTTP 503') return 'fetching';  // the registry's first fetch of a part
    return e.message;
  }

  async function gatewayLoop(gw) {
    const source = partSource(gw, '/admin/snapshot');
    for (;;) {
      if (partGone(gw, state.gateways)) return;
      const started = performance.now();
      try {
        const snapshot = await getJson(source.url, {registry: source.registry});
        gw.snapshot = snapshot;
        gw.error = null;
        gw.at = Date.now();
        recordGatewaySample(gw, snapshot, performance.now());
      } catch (e) {
        gw.error = fetchError(e);
      }
      scheduleRender();
      await sleep(Math.max(100, GATEWAY_POLL_MS - (performance.now() - started)));
    }
  }

  // Starts a panel for every gateway and agent registered that has none yet.
  function discoverFleet() {
    for (const [key, inst] of state.instances) {
      const base = `${(inst.labels || {}).scheme || 'http'}://${inst.address}`;
      if (inst.service === 'drover-gateway' && !state.gateways.some((g) => g.fleet === key || g.url === base)) {
        const gw = {url: base, fleet: key, history: new Map()};
        state.gateways.push(gw);
        gatewayLoop(gw);
      } else if (inst.service === 'drover-agent' && !state.agents.some((a) => a.fleet === key || a.url === base)) {
        const agent = {url: base, fleet: key};
        state.agents.push(agent);
        agentLoop(agent);
      }
    }
  }

  // The registry wraps each record with its id and whether it is running.
  function fromRegistry(entry) {
    const d = Object.assign({}, entry.record || {}, {id: entry.id});
    if (entry.active) d.verdict = 'running';
    return d;
  }

  async function agentLoop(agent) {
    const source = partSource(agent, '/v1/deploys');
    for (;;) {
      if (partGone(agent, state.agents)) return;
      try {
        const body = agent.registry
          ? await getJson(`/v1/deploys?limit=${MAX_DEPLOYS}`, {registry: true})
          : await getJson(source.url, {registry: source.registry});
        agent.deploys = agent.registry ? (body.deploys || []).map(fromRegistry) : body.deploys || [];
        agent.error = null;
        agent.at = Date.now();
      } catch (e) {
        agent.error = fetchError(e);
      }
      scheduleRender();
      await sleep(AGENT_POLL_MS);
    }
  }

  async function loadConfig() {
    for (let backoff = BACKOFF_MIN_MS;; backoff = Math.min(backoff * 2, BACKOFF_MAX_MS)) {
      try {
        return await getJson('config.json', {registry: true});
      } catch (e) {
        if (e instanceof AuthError) {
          await needToken();
          continue;
        }
        await sleep(jitter(backoff));
      }
    }
  }

  // ---- rendering ---------------------------------------------------------------------------------

  let renderQueued = false;
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      render();
    });
  }

  function render() {
    const now = Date.now();
    for (const [key, g] of state.gone) if (now - g.at > GONE_KEEP_MS) state.gone.delete(key);
    $('revision').textContent = state.revision || '–';
    const services = new Set([...state.instances.values()].map((i) => i.service));
    $('service-count').textContent = services.size;
    $('instance-count').textContent = state.instances.size;
    $('last-event').textContent = state.lastEventAt ? `${seconds(now - state.lastEventAt)} ago` : '–';
    renderServices();
    renderGateways();
    renderAgents();
    renderEvents();
  }

  function leaseCells(key, inst) {
    const lease = state.leases.get(key);
    if (!lease || lease.generation !== inst.generation) {
      return [el('td', {class: 'num muted', text: '–'}), el('td', {class: 'num muted', text: '–'})];
    }
    const left = Math.max(0, lease.remaining_ms - (performance.now() - lease.at));
    const since = Math.max(0, inst.ttl_ms - left);
    const low = left < inst.ttl_ms / 3;
    return [
      el('td', {class: 'num', text: `${seconds(since)} ago`,
                title: 'Time since the lease was last renewed (heartbeat, register or state change)'}),
      el('td', {class: `num ${low ? 'warn' : ''}`},
         meter(left / Math.max(1, inst.ttl_ms), low ? 'warn' : 'ok'), ` ${seconds(left)}`),
    ];
  }

  function meter(fraction, kind) {
    const f = Math.max(0, Math.min(1, fraction));
    const box = svg('svg', {class: 'meter', width: 44, height: 8, viewBox: '0 0 44 8'});
    box.append(svg('rect', {x: 0, y: 0, width: 44, height: 8, rx: 2, class: 'meter-bg'}));
    box.append(svg('rect', {x: 0, y: 0, width: (44 * f).toFixed(1), height: 8, rx: 2,
                            class: `meter-fill meter-${kind}`}));
    return box;
  }

  function labelChips(labels) {
    const chips = [];
    for (const [k, v] of Object.entries(labels || {}).sort()) {
      if (k === 'version') continue;
      chips.push(el('span', {class: 'chip', text: `${k}=${v}`}));
    }
    return chips;
  }

  function instanceRow(key, inst, gone) {
    const version = inst.version || (inst.labels || {}).version || '';
    const row = el('tr', {class: gone ? 'gone' : '', dataset: {instance: key}},
      el('td', {class: 'id', text: inst.id}),
      el('td', {class: 'state'}, gone ? badge(`REMOVED (${gone.reason})`, 'muted') : stateBadge(inst.state)),
      el('td', {class: 'accepting'}, inst.accepting ? badge('yes', 'ok') : badge('no', 'warn')),
      el('td', {class: 'num', text: inst.generation}),
      el('td', {class: 'mono', text: inst.address}),
      el('td', {class: 'version', text: version || '–'}),
      el('td', {text: inst.zone || '–'}),
      el('td', {class: 'num', text: inst.weight}),
      ...(gone ? [el('td', {class: 'num muted', text: '–'}), el('td', {class: 'num muted', text: '–'})]
               : leaseCells(key, inst)),
      el('td', {class: 'num muted', text: inst.mod_revision}),
      el('td', {class: 'labels'}, ...labelChips(inst.labels)));
    return row;
  }

  function renderServices() {
    const byService = new Map();
    const add = (key, inst, gone) => {
      if (!byService.has(inst.service)) byService.set(inst.service, []);
      byService.get(inst.service).push({key, inst, gone});
    };
    for (const [key, inst] of state.instances) add(key, inst, null);
    for (const [key, g] of state.gone) add(key, g.instance, g);
    // Empty means "none registered" only once the registry has said so: before that the page is
    // still loading, or waiting for a token.
    $('services-empty').hidden = byService.size > 0;
    $('services-empty').textContent = state.synced ? 'No instances registered yet.'
      : state.tokenNeeded ? 'Enter a token to see the instances.' : 'Loading the instances…';
    const cards = [];
    for (const name of [...byService.keys()].sort()) {
      const rows = byService.get(name).sort((a, b) => a.inst.id.localeCompare(b.inst.id));
      const live = rows.filter((r) => !r.gone);
      const ready = live.filter((r) => r.inst.state === 'READY').length;
      const header = el('div', {class: 'card-head'},
        el('h3', {text: name}),
        el('span', {class: 'muted', text: `${live.length} instance(s), ${ready} READY`}),
        state.degraded.get(name) ? badge('self-preservation: expiry frozen', 'bad') : null);
      cards.push(el('div', {class: 'card', dataset: {service: name}}, header,
        table(['Instance', 'State', 'Accepting', 'Gen', 'Address', 'Version', 'Zone', 'Weight',
               'Heartbeat', 'Lease left', 'Rev', 'Labels'],
              rows.map((r) => instanceRow(r.key, r.inst, r.gone)))));
    }
    $('services').replaceChildren(...cards);
  }

  function shareChart(samples, ids) {
    const W = 360, H = 90, pad = 2;
    const box = svg('svg', {class: 'chart', width: W, height: H, viewBox: `0 0 ${W} ${H}`,
                            role: 'img'});
    box.append(svg('rect', {x: 0, y: 0, width: W, height: H, class: 'chart-bg'}));
    for (const f of [0.25, 0.5, 0.75]) {
      box.append(svg('line', {x1: 0, x2: W, y1: (H * f).toFixed(1), y2: (H * f).toFixed(1),
                              class: 'chart-grid'}));
    }
    const slot = W / CHART_SAMPLES;
    const recent = samples.slice(1).slice(-CHART_SAMPLES);
    const offset = CHART_SAMPLES - recent.length;
    recent.forEach((s, i) => {
      const x = (offset + i) * slot;
      if (!s.total) {
        box.append(svg('rect', {x: x.toFixed(1), y: H - 2, width: Math.max(1, slot - 1).toFixed(1),
                                height: 2, class: 'chart-idle'}));
        return;
      }
      let y = H;
      for (const id of ids) {
        const d = s.deltas[id] || 0;
        if (!d) continue;
        const h = (H - pad) * d / s.total;
        y -= h;
        box.append(svg('rect', {x: x.toFixed(1), y: y.toFixed(1),
                                width: Math.max(1, slot - 1).toFixed(1), height: h.toFixed(1),
                                fill: colorOf(id)}));
      }
    });
    const title = svg('title', {});
    title.textContent = 'Share of new connections per poll interval, last minute (newest right)';
    box.append(title);
    return box;
  }

  function upstreamCard(gw, u) {
    const view = u.view;
    const samples = gw.history.get(u.key) || [];
    const recent = samples.slice(1).slice(-SHARE_WINDOW);
    const totals = {};
    let total = 0;
    let span = 0;
    for (const s of recent) {
      span += s.interval;
      for (const [id, d] of Object.entries(s.deltas)) {
        totals[id] = (totals[id] || 0) + d;
        total += d;
      }
    }
    const last = samples[samples.length - 1];
    const ids = (view.instances || []).map((i) => i.id);
    const what = u.counter === 'requests' ? 'requests' : 'connections';
    const rows = (view.instances || []).map((inst) => {
      const ramp = inst.weight > 0 ? inst.effective_weight / inst.weight : 0;
      const ramping = inst.routable && ramp < 0.999;
      const rate = last && last.interval > 0 && inst.id in last.deltas
        ? (last.deltas[inst.id] * 1000 / last.interval) : null;
      const share = total > 0 ? (totals[inst.id] || 0) / total : null;
      let health = badge('healthy', 'ok');
      if (inst.ejected) health = badge('ejected', 'bad');
      else if (!inst.healthy) health = badge('unhealthy', 'bad');
      return el('tr', {dataset: {instance: inst.id}},
        el('td', {class: 'id'}, el('span', {class: 'swatch', 'aria-hidden': 'true'},
                                   swatch(colorOf(inst.id))), inst.id),
        el('td', {class: 'state'}, stateBadge(inst.state)),
        el('td', {}, inst.routable ? badge('yes', 'ok') : badge('no', 'muted')),
        el('td', {}, health),
        el('td', {class: 'num weight',
                  title: inst.ready_for_seconds === null ? 'READY before the gateway saw it'
                                                         : `READY for ${seconds(inst.ready_for_seconds * 1000)}`},
           meter(ramp, ramping ? 'warn' : 'ok'),
           ` ${inst.effective_weight.toFixed(2)} / ${inst.weight}`,
           ramping ? el('span', {class: 'ramp', text: ` slow start ${Math.round(ramp * 100)}%`}) : null),
        el('td', {class: 'num active', text: inst.active}),
        el('td', {class: 'num', text: rate === null ? '–' : rate.toFixed(1)}),
        el('td', {class: 'num share', text: share === null ? '–' : `${(share * 100).toFixed(0)}%`}),
        el('td', {class: 'num muted', text: inst[u.counter]}));
    });
    const l = u.listener;
    const title = l.protocol === 'http'
      ? `${l.name} :${l.port} ${view.prefix} → ${view.service}`
      : `${l.name} :${l.port} → ${view.service}`;
    const age = view.discovery_age_seconds;
    const facts = el('div', {class: 'facts'},
      el('span', {class: 'fact'}, 'table version ', el('strong', {class: 'table-version', text: view.version})),
      el('span', {class: 'fact', text: `${view.policy}${view.policy === 'p2c' && view.slow_start_seconds
        ? `, slow start ${seconds(view.slow_start_seconds * 1000)}` : ''}`}),
      el('span', {class: 'fact', text: view.discovered
        ? `registry heard ${age === null ? '–' : seconds(age * 1000)} ago` : 'waiting for the registry'}));
    return el('div', {class: 'upstream', dataset: {upstream: u.key}},
      el('div', {class: 'card-head'}, el('h4', {text: title}), facts),
      el('div', {class: 'upstream-body'},
        table(['Instance', 'State', 'Routable', 'Health', 'Weight (effective / set)', 'Active',
               `New ${what}/s`, `Share (${Math.round(span / 1000) || 0} s)`, 'Total'], rows),
        el('figure', {class: 'chart-box'}, shareChart(samples, ids),
           el('figcaption', {},
              el('span', {text: '1 min ago'}),
              el('span', {text: `share of new ${what} per second`}),
              el('span', {text: 'now'})))));
  }

  function swatch(color) {
    const box = svg('svg', {width: 10, height: 10, viewBox: '0 0 10 10'});
    box.append(svg('rect', {x: 0, y: 0, width: 10, height: 10, rx: 2, fill: color}));
    return box;
  }

  function renderGateways() {
    $('gateways-panel').hidden = state.gateways.length === 0;
    const cards = state.gateways.map((gw) => {
      const status = gw.error
        ? badge(gw.error, 'bad')
        : gw.at ? badge(`polled ${clock(gw.at)}`, 'ok') : badge('polling', 'muted');
      const title = gw.fleet ? `${gw.fleet.split('/')[1]} (${gw.url})` : gw.url;
      const head = el('div', {class: 'card-head'}, el('h3', {class: 'mono', text: title}), status);
      const body = gw.snapshot
        ? upstreamsOf(gw.snapshot).map((u) => upstreamCard(gw, u))
        : [el('p', {class: 'empty', text: 'Waiting for the gateway.'})];
      return el('div', {class: `card ${gw.error ? 'stale' : ''}`,
                        dataset: {gateway: gw.fleet || gw.url}}, head, ...body);
    });
    $('gateways').replaceChildren(...cards);
  }

  function deployRow(agent, d) {
    const verdict = d.verdict || 'running';
    const kind = {pass: 'ok', fail: 'bad', running: 'warn'}[verdict] || 'muted';
    const id = d.id || '';
    const open = state.openDeploys.has(`${agent.url} ${id}`);
    const timeline = el('details', {open},
      el('summary', {text: d.reason || (verdict === 'running' ? 'in progress' : '–')}),
      el('ol', {class: 'timeline'}, ...(d.timeline || []).map((t) =>
        el('li', {}, el('span', {class: 'muted mono', text: `+${Number(t.after_s || 0).toFixed(1)} s `}),
           t.what || ''))));
    timeline.addEventListener('toggle', () => {
      const k = `${agent.url} ${id}`;
      if (timeline.open) state.openDeploys.add(k); else state.openDeploys.delete(k);
    });
    const finished = d.finished_at_ms;
    return el('tr', {dataset: {deploy: id}},
      el('td', {class: 'id', text: d.service || '–', title: id}),
      el('td', {class: 'version', text: d.version || '–'}),
      el('td', {class: 'verdict'}, badge(verdict.toUpperCase(), kind)),
      el('td', {class: 'reason'}, timeline),
      el('td', {class: 'num', text: clock(d.started_at_ms)}),
      el('td', {class: 'num', text: typeof d.decided_after_s === 'number' ? seconds(d.decided_after_s * 1000) : '–'}),
      el('td', {class: 'num', text: finished ? clock(finished) : '–'}),
      el('td', {class: 'num', text: typeof d.rollback_s === 'number' && d.rollback_s > 0
        ? seconds(d.rollback_s * 1000) : '–'}),
      el('td', {class: 'labels'}, ...(d.left_running || []).map((i) => badge(`left running: ${i}`, 'bad'))));
  }

  function renderAgents() {
    $('agents-panel').hidden = state.agents.length === 0;
    const cards = state.agents.map((agent) => {
      const status = agent.error
        ? badge(agent.error, 'bad')
        : agent.at ? badge(`polled ${clock(agent.at)}`, 'ok') : badge('polling', 'muted');
      const title = agent.registry ? 'registry: the fleet\'s deploys'
        : agent.fleet ? `agent ${agent.fleet.split('/')[1]} (${agent.url})` : `agent ${agent.url}`;
      const head = el('div', {class: 'card-head'}, el('h3', {class: 'mono', text: title}), status);
      const deploys = (agent.deploys || []).slice(0, MAX_DEPLOYS);
      const body = deploys.length
        ? table(['Service', 'Version', 'Verdict', 'Reason (click for the timeline)', 'Started',
                 'Decided after', 'Finished', 'Rollback', ''],
                deploys.map((d) => deployRow(agent, d)))
        : el('p', {class: 'empty', text: agent.deploys ? 'No deploys yet.' : 'Waiting for an answer.'});
      return el('div', {class: `card ${agent.error ? 'stale' : ''}`,
                        dataset: {agent: agent.registry ? 'registry' : agent.fleet || agent.url}}, head, body);
    });
    $('agents').replaceChildren(...cards);
  }

  function renderEvents() {
    $('events').replaceChildren(...state.events.map((e) =>
      el('li', {class: `event event-${e.kind}`},
         el('span', {class: 'muted mono', text: clock(e.at)}), ' ', e.text)));
  }

  // ---- start -----------------------------------------------------------------------------------

  async function main() {
    setupToken();
    render();
    setInterval(scheduleRender, 1000);  // ages and lease countdowns move between events
    watchLoop();
    leaseLoop();
    const config = await loadConfig();
    state.gateways = (config.gateways || []).map((url) => ({url, history: new Map()}));
    state.agents = [{url: '', registry: true}, ...(config.agents || []).map((url) => ({url}))];
    state.gateways.forEach(gatewayLoop);
    state.agents.forEach(agentLoop);
    discoverFleet();
    setInterval(discoverFleet, 1000);
    const polled = ['gateways every second', 'deploys every two seconds'];
    if (polled.length) $('footer').textContent += ` Polling ${polled.join(' and ')}.`;
    scheduleRender();
  }

  main();
})();
