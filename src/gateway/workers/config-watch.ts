// Membership from the config file: while the gateway runs, its file is watched and the worker list
// applied as it changes (new ids added, missing ids removed, an id whose endpoints changed removed
// and added again). A file that does not parse or validate changes nothing: the gateway keeps
// serving on what it has and says why. Only `workers` is applied; other changes need a restart.
import { type FSWatcher, watch } from "node:fs";
import { basename, dirname } from "node:path";
import { GatewayConfigError, parseGatewayConfig, readConfigFile } from "../config/load.js";
import type { WorkerConfig } from "../config/workers.js";
import type { WorkerSet } from "./workers.js";
import { asLog, type GatewayLog } from "../core/logger.js";

export interface ConfigWatch {
  /** Resolves when the change under way (if any) has been applied. */
  settled(): Promise<void>;
  close(): void;
}

const same = (
  a: WorkerConfig,
  b: { url: string; events: string | null; replay: string | null },
): boolean =>
  a.url.replace(/\/$/, "") === b.url &&
  (a.events === undefined || a.events === b.events) &&
  (a.replay === undefined || a.replay === b.replay);

/** Applies the file's worker list to `workers`; what changed, or the error that changed nothing. */
export async function applyWorkerList(
  path: string,
  workers: WorkerSet,
  graceMs: number,
  to: GatewayLog | ((line: string) => void),
): Promise<string[]> {
  const log = asLog(to);
  let want: WorkerConfig[];
  try {
    want = parseGatewayConfig(readConfigFile(path), `config file ${path}`).workers;
  } catch (e) {
    if (!(e instanceof GatewayConfigError)) throw e;
    log.error(`gateway: config reload refused, nothing changed: ${e.message}`);
    return [];
  }
  const changes: string[] = [];
  const byId = new Map(want.map((c) => [c.id, c]));
  for (const w of [...workers.workers]) {
    const c = byId.get(w.id);
    if (c && same(c, w)) continue;
    await workers.remove(w.id, graceMs);
    workers.metrics.ops.membership.inc({ change: "removed" });
    changes.push(`-${w.id}`);
  }
  for (const c of want) {
    if (workers.get(c.id)) continue;
    try {
      await workers.add(c);
      workers.metrics.ops.membership.inc({ change: "added" });
      changes.push(`+${c.id}`);
    } catch (e) {
      log.error(`gateway: config reload: worker ${c.id} refused: ${(e as Error).message}`);
    }
  }
  if (changes.length) log.info(`gateway: config reload applied workers ${changes.join(" ")}`);
  return changes;
}

/** Watches the file's directory (editors replace files rather than write them in place). */
export function watchWorkerList(
  path: string,
  workers: WorkerSet,
  graceMs: number,
  to: GatewayLog | ((line: string) => void),
): ConfigWatch {
  const log = asLog(to);
  let chain: Promise<unknown> = Promise.resolve();
  let timer: NodeJS.Timeout | null = null;
  const name = basename(path);
  const watcher: FSWatcher = watch(dirname(path), (_event, file) => {
    if (file !== null && file !== name) return;
    // Several events come for one save: apply once they stop.
    if (timer) clearTimeout(timer);
    timer = setTimeout(() => {
      chain = chain
        .then(() => applyWorkerList(path, workers, graceMs, log))
        .catch((e) => log.error(`gateway: config reload failed: ${(e as Error).message}`));
    }, 100);
  });
  watcher.on("error", (e) => log.error(`gateway: watching ${path} stopped: ${e.message}`));
  return {
    settled: async () => {
      await chain;
    },
    close: () => {
      if (timer) clearTimeout(timer);
      watcher.close();
    },
  };
}
