// The four inference routes: their paths (the same on the gateway and on a worker) and the API
// flavor each speaks, which decides the shape of its error bodies.
import type { IncomingHttpHeaders } from "node:http";
import type { RouteKind } from "../../contract/observations.js";
import type { ApiFlavor } from "../core/errors.js";

export const ROUTE_PATHS: Readonly<Record<RouteKind, string>> = {
  chat: "/v1/chat/completions",
  completions: "/v1/completions",
  messages: "/v1/messages",
  generate: "/generate",
};

export const INFERENCE_ROUTES: ReadonlyMap<string, RouteKind> = new Map(
  Object.entries(ROUTE_PATHS).map(([route, path]) => [path, route as RouteKind]),
);

/** The inference route a request URL names (query string ignored), or undefined. */
export function routeOfUrl(url: string): RouteKind | undefined {
  const q = url.indexOf("?");
  return INFERENCE_ROUTES.get(q < 0 ? url : url.slice(0, q));
}

/** Anthropic's error shape for /v1/messages, OpenAI's for the other routes. */
export function flavorOf(route: RouteKind): ApiFlavor {
  return route === "messages" ? "anthropic" : "openai";
}

/** The flavor for any request the gateway answers: Anthropic's under /v1/messages and for any
 * request carrying anthropic-version (the Anthropic SDKs send it on every call, /v1/models too),
 * else OpenAI's. */
export function flavorOfRequest(url: string, headers: IncomingHttpHeaders): ApiFlavor {
  return url.startsWith(ROUTE_PATHS.messages) || headers["anthropic-version"] !== undefined
    ? "anthropic"
    : "openai";
}
