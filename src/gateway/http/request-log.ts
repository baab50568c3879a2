// One log line per request, whichever door it came through and however it ended (served, refused
// by auth, drain or admission, malformed, cut): the request gets its id on arrival, answered to
// the client as x-request-id, and the line is written once the response has closed. An inference
// turn notes its route, worker, tenant, session and error on the request as it learns them.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { LogFields, RequestLogLine } from "../core/logger.js";
import { onResponseClose } from "../core/response-close.js";

type Note = Pick<RequestLogLine, "route" | "worker" | "tenant" | "session" | "error">;

const notes = new WeakMap<IncomingMessage, { id: string } & Note>();

/** Starts the request's line; null when requests are not logged (the text format). */
export function requestLogger(tel: {
  readonly requestLog: ((r: RequestLogLine) => void) | null;
  readonly nextRequestId: () => string;
}): ((req: IncomingMessage, res: ServerResponse) => void) | null {
  const write = tel.requestLog;
  if (!write) return null;
  return (req, res) => {
    const started = performance.now();
    const note = {
      id: tel.nextRequestId(),
      route: null,
      worker: null,
      tenant: null,
      session: null,
      error: null,
    };
    notes.set(req, note);
    res.setHeader("x-request-id", note.id);
    onResponseClose(res, () => {
      const duration_ms = Math.round((performance.now() - started) * 1000) / 1000;
      const status = res.writableFinished ? res.statusCode : 0;
      // 'close' can come before the turn's last note (its outcome arrives in a promise
      // continuation): the line is written after those have run.
      setImmediate(() => {
        const { id, ...known } = note;
        write({
          request_id: id,
          method: req.method ?? "",
          path: (req.url ?? "/").split("?")[0],
          ...known,
          status,
          duration_ms,
        });
      });
    });
  };
}

/** The request's id, when requests are logged. */
export function requestIdOf(req: IncomingMessage | undefined): string | null {
  return (req && notes.get(req)?.id) ?? null;
}

/** The request_id field of a line written while serving req (none when requests are not logged). */
export function requestFields(req: IncomingMessage | undefined): LogFields | undefined {
  const id = requestIdOf(req);
  return id === null ? undefined : { request_id: id };
}

/** Adds what the turn knows to the request's line (nothing when requests are not logged). */
export function noteRequest(req: IncomingMessage | undefined, n: Partial<Note>): void {
  const note = req && notes.get(req);
  if (note) Object.assign(note, n);
}
