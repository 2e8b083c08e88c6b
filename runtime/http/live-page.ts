// The live view's page, served at `/` by the API (routes.ts): one self-contained HTML document,
// inline style and script, no build step and nothing from a CDN. It reads one Server-Sent Events
// stream (/live/stream) through fetch, so it can send the API's bearer token, and draws: jobs by
// state, queue and DLQ depth, the workers and their leases (owner, attempt, a countdown to
// expiry), progress, the event feed and, in the local stack, the fault controls.
//
// Everything shown is set with textContent, never innerHTML: event details carry job error
// messages, which are user data. String.raw keeps the script's backslashes as written; the
// script avoids backticks and dollar-brace so this template literal stays a plain string.

export const LIVE_PAGE_HTML = String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Jobs — live</title>
<style>
  :root {
    --bg: #f4f5f7; --card: #fff; --ink: #1d2330; --muted: #6b7385; --line: #e3e6ec;
    --pending: #8a6d00; --pending-bg: #fff4c2; --running: #0b5cad; --running-bg: #dcebff;
    --succeeded: #17733b; --succeeded-bg: #d9f5e3; --dead: #b42318; --dead-bg: #fde3e0;
    --cancelled: #5b6270; --cancelled-bg: #e9ebef; --fault: #8a1c7c; --fault-bg: #f9e1f5;
  }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); background: var(--bg); }
  header { display: flex; align-items: center; gap: 16px; padding: 12px 20px; background: #1d2330; color: #fff; }
  header h1 { margin: 0; font-size: 18px; font-weight: 600; }
  header .sub { color: #aab2c3; font-size: 13px; }
  header .right { margin-left: auto; display: flex; gap: 14px; align-items: center; font-size: 13px; }
  .dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; background: #888; vertical-align: 0; }
  .dot.ok { background: #3ccf6e; } .dot.warn { background: #f5b82e; } .dot.bad { background: #f04438; }
  main { padding: 16px 20px 30px; display: grid; gap: 14px; grid-template-columns: minmax(0, 1.75fr) minmax(0, 1fr); }
  .tiles { grid-column: 1 / -1; display: grid; grid-template-columns: repeat(7, minmax(0, 1fr)); gap: 10px; }
  .tile { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
  .tile .n { font-size: 28px; font-weight: 650; font-variant-numeric: tabular-nums; }
  .tile .l { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
  .tile .x { color: var(--muted); font-size: 12px; }
  .tile.pending .n { color: var(--pending); } .tile.running .n { color: var(--running); } .tile.succeeded .n { color: var(--succeeded); }
  .tile.dead .n { color: var(--dead); } .tile.cancelled .n { color: var(--cancelled); }
  .tile.alarm { border-color: var(--dead); background: var(--dead-bg); }
  section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; min-width: 0; overflow: hidden; }
  section h2 { margin: 0 0 8px; font-size: 13px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); display: flex; align-items: center; gap: 10px; }
  section h2 .aside { margin-left: auto; text-transform: none; letter-spacing: 0; font-weight: 400; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th { text-align: left; font-weight: 500; color: var(--muted); font-size: 12px; padding: 3px 6px; border-bottom: 1px solid var(--line); }
  td { padding: 4px 6px; border-bottom: 1px solid #f0f1f4; vertical-align: middle; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 240px; }
  /* The free-text column takes what is left and ellipsizes, instead of widening the page. */
  td.fill { max-width: 1px; width: 100%; }
  .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
  .muted { color: var(--muted); }
  .bar { position: relative; height: 8px; width: 110px; background: #edf0f4; border-radius: 4px; overflow: hidden; display: inline-block; vertical-align: middle; }
  .bar > i { position: absolute; left: 0; top: 0; bottom: 0; background: var(--running); border-radius: 4px; }
  .bar.lease > i { background: #3ccf6e; } .bar.lease.low > i { background: #f5b82e; } .bar.lease.gone > i { background: var(--dead); }
  .countdown { display: inline-block; min-width: 92px; margin-left: 6px; }
  .countdown.gone { color: var(--dead); font-weight: 600; }
  .chip { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; line-height: 18px; }
  .chip.pending { color: var(--pending); background: var(--pending-bg); } .chip.running { color: var(--running); background: var(--running-bg); }
  .chip.succeeded { color: var(--succeeded); background: var(--succeeded-bg); } .chip.dead { color: var(--dead); background: var(--dead-bg); }
  .chip.cancelled { color: var(--cancelled); background: var(--cancelled-bg); }
  .chip.alive { color: var(--succeeded); background: var(--succeeded-bg); } .chip.silent { color: var(--dead); background: var(--dead-bg); }
  .chip.down, .chip.exited { color: var(--cancelled); background: var(--cancelled-bg); } .chip.paused { color: var(--pending); background: var(--pending-bg); }
  #feed { list-style: none; margin: 0; padding: 0; max-height: 430px; overflow-y: auto; font-size: 13px; }
  #feed li { display: grid; grid-template-columns: 84px 150px 130px minmax(0, 1fr); gap: 8px; padding: 3px 4px; border-bottom: 1px solid #f0f1f4; align-items: baseline; }
  #feed li .k { font-weight: 600; }
  #feed li .d { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: var(--muted); }
  #feed li.new { animation: flash 1.2s ease-out; }
  @keyframes flash { from { background: #fff6c8; } to { background: transparent; } }
  .k-claimed { color: var(--running); } .k-reclaimed { color: #6941c6; } .k-lease-renewed { color: #98a0b0; font-weight: 400 !important; }
  .k-lease-lost { color: #c4320a; } .k-duplicate-ignored { color: #b54708; } .k-succeeded { color: var(--succeeded); }
  .k-retried { color: #b54708; } .k-dead-lettered, .k-poison-dead-lettered { color: var(--dead); } .k-released { color: #0e7490; }
  .k-worker-up, .k-worker-down { color: var(--muted); }
  #feed li.fault { background: var(--fault-bg); } #feed li.fault .k { color: var(--fault); }
  .controls { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
  button { font: inherit; font-size: 13px; padding: 6px 10px; border-radius: 6px; border: 1px solid #c9ced8; background: #fff; color: var(--ink); cursor: pointer; text-align: left; }
  button:hover { background: #f3f5f9; } button:disabled { opacity: .5; cursor: default; }
  button.danger { border-color: #f0b4ae; color: var(--dead); } button.small { padding: 1px 7px; font-size: 12px; }
  button .hint { display: block; font-size: 11.5px; color: var(--muted); }
  #fault-log { margin-top: 10px; font-size: 12.5px; max-height: 120px; overflow-y: auto; }
  #fault-log div { padding: 2px 0; border-bottom: 1px dashed var(--line); }
  .empty { color: var(--muted); padding: 8px 6px; }
  #token-box { display: none; gap: 6px; align-items: center; }
  #token-box input { font: inherit; padding: 3px 6px; border-radius: 4px; border: 0; width: 220px; }
  label.toggle { font-size: 12px; color: var(--muted); cursor: pointer; user-select: none; }
  .stack { display: grid; gap: 14px; align-content: start; min-width: 0; }
</style>
</head>
<body>
<header>
  <h1>ERP jobs — live</h1>
  <span class="sub">PostgreSQL decides, SQS delivers</span>
  <div class="right">
    <span id="token-box"><span>API token</span><input id="token" type="password" placeholder="Bearer token" autocomplete="off"><button id="token-save" class="small">Connect</button></span>
    <span><span id="stream-dot" class="dot"></span><span id="stream-status">connecting…</span></span>
    <span><span id="bus-dot" class="dot"></span><span id="bus-status">event bus</span></span>
    <span id="clock" class="mono"></span>
  </div>
</header>
<main>
  <div class="tiles">
    <div class="tile pending"><div class="l">pending</div><div class="n" id="n-pending">–</div></div>
    <div class="tile running"><div class="l">running</div><div class="n" id="n-running">–</div></div>
    <div class="tile succeeded"><div class="l">succeeded</div><div class="n" id="n-succeeded">–</div></div>
    <div class="tile dead"><div class="l">dead</div><div class="n" id="n-dead">–</div></div>
    <div class="tile cancelled"><div class="l">cancelled</div><div class="n" id="n-cancelled">–</div></div>
    <div class="tile" id="queue-tile"><div class="l">job queue</div><div class="n" id="n-queue">–</div><div class="x" id="x-queue"></div></div>
    <div class="tile" id="dlq-tile"><div class="l">dead-letter queue</div><div class="n" id="n-dlq">–</div><div class="x" id="x-dlq"></div></div>
  </div>
  <div class="stack">
    <section>
      <h2>Leases <span class="aside muted" id="lease-aside"></span></h2>
      <table>
        <thead><tr><th>job</th><th>type</th><th>owner</th><th>attempt</th><th>lease expires in</th><th>progress</th></tr></thead>
        <tbody id="leases"></tbody>
      </table>
      <div class="empty" id="leases-empty">No job is running.</div>
    </section>
    <section>
      <h2>Events <span class="aside"><label class="toggle"><input type="checkbox" id="show-renewals" checked> lease renewals</label></span></h2>
      <ul id="feed"></ul>
      <div class="empty" id="feed-empty">No events yet.</div>
    </section>
  </div>
  <div class="stack">
    <section>
      <h2>Workers</h2>
      <table>
        <thead><tr><th>worker</th><th>status</th><th>leases</th><th>last seen</th><th id="worker-actions-h"></th></tr></thead>
        <tbody id="workers"></tbody>
      </table>
      <div class="empty" id="workers-empty">No worker has reported yet.</div>
    </section>
    <section id="faults" hidden>
      <h2>Inject a fault <span class="aside muted">local stack only</span></h2>
      <div class="controls">
        <button data-fault="enqueue" data-body='{"count":6}'>Enqueue work<span class="hint">6 jobs, a few seconds each</span></button>
        <button data-fault="duplicate">Send a duplicate<span class="hint">a running job's message, twice</span></button>
        <button data-fault="kill" class="danger">kill -9 a worker<span class="hint">the busiest; restarted after 2 s</span></button>
        <button data-fault="pause" class="danger">Pause a worker &gt; lease<span class="hint">SIGSTOP, then SIGCONT: a zombie</span></button>
        <button data-fault="rollback">Enqueue, then roll back<span class="hint">must never be published or run</span></button>
        <button data-fault="publisher-killed">Kill publisher after COMMIT<span class="hint">the outbox relay publishes it</span></button>
        <button data-fault="db-connections-dropped">Drop a worker's DB connections<span class="hint">pg_terminate_backend</span></button>
        <button data-fault="db-failover">Database failover, 20 s<span class="hint">every connection reset, new ones refused</span></button>
        <button data-fault="queue-purged">Purge the job queue<span class="hint">the reconciler publishes again</span></button>
      </div>
      <div id="fault-log"></div>
    </section>
    <section>
      <h2>Recent jobs</h2>
      <table>
        <thead><tr><th>job</th><th>type</th><th>state</th><th>attempt</th><th>last error</th></tr></thead>
        <tbody id="recent"></tbody>
      </table>
    </section>
  </div>
</main>
<script>
(function () {
  'use strict';
  var $ = function (id) { return document.getElementById(id); };
  var token = sessionStorage.getItem('jobs-live-token') || '';
  var snap = null, snapAt = 0, lastSeq = 0, epoch = '', faultsOn = false, procs = {};
  var MAX_FEED = 250;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function td(text, cls) { return el('td', cls, text); }
  // The tail of the id: UUIDv7 ids share their leading (time) digits.
  function short(id) { return id ? String(id).slice(-8) : ''; }
  function secs(ms) { return (ms / 1000).toFixed(1) + ' s'; }
  function ago(ms) { return ms === null || ms === undefined ? '–' : ms < 1500 ? 'just now' : Math.round(ms / 1000) + ' s ago'; }
  function headers(extra) {
    var h = extra || {};
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }
  function setStatus(dotId, textId, cls, text) { $(dotId).className = 'dot ' + cls; $(textId).textContent = text; }

  // ---------------------------------------------------------------- stream
  function connect() {
    setStatus('stream-dot', 'stream-status', 'warn', 'connecting…');
    fetch('/live/stream?after=' + lastSeq + '&epoch=' + encodeURIComponent(epoch), { headers: headers(), cache: 'no-store' }).then(function (res) {
      if (res.status === 401) {
        setStatus('stream-dot', 'stream-status', 'bad', 'token required');
        $('token-box').style.display = 'flex';
        return;
      }
      if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
      setStatus('stream-dot', 'stream-status', 'ok', 'live');
      var reader = res.body.getReader(), dec = new TextDecoder(), buf = '';
      function pump() {
        return reader.read().then(function (r) {
          if (r.done) throw new Error('stream ended');
          buf += dec.decode(r.value, { stream: true });
          var i;
          while ((i = buf.indexOf('\n\n')) >= 0) { block(buf.slice(0, i)); buf = buf.slice(i + 2); }
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      setStatus('stream-dot', 'stream-status', 'bad', 'reconnecting…');
      setTimeout(connect, 1500);
    });
  }
  function block(text) {
    var ev = 'message', data = '';
    text.split('\n').forEach(function (line) {
      if (line.indexOf('event:') === 0) ev = line.slice(6).trim();
      else if (line.indexOf('data:') === 0) data += line.slice(5).trim();
    });
    if (!data) return;
    var v;
    try { v = JSON.parse(data); } catch (e) { return; }
    if (ev === 'hello') { if (v.epoch !== epoch) { epoch = v.epoch || ''; lastSeq = 0; } }
    else if (ev === 'state') { snap = v; snapAt = performance.now(); renderState(); }
    else if (ev === 'events') addEvents(v);
    else if (ev === 'state-error') setStatus('stream-dot', 'stream-status', 'warn', v.message || 'database unavailable');
  }

  // ---------------------------------------------------------------- state
  function renderState() {
    var s = snap;
    ['pending', 'running', 'succeeded', 'dead', 'cancelled'].forEach(function (k) { $('n-' + k).textContent = s.jobs[k]; });
    depth('queue', s.queue, false);
    depth('dlq', s.dlq, true);
    if (!s.events.enabled) setStatus('bus-dot', 'bus-status', 'warn', 'events off (JOBS_EVENTS)');
    else if (!s.events.connected) setStatus('bus-dot', 'bus-status', 'bad', 'event bus reconnecting');
    else setStatus('bus-dot', 'bus-status', 'ok', 'event bus');
    $('lease-aside').textContent = 'lease ' + s.timings.leaseSeconds + ' s · heartbeat ' + s.timings.heartbeatSeconds + ' s';
    renderLeases();
    renderWorkers();
    renderRecent();
  }
  function depth(name, d, alarm) {
    var n = $('n-' + name), x = $('x-' + name), tile = $(name + '-tile');
    if (!d || d.visible === null) {
      n.textContent = 'n/a';
      x.textContent = d && d.unavailable ? d.unavailable : 'not configured';
      tile.classList.remove('alarm');
      return;
    }
    n.textContent = d.visible;
    x.textContent = alarm ? (d.visible > 0 ? 'on-call is paged' : 'empty') : d.inFlight + ' in flight · ' + d.delayed + ' delayed';
    tile.classList.toggle('alarm', alarm && d.visible > 0);
  }
  function renderLeases() {
    var body = $('leases'), s = snap;
    body.textContent = '';
    $('leases-empty').style.display = s.leases.length ? 'none' : '';
    var elapsed = performance.now() - snapAt;
    s.leases.forEach(function (l) {
      var tr = el('tr');
      tr.dataset.job = l.id;
      tr.appendChild(td(short(l.id), 'mono'));
      tr.appendChild(td(l.type));
      tr.appendChild(td(l.owner, 'mono'));
      tr.appendChild(td(l.attempt + ' / ' + l.maxAttempts));
      var c = td(''), bar = el('span', 'bar lease'), fill = el('i'), txt = el('span', 'countdown');
      bar.appendChild(fill); c.appendChild(bar); c.appendChild(txt);
      tr.appendChild(c);
      tr._lease = { left: l.leaseLeftMs, fill: fill, bar: bar, txt: txt };
      var p = td(''), pb = el('span', 'bar'), pf = el('i');
      pf.style.width = Math.round(100 * (l.progress ? l.progress.fraction : 0)) + '%';
      pb.appendChild(pf); p.appendChild(pb);
      p.appendChild(el('span', 'muted', ' ' + (l.progress && l.progress.message ? l.progress.message : '')));
      p.title = l.progress && l.progress.message ? l.progress.message : '';
      p.className = 'fill';
      tr.appendChild(p);
      body.appendChild(tr);
    });
    tickCountdowns(elapsed);
  }
  function tickCountdowns(elapsed) {
    if (!snap) return;
    var lease = snap.timings.leaseSeconds * 1000, hb = snap.timings.heartbeatSeconds * 1000;
    var rows = $('leases').children;
    for (var i = 0; i < rows.length; i++) {
      var L = rows[i]._lease;
      if (!L) continue;
      var left = L.left - elapsed;
      L.fill.style.width = Math.max(0, Math.min(100, 100 * left / lease)) + '%';
      L.bar.className = 'bar lease' + (left <= 0 ? ' gone' : left < hb ? ' low' : '');
      L.txt.className = 'countdown' + (left <= 0 ? ' gone' : '');
      L.txt.textContent = left > 0 ? secs(left) : 'expired ' + secs(-left) + ' ago';
    }
  }
  function renderWorkers() {
    var body = $('workers'), list = snap.workers.slice(), seen = {};
    list.forEach(function (w) { seen[w.id] = true; });
    Object.keys(procs).forEach(function (id) { if (!seen[id]) list.push({ id: id, status: 'down', leases: 0, lastSeenMsAgo: null }); });
    list.sort(function (a, b) { return a.id.localeCompare(b.id, 'en', { numeric: true }); });
    body.textContent = '';
    $('workers-empty').style.display = list.length ? 'none' : '';
    $('worker-actions-h').textContent = faultsOn ? 'fault' : '';
    list.forEach(function (w) {
      var p = procs[w.id], status = p && p.state !== 'running' ? p.state : w.status;
      var tr = el('tr');
      tr.appendChild(td(w.id, 'mono'));
      var st = td(''); st.appendChild(el('span', 'chip ' + status, status)); tr.appendChild(st);
      tr.appendChild(td(w.leases));
      tr.appendChild(td(ago(w.lastSeenMsAgo), 'muted'));
      var act = td('');
      if (faultsOn && p && p.state === 'running') {
        act.appendChild(faultButton('kill -9', 'kill', { workerId: w.id }));
        act.appendChild(document.createTextNode(' '));
        act.appendChild(faultButton('pause', 'pause', { workerId: w.id }));
      }
      tr.appendChild(act);
      body.appendChild(tr);
    });
  }
  function renderRecent() {
    var body = $('recent');
    body.textContent = '';
    snap.recent.slice(0, 10).forEach(function (j) {
      var tr = el('tr');
      tr.appendChild(td(short(j.id), 'mono'));
      tr.appendChild(td(j.type));
      var st = td(''); st.appendChild(el('span', 'chip ' + j.state, j.state)); tr.appendChild(st);
      tr.appendChild(td(j.attempt + ' / ' + j.maxAttempts));
      var e = td(j.error || '', 'muted fill'); e.title = j.error || ''; tr.appendChild(e);
      body.appendChild(tr);
    });
  }

  // ---------------------------------------------------------------- events
  var LABELS = { 'lease-renewed': 'lease renewed', 'lease-lost': 'lease lost', 'duplicate-ignored': 'duplicate ignored',
    'dead-lettered': 'dead-lettered', 'poison-dead-lettered': 'poison → DLQ', 'worker-up': 'worker up', 'worker-down': 'worker down' };
  // One heartbeat renews every lease a worker holds at once: show it as one line per worker.
  function groupRenewals(list) {
    var out = [], byWorker = {};
    list.forEach(function (e) {
      if (e.kind !== 'lease-renewed') { out.push(e); return; }
      var g = byWorker[e.workerId];
      if (!g) { g = byWorker[e.workerId] = { kind: e.kind, workerId: e.workerId, at: e.at, seq: e.seq, jobs: [] }; out.push(g); }
      g.jobs.push(short(e.jobId) + (e.attempt ? '#' + e.attempt : ''));
      g.seq = Math.max(g.seq, e.seq);
      g.at = e.at;
    });
    out.forEach(function (g) {
      if (g.jobs) g.detail = g.jobs.length + ' lease' + (g.jobs.length === 1 ? '' : 's') + ': ' + g.jobs.join(', ');
    });
    return out;
  }
  function addEvents(list) {
    var feed = $('feed'), showRenewals = $('show-renewals').checked;
    list = list.filter(function (e) { return e.seq > lastSeq; });
    if (!list.length) return;
    lastSeq = list[list.length - 1].seq;
    groupRenewals(list).forEach(function (e) {
      var fault = e.kind === 'fault';
      var li = el('li', 'new' + (fault ? ' fault' : ''));
      li.dataset.kind = e.kind;
      if (fault) li.dataset.fault = e.fault || '';
      if (e.jobId) li.dataset.job = e.jobId;
      if (e.kind === 'lease-renewed' && !showRenewals) li.hidden = true;
      var t = new Date(e.at);
      li.appendChild(el('span', 'mono muted', t.toLocaleTimeString([], { hour12: false }) + '.' + String(t.getMilliseconds()).padStart(3, '0').slice(0, 1)));
      li.appendChild(el('span', 'k k-' + e.kind, fault ? '⚡ ' + (e.fault || 'fault') : LABELS[e.kind] || e.kind));
      li.appendChild(el('span', 'mono', e.workerId === 'faults' ? '' : e.workerId));
      var d = [e.jobId ? short(e.jobId) : '', e.type || '', e.attempt ? 'attempt ' + e.attempt : '', e.detail || ''].filter(Boolean).join(' · ');
      var dd = el('span', 'd', d); dd.title = d; li.appendChild(dd);
      feed.insertBefore(li, feed.firstChild);
    });
    while (feed.children.length > MAX_FEED) feed.removeChild(feed.lastChild);
    $('feed-empty').style.display = feed.children.length ? 'none' : '';
  }
  $('show-renewals').addEventListener('change', function () {
    var on = this.checked, items = $('feed').children;
    for (var i = 0; i < items.length; i++) if (items[i].dataset.kind === 'lease-renewed') items[i].hidden = !on;
  });

  // ---------------------------------------------------------------- faults
  function faultButton(label, kind, body) {
    var b = el('button', 'small' + (kind === 'kill' || kind === 'pause' ? ' danger' : ''), label);
    b.addEventListener('click', function () { inject(kind, body, b); });
    return b;
  }
  function logFault(text) {
    var d = el('div', null, new Date().toLocaleTimeString([], { hour12: false }) + '  ' + text);
    $('fault-log').insertBefore(d, $('fault-log').firstChild);
  }
  function inject(kind, body, button) {
    if (button) button.disabled = true;
    fetch('/live/faults/' + kind, { method: 'POST', headers: headers({ 'content-type': 'application/json' }), body: JSON.stringify(body || {}) })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, j: j }; }); })
      .then(function (x) {
        if (!x.ok) { logFault(kind + ': ' + (x.j.error ? x.j.error.message : 'failed')); return; }
        var r = x.j.result || {};
        var what = r.jobId ? 'job ' + short(r.jobId) : r.jobIds ? r.jobIds.length + ' job(s)' : '';
        if (r.workerId) what = r.workerId + (r.jobs ? ' holding ' + r.jobs.length + ' job(s)' : '') + (r.terminated !== undefined ? ': ' + r.terminated + ' connection(s)' : '');
        logFault(kind + ' ✓ ' + what);
        refreshProcs();
      })
      .catch(function (e) { logFault(kind + ': ' + e.message); })
      .then(function () { if (button) button.disabled = false; });
  }
  function refreshProcs() {
    return fetch('/live/faults', { headers: headers(), cache: 'no-store' }).then(function (r) {
      if (r.status !== 200) { faultsOn = false; $('faults').hidden = true; return null; }
      return r.json().then(function (j) {
        faultsOn = true;
        $('faults').hidden = false;
        procs = {};
        j.workers.forEach(function (w) { procs[w.id] = w; });
        if (snap) renderWorkers();
        return j;
      });
    }).catch(function () { return null; });
  }
  Array.prototype.forEach.call(document.querySelectorAll('button[data-fault]'), function (b) {
    b.addEventListener('click', function () { inject(b.dataset.fault, b.dataset.body ? JSON.parse(b.dataset.body) : {}, b); });
  });

  $('token').value = token;
  $('token-save').addEventListener('click', function () {
    token = $('token').value.trim();
    sessionStorage.setItem('jobs-live-token', token);
    $('token-box').style.display = 'none';
    connect();
    refreshProcs();
  });

  setInterval(function () {
    if (snap) tickCountdowns(performance.now() - snapAt);
    $('clock').textContent = new Date().toLocaleTimeString([], { hour12: false });
  }, 100);
  setInterval(function () { if (faultsOn) refreshProcs(); }, 2000);
  refreshProcs();
  connect();
})();
</script>
</body>
</html>
`;
