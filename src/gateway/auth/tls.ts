// TLS on the gateway's listener: a certificate chain and its key from PEM files, read and checked
// at start (a file that does not parse is an error naming its field, and the gateway does not
// start) and again on reload (SIGHUP): a reload that fails leaves the listener on the files it
// had, and says why.
import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { createSecureContext, type SecureContextOptions } from "node:tls";
import { z } from "zod";

export const tlsConfigSchema = z.strictObject({
  /** PEM certificate chain (the server's certificate first). */
  cert: z.string().min(1),
  /** PEM private key of that certificate. */
  key: z.string().min(1),
});

export type TlsConfig = z.output<typeof tlsConfigSchema>;

export class TlsConfigError extends Error {
  override name = "TlsConfigError";
}

function readPem(path: string, field: string): Buffer {
  try {
    return readFileSync(path);
  } catch (e) {
    throw new TlsConfigError(`${field}: cannot read ${path}: ${(e as Error).message}`);
  }
}

/** The listener's key and certificate, checked: each file parses and the key is the certificate's. */
export function loadTls(c: TlsConfig): SecureContextOptions {
  const cert = readPem(c.cert, "listen.tls.cert");
  const key = readPem(c.key, "listen.tls.key");
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (e) {
    throw new TlsConfigError(
      `listen.tls.cert: ${c.cert} is not a PEM certificate: ${(e as Error).message}`,
    );
  }
  let pk: ReturnType<typeof createPrivateKey>;
  try {
    pk = createPrivateKey(key);
  } catch (e) {
    throw new TlsConfigError(
      `listen.tls.key: ${c.key} is not a PEM private key: ${(e as Error).message}`,
    );
  }
  if (!x509.checkPrivateKey(pk))
    throw new TlsConfigError(
      `listen.tls.key: ${c.key} is not the key of the certificate in ${c.cert}`,
    );
  const options = { cert, key };
  createSecureContext(options);
  return options;
}
