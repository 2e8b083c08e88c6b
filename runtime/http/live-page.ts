// The live view's page, served at `/` by the API (live-routes.ts): one self-contained HTML
// document, inline style and script, no build step and nothing from a CDN. This file is the
// markup: the tiles (jobs by state, queue and DLQ depth), the leases (owner, attempt, a countdown
// to expiry, progress), the event feed, the workers and, in the local stack, the fault controls.
// The stylesheet is live-page-style.ts and the script that fills the page is live-page-script.ts.

import { LIVE_PAGE_SCRIPT } from './live-page-script.ts';
import { LIVE_PAGE_STYLE } from './live-page-style.ts';

export const LIVE_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Jobs — live</title>
<style>
${LIVE_PAGE_STYLE}</style>
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
    <section id="leases-section">
      <h2>Leases <span class="aside muted" id="lease-aside"></span></h2>
      <div class="scroll"><table class="stacked">
        <thead><tr><th>job</th><th>type</th><th>owner</th><th>attempt</th><th>lease expires in</th><th>progress</th></tr></thead>
        <tbody id="leases"></tbody>
      </table></div>
      <div class="empty" id="leases-empty">No job is running.</div>
    </section>
    <section id="events-section">
      <h2>Events <span class="aside"><label class="toggle"><input type="checkbox" id="show-renewals" checked> lease renewals</label></span></h2>
      <ul id="feed"></ul>
      <div class="empty" id="feed-empty">No events yet.</div>
    </section>
    <section id="recent-section">
      <h2>Recent jobs</h2>
      <div class="scroll"><table class="stacked">
        <thead><tr><th>job</th><th>type</th><th>state</th><th>attempt</th><th>last error</th></tr></thead>
        <tbody id="recent"></tbody>
      </table></div>
    </section>
    <section id="waiting-section">
      <h2>Waiting for a key or a slot</h2>
      <div class="scroll"><table class="stacked">
        <thead><tr><th>waiting for</th><th>jobs</th><th>since</th><th>held by</th></tr></thead>
        <tbody id="waiting"></tbody>
      </table></div>
      <div class="empty" id="waiting-empty">No job is waiting for its concurrency key or its type's limit.</div>
    </section>
  </div>
  <div class="stack">
    <section id="workers-section">
      <h2>Workers</h2>
      <table>
        <thead><tr><th>worker</th><th>status</th><th>leases</th><th class="wide-only">last seen</th><th id="worker-actions-h"></th></tr></thead>
        <tbody id="workers"></tbody>
      </table>
      <div class="empty" id="workers-empty">No worker has reported yet.</div>
    </section>
    <section id="faults" hidden>
      <h2>Inject a fault <span class="aside muted">local stack only</span></h2>
      <p class="note" id="fault-note"><strong>Fault clicks spend attempts.</strong> A kill, a pause past the lease, dropped
        connections or a failover interrupts the jobs running there, and each interruption uses one of a job's
        attempts (the cap is <span id="fault-cap">set per job</span>): a couple of clicks can dead-letter a healthy job.
        Leases marks a job on its last attempt.</p>
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
  </div>
</main>
<script>
${LIVE_PAGE_SCRIPT}</script>
</body>
</html>
`;
