// The worker's own rules for two request fields the gateway must read before the worker does, so a
// request the worker would serve is never refused at the door and one it would refuse is refused
// the same way (SGLang 0.5.23, checked against its http_server and pydantic models):
//   Content-Type: the OpenAI and Anthropic routes take exactly `application/json` (lower-cased,
//     parameters after `;` ignored); /generate reads a body as JSON when FastAPI would (an
//     `application/json` or `application/*+json` media type), anything else is refused with 400.
//   stream: the OpenAI and Anthropic routes read it as pydantic's lax boolean (true/false, 0/1,
//     0.0/1.0, and the strings yes/no, on/off, true/false, t/f, y/n, 1/0 in any case); null is
//     "not streamed" for /v1/messages and refused elsewhere; /generate takes a JSON boolean only.
import type { RouteKind } from "../../contract/observations.js";

const LAX_TRUE = new Set(["1", "on", "t", "true", "y", "yes"]);
const LAX_FALSE = new Set(["0", "off", "f", "false", "n", "no"]);

/** Why the worker would refuse this Content-Type on the route, or null when it takes it. */
export function contentTypeError(route: RouteKind, contentType: string | undefined): string | null {
  const ct = (contentType ?? "").toLowerCase();
  if (route === "generate") {
    const media = ct.split(";")[0].trim();
    const [main, sub] = media.split("/");
    if (main === "application" && sub !== undefined && (sub === "json" || sub.endsWith("+json")))
      return null;
  } else if (ct.split(";")[0] === "application/json") return null;
  return `Unsupported Media Type: Only 'application/json' is allowed (got ${contentType === undefined ? "no content-type" : `'${contentType}'`})`;
}

/** The request's `stream` as the worker reads it: a boolean, or null when the worker refuses it. */
export function streamOf(route: RouteKind, value: unknown): boolean | null {
  if (value === undefined || typeof value === "boolean") return value === true;
  if (route === "generate") return null;
  if (value === null) return route === "messages" ? false : null;
  if (value === 0 || value === 1) return value === 1;
  if (typeof value === "string") {
    const s = value.toLowerCase();
    if (LAX_TRUE.has(s)) return true;
    if (LAX_FALSE.has(s)) return false;
  }
  return null;
}
