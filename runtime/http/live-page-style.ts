// The live view's stylesheet (live-page.ts inlines it in the page's <style>): colours by job
// state, the tiles, tables, feed and fault controls, and the narrow-screen layouts.

export const LIVE_PAGE_STYLE = `
  :root {
    --bg: #f4f5f7; --card: #fff; --ink: #1d2330; --muted: #6b7385; --line: #e3e6ec;
    --pending: #8a6d00; --pending-bg: #fff4c2; --running: #0b5cad; --running-bg: #dcebff;
    --succeeded: #17733b; --succeeded-bg: #d9f5e3; --dead: #b42318; --dead-bg: #fde3e0;
    --cancelled: #5b6270; --cancelled-bg: #e9ebef; --fault: #8a1c7c; --fault-bg: #f9e1f5;
  }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); background: var(--bg); }
  header { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 16px; padding: 12px 20px; background: #1d2330; color: #fff; }
  header h1 { margin: 0; font-size: 18px; font-weight: 600; }
  header .sub { color: #aab2c3; font-size: 13px; }
  header .right { margin-left: auto; display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; font-size: 13px; }
  .dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; background: #888; vertical-align: 0; }
  .dot.ok { background: #3ccf6e; } .dot.warn { background: #f5b82e; } .dot.bad { background: #f04438; }
  main { padding: 16px 20px 30px; display: grid; gap: 14px; grid-template-columns: minmax(0, 1.75fr) minmax(0, 1fr); }
  /* Tiles share a row while they fit and wrap when they do not: a tile never shrinks below its
     longest word, so "succeeded" never reads "SUCC". */
  .tiles { grid-column: 1 / -1; display: flex; flex-wrap: wrap; gap: 10px; }
  .tile { flex: 1 1 100px; background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
  .tile .n { font-size: 28px; font-weight: 650; font-variant-numeric: tabular-nums; }
  .tile .l { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
  .tile .x { color: var(--muted); font-size: 12px; }
  .tile.pending .n { color: var(--pending); } .tile.running .n { color: var(--running); } .tile.succeeded .n { color: var(--succeeded); }
  .tile.dead .n { color: var(--dead); } .tile.cancelled .n { color: var(--cancelled); }
  .tile.alarm { border-color: var(--dead); background: var(--dead-bg); }
  section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; min-width: 0; overflow: hidden; }
  section h2 { flex-wrap: wrap; margin: 0 0 8px; font-size: 13px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); display: flex; align-items: center; gap: 10px; }
  section h2 .aside { margin-left: auto; text-transform: none; letter-spacing: 0; font-weight: 400; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th { text-align: left; font-weight: 500; color: var(--muted); font-size: 12px; padding: 3px 6px; border-bottom: 1px solid var(--line); }
  td { padding: 4px 6px; border-bottom: 1px solid #f0f1f4; vertical-align: middle; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 240px; }
  /* The free-text column takes what is left and ellipsizes, instead of widening the page. */
  td.fill { max-width: 1px; width: 100%; }
  /* Free text (progress, errors) wraps rather than hiding behind an ellipsis: a phone has no hover. */
  td.wrap { white-space: normal; overflow-wrap: break-word; }
  td.error { color: var(--dead); }
  td.attempt { white-space: normal; min-width: 120px; }
  td.attempt .cap { display: block; font-size: 12px; color: var(--dead); font-weight: 600; }
  td.actions { overflow: visible; max-width: none; }
  .scroll { overflow-x: auto; }
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
  #feed li .d { overflow-wrap: break-word; color: var(--muted); }
  #feed li.new { animation: flash 1.2s ease-out; }
  @keyframes flash { from { background: #fff6c8; } to { background: transparent; } }
  .k-claimed { color: var(--running); } .k-reclaimed { color: #6941c6; } .k-lease-renewed { color: #98a0b0; font-weight: 400 !important; }
  .k-lease-lost { color: #c4320a; } .k-duplicate-ignored { color: #b54708; } .k-succeeded { color: var(--succeeded); }
  .k-retried { color: #b54708; } .k-dead-lettered, .k-poison-dead-lettered { color: var(--dead); } .k-released { color: #0e7490; }
  .k-worker-up, .k-worker-down { color: var(--muted); } .k-cancelled { color: var(--cancelled); } .k-scheduled { color: #0e7490; }
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
  .note { margin: 0 0 10px; font-size: 12.5px; color: var(--muted); }
  .note strong { color: var(--dead); font-weight: 600; }

  /* Below 1100 px one column: the two stacks dissolve into main's grid, ordered so the workers
     and the fault controls come before the long event feed. */
  @media (max-width: 1100px) {
    main { grid-template-columns: minmax(0, 1fr); }
    .stack { display: contents; }
    #leases-section { order: 1; } #workers-section { order: 2; } #faults { order: 3; } #events-section { order: 4; } #recent-section { order: 5; }
  }
  /* A phone: tighter padding, a feed line on two rows, no "last seen" column (the status chip says alive or silent). */
  @media (max-width: 600px) {
    header { padding: 10px 12px; } header .sub { display: none; }
    main { padding: 10px 10px 24px; gap: 10px; }
    .tiles { gap: 8px; } .tile { padding: 8px 10px; } .tile .n { font-size: 24px; } .tile .l { font-size: 11px; letter-spacing: .02em; }
    section { padding: 10px; }
    th, td { padding: 3px 4px; }
    .wide-only { display: none; }
    td.actions button { margin: 1px 0; }
    #feed li { grid-template-columns: 80px minmax(0, 1fr); row-gap: 0; }
    #feed li > :nth-child(n + 3) { grid-column: 2; }
    #token-box input { width: 150px; }
    /* Leases and recent jobs as cards: a row's cells on a three-column grid, the free text on a line of its own. */
    table.stacked, table.stacked tbody { display: block; } table.stacked thead { display: none; }
    table.stacked tr { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); column-gap: 6px; padding: 5px 0; border-bottom: 1px solid var(--line); }
    table.stacked td { border-bottom: 0; max-width: none; padding: 1px 2px; }
    table.stacked td.fill { width: auto; grid-column: 1 / -1; }
    table.stacked td.fill:empty { display: none; }
    table.stacked td.lease { grid-column: span 2; }
    td.attempt { min-width: 0; }
  }
`;
