// The admin API's membership routes, under /kvctl/v1/admin/ (the prefix the admin key guards):
// list the workers, add one (it takes traffic once it answers), drain one (no new traffic, its
// calls under way finish, its sessions move), undrain it, remove it (drained, then cut after the
// drain grace). A body that is not a worker entry is refused naming the field; nothing changes.
import type { FastifyInstance, FastifyReply } from "fastify";
import { workerConfigSchema } from "../config/workers.js";
import { errorBody } from "../core/errors.js";
import { WorkerSchemeError } from "../workers/worker-scheme.js";
import type { GatewayWorker } from "../workers/worker.js";
import { MembershipError, type WorkerSet } from "../workers/workers.js";

export const ADMIN_PREFIX = "/kvctl/v1/admin";

export function workerView(w: GatewayWorker): Record<string, unknown> {
  return {
    id: w.id,
    url: w.url,
    healthy: w.healthy,
    joined: w.joined,
    drained: w.cordoned,
    stale: w.stale,
    in_flight: w.inFlight,
    page_size: w.scheme?.pageSize ?? null,
  };
}

function fail(reply: FastifyReply, status: number, type: string, message: string): FastifyReply {
  return reply
    .code(status)
    .header("content-type", "application/json")
    .send(errorBody("openai", type, message));
}

export function registerAdminRoutes(
  app: FastifyInstance,
  workers: WorkerSet,
  graceMs: number,
): void {
  const count = (change: string) => workers.metrics.ops.membership.inc({ change });
  app.get(`${ADMIN_PREFIX}/workers`, async () => ({ workers: workers.workers.map(workerView) }));

  app.post(`${ADMIN_PREFIX}/workers`, async (req, reply) => {
    const parsed = workerConfigSchema.safeParse((req.body as { json?: unknown } | undefined)?.json);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      return fail(
        reply,
        400,
        "invalid_request_error",
        `worker entry: ${i.path.length ? i.path.join(".") : "(body)"}: ${i.message}`,
      );
    }
    try {
      const w = await workers.add(parsed.data);
      count("added");
      return reply.code(w.healthy ? 201 : 202).send({ worker: workerView(w) });
    } catch (e) {
      if (e instanceof MembershipError) return fail(reply, 409, "invalid_request_error", e.message);
      if (e instanceof WorkerSchemeError)
        return fail(reply, 422, "invalid_request_error", e.message);
      throw e;
    }
  });

  const change = (path: string, what: string, run: (id: string) => Promise<GatewayWorker | null>) =>
    app.route({
      method: what === "removed" ? "DELETE" : "POST",
      url: `${ADMIN_PREFIX}/workers/:id${path}`,
      handler: async (req, reply) => {
        const { id } = req.params as { id: string };
        try {
          const w = await run(id);
          count(what);
          return reply.send({ [what]: id, worker: w ? workerView(w) : null });
        } catch (e) {
          if (e instanceof MembershipError) return fail(reply, 404, "not_found", e.message);
          throw e;
        }
      },
    });
  change("/drain", "drained", async (id) => workers.cordon(id, true));
  change("/undrain", "undrained", async (id) => workers.cordon(id, false));
  change("", "removed", async (id) => {
    await workers.remove(id, graceMs);
    return null;
  });
}
