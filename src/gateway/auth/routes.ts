// Which key a route needs. open: none (health and probes; /health shows worker URLs to the admin
// key only). client: a client key when any is configured (inference, the SDK pass-through routes,
// a session's own hints). admin: the admin key (/metrics, admin routes, anything not named here,
// so a route added later is closed until it is classed).
import { routeOfUrl } from "../request/routes.js";

export type RouteClass = "open" | "client" | "admin";

const OPEN = new Set(["/health", "/livez", "/readyz"]);
const CLIENT = new Set([
  "/v1/models",
  "/v1/messages/count_tokens",
  "/v1/embeddings",
  "/v1/rerank",
  "/v1/tokenize",
  "/v1/detokenize",
  "/v1/responses",
]);
const CLIENT_PREFIXES = ["/v1/models/", "/v1/responses/"];
const HINTS = /^\/kvctl\/v1\/sessions\/[^/]+\/events$/;

export function routeClass(url: string): RouteClass {
  const q = url.indexOf("?");
  const path = q < 0 ? url : url.slice(0, q);
  if (OPEN.has(path)) return "open";
  if (routeOfUrl(path) || CLIENT.has(path) || HINTS.test(path)) return "client";
  for (const p of CLIENT_PREFIXES) if (path.startsWith(p)) return "client";
  return "admin";
}
