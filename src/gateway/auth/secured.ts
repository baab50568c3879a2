// Keys, worker credentials and TLS files are read when the gateway starts: a bad one is a config
// error naming its field, like any other bad field of the configuration.
import type { SecureContextOptions } from "node:tls";
import { GatewayConfigError } from "../config/load.js";
import type { GatewayConfig } from "../config/schema.js";
import { AuthConfigError, type ResolvedAuth, resolveAuth } from "./table.js";
import { loadTls, TlsConfigError } from "./tls.js";
import { CredentialError } from "./upstream-credentials.js";

/** What `read` returns; its key, credential or TLS error thrown as a GatewayConfigError. */
export function secured<T>(read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof AuthConfigError || e instanceof TlsConfigError || e instanceof CredentialError)
      throw new GatewayConfigError(`gateway config is invalid:\n  ${e.message}`);
    throw e;
  }
}

/** The auth section's keys and tenants, and the listener's certificate and key, read. */
export function readSecured(config: GatewayConfig): {
  auth: ResolvedAuth | null;
  tls: SecureContextOptions | null;
} {
  const auth = secured(() => (config.auth ? resolveAuth(config.auth) : null));
  const tlsConfig = config.listen.tls;
  const tls = secured(() => (tlsConfig ? loadTls(tlsConfig) : null));
  return { auth, tls };
}
