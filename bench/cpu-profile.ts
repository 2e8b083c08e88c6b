// A V8 CPU profile of one phase of the benchmark (the worker's process phase), through the
// inspector, so the profile holds that phase and nothing else (not startup, not the enqueue).
// The .cpuprofile file opens in Chrome DevTools; `summarize` prints where the time went.
import { Session } from 'node:inspector/promises';
import { writeFile } from 'node:fs/promises';
import { constants, PerformanceObserver } from 'node:perf_hooks';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export async function profileCpu<T>(file: string, phase: () => Promise<T>): Promise<{ result: T; summary: string }> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 200 });
  await session.post('Profiler.start');
  // Allocations too (a sample every 32 KiB), kept or collected: what feeds the garbage collector.
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 32_768,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  let heap: HeapProfile | undefined;
  // The collector's pauses by kind (young generation: scavenges; old: mark-compact), in the phase.
  const gc = { minor: { n: 0, ms: 0 }, major: { n: 0, ms: 0 } };
  const gcWatch = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind =
        (e as unknown as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR ? gc.minor : gc.major;
      kind.n++;
      kind.ms += e.duration;
    }
  });
  gcWatch.observe({ entryTypes: ['gc'] });
  const stop = async (): Promise<Profile> => {
    gcWatch.disconnect();
    const { profile } = (await session.post('Profiler.stop')) as unknown as { profile: Profile };
    heap = ((await session.post('HeapProfiler.stopSampling')) as unknown as { profile: HeapProfile }).profile;
    session.disconnect();
    return profile;
  };
  let result: T;
  try {
    result = await phase();
  } catch (err) {
    await stop();
    throw err;
  }
  const profile = await stop();
  await writeFile(file, JSON.stringify(profile));
  await writeFile(file.replace(/\.cpuprofile$/, '.heapprofile'), JSON.stringify(heap));
  const pauses = `  garbage collector pauses: ${gc.minor.n} scavenges ${gc.minor.ms.toFixed(0)} ms, ${gc.major.n} others (mark-compact, incremental steps) ${gc.major.ms.toFixed(0)} ms`;
  return { result, summary: `${summarize(profile)}\n${summarizeHeap(heap!)}\n${pauses}` };
}

interface HeapNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: HeapNode[];
}
interface HeapProfile {
  head: HeapNode;
}

/** A frame's source, shortened (runtime/…, bench/…, a package's path), and its function at its line. */
function frameLabel(cf: { functionName: string; url: string; lineNumber: number }): { url: string; fn: string } {
  const url = cf.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*?\/(runtime|bench)\//, '$1/');
  return { url, fn: `${cf.functionName || '(anonymous)'} ${url}${url ? `:${cf.lineNumber + 1}` : ''}` };
}

/** Bytes allocated by function (sampled), largest first. */
export function summarizeHeap(p: HeapProfile, top = 15): string {
  const byFn = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapNode) => {
    const { fn } = frameLabel(n.callFrame);
    byFn.set(fn, (byFn.get(fn) ?? 0) + n.selfSize);
    total += n.selfSize;
    for (const c of n.children) walk(c);
  };
  walk(p.head);
  const rows = [...byFn]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([k, b]) => `    ${(b / 2 ** 20).toFixed(1).padStart(8)} MiB ${((100 * b) / total).toFixed(1).padStart(5)} %  ${k}`);
  return [`  allocations in the process phase (sampled): ${(total / 2 ** 20).toFixed(0)} MiB`, '  by function (self):', ...rows].join('\n');
}

/** Self time by source file and by function, largest first. */
export function summarize(p: Profile, top = 25): string {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const byFile = new Map<string, number>();
  const byFn = new Map<string, number>();
  let total = 0;
  p.samples.forEach((id, i) => {
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const cf = byId.get(id)!.callFrame;
    const { url, fn } = frameLabel(cf);
    const file = url
      ? url
          .split('/')
          .slice(0, url.startsWith('runtime/') ? 3 : 1)
          .join('/')
      : cf.functionName;
    byFile.set(file, (byFile.get(file) ?? 0) + dt);
    byFn.set(fn, (byFn.get(fn) ?? 0) + dt);
  });
  const rows = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([k, us]) => `    ${(us / 1000).toFixed(1).padStart(8)} ms ${((100 * us) / total).toFixed(1).padStart(5)} %  ${k}`);
  return [
    `  CPU profile of the process phase: ${(total / 1000).toFixed(0)} ms sampled`,
    '  by file (self time):',
    ...rows(byFile),
    '  by function (self time):',
    ...rows(byFn),
  ].join('\n');
}
