// SGLang's session radix cache (`--enable-session-radix-cache`, with `--radix-eviction-policy
// priority`), driven by the gateway. Such a worker tags the KV of every request that carries a
// body `session_id` and, when it must evict, takes leaves no open session covers first, then
// those covered by fewer sessions, then by its own priority (0.5.23: mem_cache/unified_cache,
// FullComponent's eviction order); closing a session drops its tags. It is a soft hold: nothing is
// refused for it and it needs no budget, but a worker whose sessions all stay open orders them
// only by plain recency.
//
// The gateway gives it what it lacks: every session turn sent to such a worker carries the
// session's id in its body (unless the client manages its own SGLang session), and a session's
// tags end where kvctl knows the session will not be back soon: program admission let its program
// go at a tool boundary or paused it under pressure, the session moved to another worker, or it
// ended (a close hint or its record's expiry). Its blocks then go before the blocks of sessions
// kept. The next turn of a session that was let go opens it again on its worker.
import { withField } from "../core/json-splice.js";
import type { Observation } from "../../contract/observations.js";
import { Counter, type Registry } from "prom-client";
import type { GatewayLog } from "../core/logger.js";
import { callJson } from "./upstream.js";

/** What the gateway needs of a worker to close a session there. */
export interface RadixWorker {
  readonly id: string;
  readonly pool: Parameters<typeof callJson>[0];
  /** The worker runs SGLang's session radix cache (from its /server_info). */
  readonly sessionRadix: boolean;
}

export type RadixRelease = "let_go" | "pressure" | "moved" | "ended";

export interface RadixSessionsOptions {
  workers: () => readonly RadixWorker[];
  registry: Registry;
  log: GatewayLog;
  timeoutMs: number;
}

/** Whether a worker's /server_info says it runs the session radix cache. */
export function runsSessionRadix(serverInfo: Record<string, unknown>): boolean {
  return serverInfo.enable_session_radix_cache === true;
}

/** The body sent to a session-radix worker: the client's bytes with `session_id` added. */
export function withSessionId(raw: Buffer, sessionId: string): Buffer {
  return withField(raw, "session_id", sessionId);
}

export class RadixSessions {
  readonly releases: Counter<"worker" | "reason" | "outcome">;
  private failedLogged = false;

  constructor(private readonly o: RadixSessionsOptions) {
    this.releases = new Counter({
      name: "kvctl_gateway_radix_session_releases_total",
      help: "Sessions closed on a worker's SGLang session radix cache, by why (let_go, pressure, moved, ended) and outcome (ok, failed)",
      labelNames: ["worker", "reason", "outcome"],
      registers: [o.registry],
    });
  }

  /** Session ends and moves, from the gateway's observations. */
  observe(o: Observation): void {
    if (o.type === "SessionHint" && o.event === "close") {
      for (const w of this.o.workers()) this.release(w, o.sessionId, "ended");
    } else if (
      o.type === "TurnStarted" &&
      o.sessionId !== null &&
      o.stored?.worker &&
      o.stored.worker !== o.worker
    ) {
      const old = this.o.workers().find((w) => w.id === o.stored?.worker);
      if (old) this.release(old, o.sessionId, "moved");
    }
  }

  /** Closes `sessionId` on `w` (nothing when w does not run the session radix cache); never throws. */
  release(w: RadixWorker, sessionId: string, reason: RadixRelease): void {
    if (!w.sessionRadix) return;
    void callJson(w.pool, "POST", "/close_session", { session_id: sessionId }, this.o.timeoutMs)
      .then((r) => {
        if (r.status !== 200) throw new Error(`answered ${r.status}: ${r.text.slice(0, 200)}`);
        this.releases.inc({ worker: w.id, reason, outcome: "ok" });
      })
      .catch((e) => {
        this.releases.inc({ worker: w.id, reason, outcome: "failed" });
        // Counted each time; logged once, as a worker that refuses one close refuses them all.
        if (this.failedLogged) return;
        this.failedLogged = true;
        this.o.log.warn(
          `gateway: closing session ${JSON.stringify(sessionId)} on ${w.id}'s session radix cache failed (${(e as Error).message}); later failures are counted in kvctl_gateway_radix_session_releases_total`,
        );
      });
  }
}
