// What runs when a response closes (the drain count, the tenant's concurrency, the client link, the
// log line), under one 'close' listener per response: a listener each cost a once-wrapper apiece
// and an array copy on every emit, on every request.
import type { ServerResponse } from "node:http";

const HOOKS = Symbol("kvctl.closeHooks");
type Hooked = ServerResponse & { [HOOKS]?: (() => void)[] };

/** Runs fn once res has closed, after the hooks added before it. */
export function onResponseClose(res: ServerResponse, fn: () => void): void {
  const r = res as Hooked;
  let hooks = r[HOOKS];
  if (!hooks) {
    const list: (() => void)[] = [];
    hooks = r[HOOKS] = list;
    res.once("close", () => {
      for (const h of list) h();
    });
  }
  hooks.push(fn);
}
