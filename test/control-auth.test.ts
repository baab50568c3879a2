// The control subjects are privileged: the NATS auth options must reach the server. Real servers
// with user/password, token, nkey and TLS; each is refused without its credentials.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nkeys } from "@nats-io/transport-node";
import { afterAll, describe, expect, it } from "vitest";
import {
  type ControlConnectOptions,
  connectControlPlane,
  ControlPublisher,
  natsOptions,
} from "../src/control/index.js";
import { ReferenceResponder } from "../src/testing/index.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";

const dir = mkdtempSync(join(tmpdir(), "kvctl-auth-"));
const servers: NatsServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function roundTrip(opts: ControlConnectOptions): Promise<string> {
  const nc = await connectControlPlane({ ...opts, maxReconnectAttempts: 0 });
  try {
    const r = await ReferenceResponder.start(nc, { workerId: "auth0", log: () => {} });
    const ack = await new ControlPublisher(nc).send("auth0", { type: "Inspect" });
    r.stop();
    return ack.status;
  } finally {
    await nc.close();
  }
}

async function refused(opts: ControlConnectOptions): Promise<boolean> {
  try {
    const nc = await connectControlPlane({ ...opts, maxReconnectAttempts: 0, timeoutMs: 3000 });
    await nc.close();
    return false;
  } catch {
    return true;
  }
}

describe("NATS auth options reach the server", () => {
  it("user/password", async () => {
    const s = await startNatsServer(["--user", "router", "--pass", "s3cret"]);
    servers.push(s);
    expect(await roundTrip({ servers: s.url, user: "router", pass: "s3cret" })).toBe("applied");
    expect(await refused({ servers: s.url, user: "router", pass: "wrong" })).toBe(true);
  });

  it("token", async () => {
    const s = await startNatsServer(["--auth", "tok-123"]);
    servers.push(s);
    expect(await roundTrip({ servers: s.url, token: "tok-123" })).toBe("applied");
    expect(await refused({ servers: s.url })).toBe(true);
  });

  it("nkey seed file", async () => {
    const user = nkeys.createUser();
    const seedFile = join(dir, "user.nk");
    writeFileSync(seedFile, new TextDecoder().decode(user.getSeed()));
    const conf = join(dir, "nkey.conf");
    writeFileSync(conf, `authorization { users = [ { nkey: ${user.getPublicKey()} } ] }\n`);
    const s = await startNatsServer(["-c", conf]);
    servers.push(s);
    expect(await roundTrip({ servers: s.url, nkeySeedFile: seedFile })).toBe("applied");
    expect(await refused({ servers: s.url })).toBe(true);
  });

  it.skipIf(spawnSync("openssl", ["version"]).status !== 0)("TLS with a CA file", async () => {
    const cert = join(dir, "server.pem");
    const key = join(dir, "server.key");
    const r = spawnSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout",
        key,
        "-out",
        cert,
      ],
      { encoding: "utf8" },
    );
    expect(r.status, r.stderr).toBe(0);
    const s = await startNatsServer(["--tls", "--tlscert", cert, "--tlskey", key]);
    servers.push(s);
    expect(await roundTrip({ servers: s.url, tls: { caFile: cert } })).toBe("applied");
    // Without the CA the self-signed certificate is not trusted.
    expect(await refused({ servers: s.url, tls: {} })).toBe(true);
  });

  it("maps creds, nkey and TLS flags onto nats.js options", () => {
    const user = nkeys.createUser();
    const o = natsOptions({
      servers: ["nats://a:4222", "nats://b:4222"],
      nkeySeed: new TextDecoder().decode(user.getSeed()),
      tls: { caFile: "/ca", certFile: "/c", keyFile: "/k", handshakeFirst: true },
    });
    expect(o.servers).toEqual(["nats://a:4222", "nats://b:4222"]);
    expect(Array.isArray(o.authenticator) && o.authenticator.length).toBe(1);
    expect(o.tls).toEqual({ caFile: "/ca", certFile: "/c", keyFile: "/k", handshakeFirst: true });
    expect(o.noAsyncTraces).toBe(true);
  });
});
