// A worker's credentials on every call the gateway makes to it: SGLang's --api-key as
// `Authorization: Bearer`, its --admin-api-key instead on the worker's kvctl routes. The pool
// sets them on each dispatch, so no call (server_info, tokenize, loads, health, inference,
// pass-through) can leave without them. The client's own Authorization / x-api-key never reaches
// the worker once the gateway holds the worker's key or checks client keys itself: the client's
// key is the gateway's business, and passing it on would hand it to every worker.
import { Pool } from "undici";
import type { Dispatcher } from "undici";
import { readSecret, SecretError } from "./keys.js";

export interface WorkerCredentials {
  apiKey: string | null;
  adminApiKey: string | null;
  /** Drop the client's Authorization and x-api-key. */
  stripClientKey: boolean;
}

interface CredentialFields {
  id: string;
  apiKey?: string;
  apiKeyFile?: string;
  apiKeyEnv?: string;
  adminApiKey?: string;
  adminApiKeyFile?: string;
  adminApiKeyEnv?: string;
}

export class CredentialError extends Error {
  override name = "CredentialError";
}

/** Reads one worker's keys (the value in the file, else its env variable, else its secret file); errors name `workers[<id>].<field>`. */
export function resolveWorkerCredentials(
  w: CredentialFields,
  gatewayAuth: boolean,
  env: NodeJS.ProcessEnv = process.env,
): WorkerCredentials {
  const field = `workers[${w.id}]`;
  const one = (
    value: string | undefined,
    envName: string | undefined,
    file: string | undefined,
    name: string,
  ): string | null => {
    let v: string | undefined;
    try {
      v = value ?? readSecret(env, envName, file, `${field}.${name}`);
    } catch (e) {
      if (e instanceof SecretError) throw new CredentialError(e.message);
      throw e;
    }
    if (envName && v === undefined && !file)
      throw new CredentialError(`${field}.${name}Env: environment variable ${envName} is not set`);
    if (v !== undefined && /[^\x21-\x7e]/.test(v))
      throw new CredentialError(
        `${field}.${name}: the key holds a control character, a space or a non-ASCII character`,
      );
    return v ?? null;
  };
  const apiKey = one(w.apiKey, w.apiKeyEnv, w.apiKeyFile, "apiKey");
  const adminApiKey = one(w.adminApiKey, w.adminApiKeyEnv, w.adminApiKeyFile, "adminApiKey");
  return {
    apiKey,
    adminApiKey,
    stripClientKey: gatewayAuth || apiKey !== null || adminApiKey !== null,
  };
}

const KVCTL_WORKER_ROUTE = /^\/(hicache|session)\//;

/** The client's own key (a lower-case header name), never sent on where the gateway holds the worker's. */
export const isClientKey = (name: string) => name === "authorization" || name === "x-api-key";

/** h with lower-case names, the client's key left out (built without it: no delete on the copy). */
function withoutClientKey(
  h: Dispatcher.DispatchOptions["headers"],
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  if (!h) return out;
  if (Array.isArray(h)) {
    for (let i = 0; i + 1 < h.length; i += 2) {
      const k = String(h[i]).toLowerCase();
      if (!isClientKey(k)) out[k] = h[i + 1] as string;
    }
    return out;
  }
  const obj = h as Record<string, string | string[] | undefined>;
  for (const name in obj) {
    const v = obj[name];
    const k = name.toLowerCase();
    if (v !== undefined && !isClientKey(k)) out[k] = v;
  }
  return out;
}

/** The Authorization a call to `path` carries: the admin key on the worker's kvctl routes. */
function bearerFor(c: WorkerCredentials, path: string): string | null {
  const key = KVCTL_WORKER_ROUTE.test(path) ? (c.adminApiKey ?? c.apiKey) : c.apiKey;
  return key === null ? null : `Bearer ${key}`;
}

/** The headers a call goes out with: the client's key dropped, the worker's key set. */
export function withCredentials(
  c: WorkerCredentials,
  path: string,
  h: Dispatcher.DispatchOptions["headers"],
): Dispatcher.DispatchOptions["headers"] {
  if (!c.stripClientKey) return h;
  const out = withoutClientKey(h);
  const bearer = bearerFor(c, path);
  if (bearer !== null) out.authorization = bearer;
  return out;
}

/** Marks headers a pool has already set its credentials on (a symbol: header iteration skips it). */
const SIGNED = Symbol("kvctl.workerCredentials");
type Signed = Record<string, string> & { [SIGNED]?: CredentialPool };

/** A pool whose every dispatch carries the worker's credentials. */
export class CredentialPool extends Pool {
  /** Authorization on the inference routes, set once (the request path builds no string for it). */
  private readonly inferenceBearer: string | null;

  constructor(
    url: string,
    options: Pool.Options,
    private readonly credentials: WorkerCredentials,
  ) {
    super(url, options);
    this.inferenceBearer = bearerFor(credentials, "/v1/chat/completions");
  }

  /**
   * Sets the worker's key on headers an inference call built itself (lower-case names, the
   * client's key already left out: isClientKey), so dispatch sends them without another copy.
   */
  signInference(out: Record<string, string>): Record<string, string> {
    if (this.inferenceBearer !== null) out.authorization = this.inferenceBearer;
    (out as Signed)[SIGNED] = this;
    return out;
  }

  override dispatch(
    options: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
  ): boolean {
    if ((options.headers as Signed | undefined)?.[SIGNED] === this)
      return super.dispatch(options, handler);
    return super.dispatch(
      { ...options, headers: withCredentials(this.credentials, options.path, options.headers) },
      handler,
    );
  }
}
