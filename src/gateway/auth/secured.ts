// Keys, worker credentials and TLS files are read when the gateway starts: a bad one is a config
// error naming its field, like any other bad field of the configuration.
import type { SecureContextOptions } from "node:tls";
import { GatewayConfigError } from "../config/load.js";
import type { AuthConfig } from "./config.js";
import { AuthConfigError, type ResolvedAuth, resolveAuth } from "./table.js";
import { loadTls, type TlsConfig, TlsConfigError } from "./tls.js";
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

/** The auth section's keys and tenants, and the listener's certificate and key (listen.tls), read. */
export function readSecured(
  authConfig: AuthConfig | undefined,
  tlsConfig: TlsConfig | undefined,
): { auth: ResolvedAuth | null; tls: SecureContextOptions | null } {
  const auth = secured(() => (authConfig ? resolveAuth(authConfig) : null));
  const tls = secured(() => (tlsConfig ? loadTls(tlsConfig) : null));
  return { auth, tls };
}
