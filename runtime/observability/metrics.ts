// The services' metrics sink (the worker's job counts, the API's database-secret reads). The names come from runtime/observability/metric-names.ts; the CloudWatch
// implementation (batched PutMetricData) lives in cloudwatch.ts. In tests and locally a
// counting sink records what would have been sent.
import type { MetricName } from './metric-names.ts';

export interface Metrics {
  count(name: MetricName, n?: number): void;
  timing(name: MetricName, ms: number): void;
  flush?(): Promise<void>;
}

export class CountingMetrics implements Metrics {
  readonly counts = new Map<MetricName, number>();
  readonly timings = new Map<MetricName, number[]>();
  count(name: MetricName, n = 1): void {
    this.counts.set(name, (this.counts.get(name) ?? 0) + n);
  }
  timing(name: MetricName, ms: number): void {
    const list = this.timings.get(name) ?? [];
    list.push(ms);
    this.timings.set(name, list);
  }
  get(name: MetricName): number {
    return this.counts.get(name) ?? 0;
  }
}
