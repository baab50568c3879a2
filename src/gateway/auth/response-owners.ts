// Stored responses (/v1/responses) belong to the tenant that created them. The gateway names each
// new response itself (SGLang takes the body's `request_id` as the response's id) and records it
// with its tenant and the worker that answered, once the worker accepted it. A by-id route (GET,
// cancel, a later request's `previous_response_id`) then goes to that worker alone, and a tenant
// asking for another tenant's id gets the answer for an id nobody used: the same status and body,
// by the same code path. The admin key (and everyone with auth off) may name any id; an id this
// replica never recorded (made before a restart, or through another replica) is then looked for
// on every worker, as before. The table is this replica's memory, bounded: the oldest ids go first.
import { randomUUID } from "node:crypto";
import type { Caller } from "./ownership.js";

export interface ResponseOwner {
  tenant: string | null;
  worker: string;
}

/** Where a by-id request goes: the owner's worker, every worker (an admin's unknown id), or nowhere. */
export type ResponseLookup = { worker: string } | "any" | "unknown";

/** An id in SGLang's own shape for a response the caller did not name. */
export const newResponseId = (): string => `resp_${randomUUID().replace(/-/g, "")}`;

export const responseNotFound = (id: string): string => `Response with id '${id}' not found.`;

export class ResponseOwners {
  private readonly byId = new Map<string, ResponseOwner>();

  constructor(private readonly max = 100_000) {}

  record(id: string, owner: ResponseOwner): void {
    this.byId.delete(id);
    this.byId.set(id, owner);
    if (this.byId.size > this.max) {
      const oldest = this.byId.keys().next().value;
      if (oldest !== undefined) this.byId.delete(oldest);
    }
  }

  /** Where `who`'s request naming `id` goes; another tenant's id is "unknown", as a made-up one. */
  lookup(who: Caller, id: string): ResponseLookup {
    const o = this.byId.get(id);
    if (!o) return who.admin ? "any" : "unknown";
    return who.admin || o.tenant === who.tenant ? { worker: o.worker } : "unknown";
  }

  /** Whether `id` is free for `who` to name a new response: unused, or its own. */
  mayName(who: Caller, id: string): boolean {
    const o = this.byId.get(id);
    return !o || who.admin || o.tenant === who.tenant;
  }
}

/**
 * The request's bytes with `request_id` set, the rest untouched (no re-serialising: numbers and
 * key order stay the client's). `body` is the parsed object, without a request_id of its own.
 */
export function withResponseId(raw: Buffer, body: Record<string, unknown>, id: string): Buffer {
  const text = raw.toString("utf8");
  const open = text.indexOf("{");
  const field = `"request_id":${JSON.stringify(id)}${Object.keys(body).length ? "," : ""}`;
  return Buffer.from(text.slice(0, open + 1) + field + text.slice(open + 1), "utf8");
}
