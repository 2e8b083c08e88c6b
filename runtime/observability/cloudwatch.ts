// Metrics to CloudWatch, batched: counts and timing statistics accumulate in memory and go out
// in one PutMetricData call per interval (StatisticValues for timings, so a busy worker sends a
// handful of data points a minute, not one per job). A failed put is logged and its data
// dropped: metrics must never block or crash job processing.
import { CloudWatchClient, PutMetricDataCommand, type MetricDatum } from '@aws-sdk/client-cloudwatch';
import type { MetricName } from './metric-names.ts';
import type { Logger } from './log.ts';
import type { Metrics } from './metrics.ts';

interface Stat {
  count: number;
  sum: number;
  min: number;
  max: number;
}

export class CloudWatchMetrics implements Metrics {
  private counts = new Map<MetricName, number>();
  private timings = new Map<MetricName, Stat>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly namespace: string,
    private readonly log: Logger,
    private readonly client: CloudWatchClient = new CloudWatchClient({}),
    private readonly intervalMs = 60_000,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.intervalMs);
    this.timer.unref();
  }

  count(name: MetricName, n = 1): void {
    this.counts.set(name, (this.counts.get(name) ?? 0) + n);
  }

  timing(name: MetricName, ms: number): void {
    const s = this.timings.get(name);
    if (!s) this.timings.set(name, { count: 1, sum: ms, min: ms, max: ms });
    else {
      s.count++;
      s.sum += ms;
      s.min = Math.min(s.min, ms);
      s.max = Math.max(s.max, ms);
    }
  }

  async flush(): Promise<void> {
    const now = new Date();
    const data: MetricDatum[] = [
      ...[...this.counts].map(([name, value]) => ({ MetricName: name, Timestamp: now, Unit: 'Count' as const, Value: value })),
      ...[...this.timings].map(([name, s]) => ({
        MetricName: name,
        Timestamp: now,
        Unit: 'Milliseconds' as const,
        StatisticValues: { SampleCount: s.count, Sum: s.sum, Minimum: s.min, Maximum: s.max },
      })),
    ];
    this.counts = new Map();
    this.timings = new Map();
    if (data.length === 0) return;
    try {
      // PutMetricData takes up to 1000 data points per call; we send at most a dozen.
      await this.client.send(new PutMetricDataCommand({ Namespace: this.namespace, MetricData: data }));
    } catch (err) {
      this.log.warn({ err, points: data.length }, 'PutMetricData failed; these data points are dropped');
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
  }
}
