// The live view's client script (live-page.ts inlines it in the page's <script>): reads the
// Server-Sent Events stream (/live/stream) through fetch, so it can send the API's bearer token,
// and draws the snapshot and the event feed; in the local stack it also drives the fault controls.
//
// Everything shown is set with textContent, never innerHTML: event details carry job error
// messages, which are user data. String.raw keeps the script's backslashes as written; the
// script avoids backticks and dollar-brace so this template literal stays a plain string.

export const LIVE_PAGE_SCRIPT = String.raw`
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
  // A cell too narrow for its text ellipsizes; the title keeps the whole of it readable on hover.
  function td(text, cls) {
    var c = el('td', cls, text);
    if (text !== undefined && text !== null && text !== '') c.title = String(text);
    return c;
  }
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
    if (s.timings.maxAttempts) $('fault-cap').textContent = s.timings.maxAttempts + ' attempts unless the job sets its own';
    renderLeases();
    renderWorkers();
    renderRecent();
    renderWaiting();
  }
  function laneCount(d) { return d.visible === null ? 'n/a' : d.visible; }
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
    // Priority lanes with queues of their own: the count is both lanes', each lane's own beside.
    if (d.byLane) x.textContent += ' · urgent ' + laneCount(d.byLane.urgent) + ', bulk ' + laneCount(d.byLane.bulk);
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
      tr.appendChild(attemptCell(l));
      var c = td('', 'lease'), bar = el('span', 'bar lease'), fill = el('i'), txt = el('span', 'countdown');
      bar.appendChild(fill); c.appendChild(bar); c.appendChild(txt);
      tr.appendChild(c);
      tr._lease = { left: l.leaseLeftMs, fill: fill, bar: bar, txt: txt };
      var p = td(''), pb = el('span', 'bar'), pf = el('i');
      pf.style.width = Math.round(100 * (l.progress ? l.progress.fraction : 0)) + '%';
      pb.appendChild(pf); p.appendChild(pb);
      p.appendChild(el('span', 'muted', ' ' + (l.progress && l.progress.message ? l.progress.message : '')));
      p.title = l.progress && l.progress.message ? l.progress.message : '';
      p.className = 'fill wrap';
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
      st.title = 'last seen ' + ago(w.lastSeenMsAgo);
      tr.appendChild(td(ago(w.lastSeenMsAgo), 'muted wide-only'));
      var act = td('', 'actions');
      if (faultsOn && p && p.state === 'running') {
        act.appendChild(faultButton('kill -9', 'kill', { workerId: w.id }));
        act.appendChild(document.createTextNode(' '));
        act.appendChild(faultButton('pause', 'pause', { workerId: w.id }));
      }
      tr.appendChild(act);
      body.appendChild(tr);
    });
  }
  // The attempt as the CLI reads it ("6 (1 of 3 used, 5 released)"), and on a final attempt the
  // warning that the next failure (a fault click included) dead-letters the job.
  function attemptCell(j) {
    var c = td(j.attemptText || j.attempt, 'attempt');
    if (j.capWarning) {
      c.appendChild(el('span', 'cap', j.capWarning));
      c.classList.add('at-cap');
    }
    c.title = (j.attemptText || '') + (j.capWarning ? ': ' + j.capWarning : '');
    return c;
  }
  function renderRecent() {
    var body = $('recent');
    body.textContent = '';
    snap.recent.slice(0, 10).forEach(function (j) {
      var tr = el('tr');
      tr.appendChild(td(short(j.id), 'mono'));
      tr.appendChild(td(j.type));
      var st = td(''); st.appendChild(el('span', 'chip ' + j.state, j.state)); tr.appendChild(st);
      tr.appendChild(attemptCell(j));
      // Why a dead job is dead is its state; an earlier attempt's error on any other job is history.
      var text = j.error || j.earlierError || (j.cancelledBy ? 'cancelled by ' + j.cancelledBy : '') || (j.waiting ? 'waiting ' + j.waiting : '') || (j.due ? 'due ' + j.due : '');
      var e = td(text, 'fill wrap' + (j.error ? ' error' : ' muted'));
      e.title = text;
      tr.appendChild(e);
      body.appendChild(tr);
    });
  }

  // Blocked jobs, by what they wait for: "key ledger:company-7 · 3 jobs · held by job 01a2…".
  function renderWaiting() {
    var body = $('waiting');
    body.textContent = '';
    var list = snap.waiting || [];
    $('waiting-empty').hidden = list.length > 0;
    list.forEach(function (w) {
      var tr = el('tr');
      tr.appendChild(td(w.waitsFor + ' (at most ' + w.limit + ')', 'mono'));
      tr.appendChild(td(String(w.jobs)));
      tr.appendChild(td(new Date(w.since).toLocaleTimeString()));
      tr.appendChild(td(w.heldBy.length ? 'job ' + w.heldBy.map(short).join(', ') : '—', 'mono fill'));
      body.appendChild(tr);
    });
  }

  // ---------------------------------------------------------------- events
  var LABELS = { 'lease-renewed': 'lease renewed', 'lease-lost': 'lease lost', 'duplicate-ignored': 'duplicate ignored',
    'dead-lettered': 'dead-lettered', 'poison-dead-lettered': 'poison → DLQ', 'worker-up': 'worker up', 'worker-down': 'worker down', cancelled: 'cancelled', scheduled: 'scheduled' };
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
      // Faults and cancels come from no worker: who asked for a cancel is in its detail.
      li.appendChild(el('span', 'mono', fault || e.kind === 'cancelled' ? '' : e.workerId));
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
`;
