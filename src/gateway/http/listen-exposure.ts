// Protected mode for the listener (as Redis's): a gateway reachable from other machines must
// encrypt (listen.tls) and authenticate (auth) unless its operator says, by name, what is given up.
import { isIPv4, isIPv6 } from "node:net";
import type { GatewayConfig } from "../config/schema.js";
import { GatewayConfigError } from "../config/load.js";

/** True when only this machine can reach the address. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIPv4(h)) return h.startsWith("127.");
  if (isIPv6(h)) return h === "::1" || /^::ffff:127\./.test(h);
  return false;
}

/** What a listener on `host` lacks to be safe off this machine: config paths, none on loopback. */
export function exposureGaps(host: string, tls: unknown, auth: unknown): string[] {
  if (isLoopback(host)) return [];
  const gaps: string[] = [];
  if (!tls) gaps.push("listen.tls");
  if (!auth) gaps.push("auth");
  return gaps;
}

const COST: Record<string, string> = {
  "listen.tls": "requests, answers and client keys travel in the clear",
  auth: "anyone who can reach it may call the workers, send hints and read worker addresses",
};

/** What each gap gives up, in one line. */
export function exposureCost(gaps: readonly string[]): string {
  return gaps.map((g) => `without ${g} ${COST[g]}`).join("; ");
}

/**
 * Refuses a listener off loopback without TLS or auth unless `listen.insecure` accepts it. Checked
 * where the gateway starts, not in the schema: a watched file re-read for its workers is not a start.
 */
export function checkExposure(config: GatewayConfig, source: string): void {
  const { host, tls, insecure } = config.listen;
  const gaps = exposureGaps(host, tls, config.auth);
  if (!gaps.length || insecure) return;
  const are = gaps.length > 1 ? "are" : "is";
  throw new GatewayConfigError(
    `${source} is invalid:\n  listen.host: ${host} is reachable from other machines and ${gaps.join(" and ")} ${are} not configured (${exposureCost(gaps)}); configure ${gaps.join(" and ")}, or accept that with --insecure (listen.insecure: true)`,
  );
}
