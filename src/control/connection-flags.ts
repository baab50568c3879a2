// The NATS connection flags every control-plane CLI command shares (--nats-url and auth), turned
// into ControlConnectOptions. Secrets may come from the environment instead of argv (argv is
// visible to every user of the machine through ps).
import type { ControlConnectOptions } from "./connection.js";
import { secretOf, warnSecretFlag } from "./secret-source.js";

export const NATS_FLAGS = {
  "nats-url": { type: "string" },
  user: { type: "string" },
  password: { type: "string" },
  token: { type: "string" },
  "password-file": { type: "string" },
  "token-file": { type: "string" },
  "nkey-seed-file": { type: "string" },
  creds: { type: "string" },
  "tls-ca": { type: "string" },
  "tls-cert": { type: "string" },
  "tls-key": { type: "string" },
  "tls-handshake-first": { type: "boolean" },
  "subject-prefix": { type: "string" },
  "inbox-prefix": { type: "string" },
} as const;

export const NATS_FLAGS_HELP = `NATS connection:
  --nats-url URL           server(s), comma-separated (default $KVCTL_NATS_URL or nats://127.0.0.1:4222)
  --user U                 user/password auth ($NATS_USER); the password from $NATS_PASSWORD
                           or --password-file F (--password P works but shows in ps: warned)
  --token-file F           token auth (or $NATS_TOKEN; --token T works but shows in ps: warned)
  --nkey-seed-file F       nkey auth from a seed file
  --creds F                JWT .creds file
  --tls-ca F --tls-cert F --tls-key F [--tls-handshake-first]
  --subject-prefix P       control subject prefix (default kv-control)
  --inbox-prefix P         reply inbox prefix, for accounts that restrict _INBOX (default _INBOX)`;

type FlagValues = {
  [K in keyof typeof NATS_FLAGS]?: (typeof NATS_FLAGS)[K]["type"] extends "boolean"
    ? boolean
    : string;
};

export function connectOptionsFromFlags(v: FlagValues, name: string): ControlConnectOptions {
  const env = process.env;
  const url = v["nats-url"] ?? env.KVCTL_NATS_URL ?? "nats://127.0.0.1:4222";
  const o: ControlConnectOptions = { servers: url.split(",").map((s) => s.trim()), name };
  const user = v.user ?? env.NATS_USER;
  if (v.password !== undefined) warnSecretFlag("password", "NATS_PASSWORD");
  if (v.token !== undefined) warnSecretFlag("token", "NATS_TOKEN");
  const pass = secretOf(v.password, env.NATS_PASSWORD, v["password-file"], "--password-file");
  const token = secretOf(v.token, env.NATS_TOKEN, v["token-file"], "--token-file");
  if (user !== undefined) o.user = user;
  if (pass !== undefined) o.pass = pass;
  if (token !== undefined) o.token = token;
  if (v["nkey-seed-file"]) o.nkeySeedFile = v["nkey-seed-file"];
  if (v.creds) o.credsFile = v.creds;
  if (v["inbox-prefix"]) o.inboxPrefix = v["inbox-prefix"];
  if (v["tls-ca"] || v["tls-cert"] || v["tls-key"] || v["tls-handshake-first"]) {
    o.tls = {};
    if (v["tls-ca"]) o.tls.caFile = v["tls-ca"];
    if (v["tls-cert"]) o.tls.certFile = v["tls-cert"];
    if (v["tls-key"]) o.tls.keyFile = v["tls-key"];
    if (v["tls-handshake-first"]) o.tls.handshakeFirst = true;
  }
  return o;
}

/** `--flag -5` -> `--flag=-5` for string flags, so negative hashes need no `=`. */
export function joinNegativeValues(argv: string[], stringFlags: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    if (
      a.startsWith("--") &&
      !a.includes("=") &&
      stringFlags.has(a.slice(2)) &&
      next !== undefined &&
      /^-\d/.test(next)
    ) {
      out.push(`${a}=${next}`);
      i++;
    } else out.push(a);
  }
  return out;
}
