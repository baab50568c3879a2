// The ablation table: kvctl's program admission with one rule alone (configs.ts: kvctl_<rule>),
// read against the same admission with no rule (thunder), and the defaults less one rule
// (kvctl_no_<rule>), read against the defaults (kvctl); per row the commands it had sent and acked
// (by type, from the gateway's counters) and its effect on recomputed prefill tokens and
// returning-turn TTFT p90.
import { configSpecs } from "./configs.js";
import type { ConfigSummary } from "./verdict.js";

/** Each ablation row's base, by name (names do not depend on the sizes): a row that names its
 * rules is one rule alone (thunder), any other is the defaults less one (kvctl). */
const BASE = new Map(
  configSpecs(1, 1, true).flatMap((s) =>
    s.role === "ablation" ? [[s.name, s.rules ? "thunder" : "kvctl"] as const] : [],
  ),
);

export interface AblationRow {
  rule: string;
  /** What the row is read against: thunder (a rule alone) or kvctl (the defaults less one). */
  base: "thunder" | "kvctl";
  /** Commands by type: sent, and acked by status ("applied", "partial", ...). */
  commands: Record<string, { sent: number; acked: Record<string, number>; failed: number }>;
  sent: number;
  acked: number;
  recomputed_tokens: number;
  recomputed_delta: number;
  ttft_p90_ms: number | null;
  base_ttft_p90_ms: number | null;
}

/** Folds the gateway's `type:outcome[:status]` counters into sent / acked-by-status / failed per type. */
export function commandsByType(counters: Record<string, number> | null): AblationRow["commands"] {
  const out: AblationRow["commands"] = {};
  for (const [k, n] of Object.entries(counters ?? {})) {
    const [type, outcome, status] = k.split(":");
    const c = out[type] ?? { sent: 0, acked: {}, failed: 0 };
    out[type] = c;
    if (outcome === "sent") c.sent += n;
    else if (outcome === "acked") c.acked[status ?? "?"] = (c.acked[status ?? "?"] ?? 0) + n;
    else c.failed += n;
  }
  return out;
}

/** One row per ablation configuration that ran and whose base ran too. */
export function ablationRows(configs: Record<string, ConfigSummary | null>): AblationRow[] {
  const rows: AblationRow[] = [];
  for (const [name, c] of Object.entries(configs)) {
    const baseName = BASE.get(name);
    if (!baseName || !c) continue;
    const base = configs[baseName];
    if (!base) continue;
    const commands = commandsByType(c.commands);
    const types = Object.values(commands);
    rows.push({
      rule: name.slice("kvctl_".length),
      base: baseName,
      commands,
      sent: types.reduce((n, t) => n + t.sent, 0),
      acked: types.reduce((n, t) => n + Object.values(t.acked).reduce((a, b) => a + b, 0), 0),
      recomputed_tokens: c.recomputed_tokens,
      recomputed_delta: c.recomputed_tokens - base.recomputed_tokens,
      ttft_p90_ms: c.ttft_returning_ms.p90,
      base_ttft_p90_ms: base.ttft_returning_ms.p90,
    });
  }
  return rows;
}

const ms = (x: number | null) => (x === null ? "-" : x.toFixed(0));

export function printAblation(rows: readonly AblationRow[], print: (line: string) => void): void {
  if (rows.length === 0) return;
  print(
    "  ablation: kvctl_<rule>, program admission with one rule alone, vs thunder (the same admission, no rule); kvctl_no_<rule>, the defaults less one, vs kvctl; commands sent / acked (by status) per type",
  );
  for (const r of rows) {
    const cmds = Object.entries(r.commands).map(
      ([t, c]) =>
        `${t} ${c.sent}/${Object.values(c.acked).reduce((a, b) => a + b, 0)} (${
          Object.entries(c.acked)
            .map(([s, n]) => `${s} ${n}`)
            .join(", ") || "none acked"
        }${c.failed ? `, ${c.failed} failed` : ""})`,
    );
    print(
      `  ${`kvctl_${r.rule}`.padEnd(18)} recomputed ${String(r.recomputed_tokens).padStart(8)} (${r.recomputed_delta >= 0 ? "+" : ""}${r.recomputed_delta} vs ${r.base})  TTFT p90 ${ms(r.ttft_p90_ms)} vs ${ms(r.base_ttft_p90_ms)} ms  ` +
        `${cmds.length ? cmds.join("; ") : "no command sent"}`,
    );
  }
}
