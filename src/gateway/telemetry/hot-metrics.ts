// The counters and histograms every request touches. prom-client validates and hashes the label
// set on every inc and observe (and allocates while doing it), which on the request path cost more
// than the rest of the gateway's own bookkeeping; here a series is found through plain maps, with
// nothing allocated, and counted in plain numbers. They register in the same prom-client Registry
// and give it the same samples its own Counter and Histogram would, so /metrics renders them
// exactly as before (test/hot-metrics.test.ts renders both side by side).
import type { Registry } from "prom-client";

interface MetricConfig<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  registers: Registry[];
}

type Labels<L extends string> = Record<L, string | number>;

interface Sample {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string | number>;
  value: number;
  metricName?: string;
  exemplar?: null;
}

/** What a Registry reads from a metric at scrape time (prom-client's own metrics answer the same). */
interface Collected {
  name: string;
  help: string;
  type: "counter" | "histogram";
  values: Sample[];
  aggregator: "sum";
}

/** A label value as the rendering writes it (a string is its own text: no conversion). */
const textOf = (v: string | number): string => (typeof v === "string" ? v : String(v));

abstract class HotMetric<L extends string, S extends { labels: Labels<L> }> {
  readonly name: string;
  readonly help: string;
  readonly aggregator = "sum";
  /** The series as a tree of maps, one level per label (seriesOf). */
  private series = new Map<string, unknown>();
  /** Every series, in the order they were created (what a scrape reads). */
  protected all: S[] = [];
  private readonly labelNames: readonly L[];

  constructor(c: MetricConfig<L>) {
    this.name = c.name;
    this.help = c.help;
    this.labelNames = c.labelNames;
    for (const r of c.registers)
      r.registerMetric(this as unknown as Parameters<Registry["registerMetric"]>[0]);
  }

  /**
   * The series of these labels (created at zero the first time), found through one map per label
   * in labelNames order: a lookup builds no key string. A label's value is its text (200 and "200"
   * are one series, as in the rendering).
   */
  protected seriesOf(labels: Labels<L>): S {
    const names = this.labelNames;
    let level: Map<string, unknown> = this.series;
    for (let i = 0; i < names.length - 1; i++) {
      const k = textOf(labels[names[i]]);
      let next = level.get(k) as Map<string, unknown> | undefined;
      if (!next) {
        this.checkLabels(labels);
        next = new Map();
        level.set(k, next);
      }
      level = next;
    }
    const k = names.length > 0 ? textOf(labels[names[names.length - 1]]) : "";
    let s = level.get(k) as S | undefined;
    if (!s) {
      this.checkLabels(labels);
      const own = {} as Labels<L>;
      for (const name of names) own[name] = labels[name];
      s = this.fresh(own);
      level.set(k, s);
      this.all.push(s);
    }
    return s;
  }

  private checkLabels(labels: Labels<L>): void {
    for (const k of this.labelNames)
      if (labels[k] === undefined) throw new Error(`metric ${this.name}: label ${k} is missing`);
  }

  protected abstract fresh(labels: Labels<L>): S;

  /** Forgets every series (Registry.resetMetrics). */
  reset(): void {
    this.series = new Map();
    this.all = [];
  }
}

interface CounterSeries<L extends string> {
  labels: Labels<L>;
  value: number;
}

export class HotCounter<L extends string> extends HotMetric<L, CounterSeries<L>> {
  readonly type = "counter";

  inc(labels: Labels<L>, value = 1): void {
    if (!(value >= 0) || !Number.isFinite(value))
      throw new Error(`metric ${this.name}: a counter only grows (got ${value})`);
    this.seriesOf(labels).value += value;
  }

  protected fresh(labels: Labels<L>): CounterSeries<L> {
    return { labels, value: 0 };
  }

  async get(): Promise<Collected> {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values: this.all.map((s) => ({ value: s.value, labels: s.labels })),
    };
  }
}

/** One histogram series: observe costs a bucket search and three additions. */
export class HistogramSeries<L extends string> {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Labels<L>,
    private readonly bounds: readonly number[],
    private readonly name: string,
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    if (!Number.isFinite(value))
      throw new Error(`metric ${this.name}: an observation must be finite (got ${value})`);
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]) i++;
    if (i < b.length) this.counts[i]++;
    this.sum += value;
    this.count++;
  }
}

export class HotHistogram<L extends string> extends HotMetric<L, HistogramSeries<L>> {
  readonly type = "histogram";
  private readonly bounds: readonly number[];

  constructor(c: MetricConfig<L> & { buckets: readonly number[] }) {
    super(c);
    if (c.buckets.some((b, i) => i > 0 && b <= c.buckets[i - 1]))
      throw new Error(`metric ${c.name}: buckets must ascend`);
    this.bounds = [...c.buckets];
  }

  /** The series of these labels, to keep and observe into without looking it up again. */
  labels(labels: Labels<L>): HistogramSeries<L> {
    return this.seriesOf(labels);
  }

  observe(labels: Labels<L>, value: number): void {
    if (!Number.isFinite(value))
      throw new Error(`metric ${this.name}: an observation must be finite (got ${value})`);
    this.seriesOf(labels).observe(value);
  }

  protected fresh(labels: Labels<L>): HistogramSeries<L> {
    return new HistogramSeries(labels, this.bounds, this.name);
  }

  /** The samples as prom-client's Histogram gives them to the text format: `le` first, then the series' labels. */
  async getForPromString(): Promise<Collected> {
    const values: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.all) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += s.counts[i];
        values.push({
          labels: { le },
          sharedLabels: s.labels,
          value: acc,
          metricName: bucket,
          exemplar: null,
        });
      });
      values.push({
        labels: { le: "+Inf" },
        sharedLabels: s.labels,
        value: s.count,
        metricName: bucket,
        exemplar: null,
      });
      values.push({
        labels: {},
        sharedLabels: s.labels,
        value: s.sum,
        metricName: `${this.name}_sum`,
      });
      values.push({
        labels: {},
        sharedLabels: s.labels,
        value: s.count,
        metricName: `${this.name}_count`,
      });
    }
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values,
    };
  }

  /** The same samples with each series' labels folded into its own (the JSON form). */
  async get(): Promise<Collected> {
    const c = await this.getForPromString();
    c.values = c.values.map(({ sharedLabels, labels, ...rest }) => ({
      ...rest,
      labels: { ...labels, ...sharedLabels },
    }));
    return c;
  }
}
