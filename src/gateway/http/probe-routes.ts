// Kubernetes-style probes: /livez answers while the process serves at all (a failing one means
// restart it); /readyz answers 200 only while the gateway takes traffic: not draining, and at
// least one worker available (a failing one means send traffic elsewhere, do not restart).
import type { FastifyInstance } from "fastify";
import type { DrainGate } from "./listener.js";
import type { TurnWorkers } from "../turn/ports.js";

export function registerProbeRoutes(
  app: FastifyInstance,
  workers: Pick<TurnWorkers, "available">,
  drain: DrainGate,
): void {
  app.get("/livez", async (_req, reply) => reply.send({ status: "live" }));
  app.get("/readyz", async (_req, reply) => {
    const status = drain.draining
      ? "draining"
      : workers.available().length > 0
        ? "ready"
        : "no_workers";
    return reply.code(status === "ready" ? 200 : 503).send({ status });
  });
}
