// The kvctl command dispatcher: each subcommand lives in its own file under commands/ and is
// loaded only when used, so `kvctl hash` never pays for NATS or ZMQ imports.
import type { Command } from "./command.js";

export type { Command } from "./command.js";

const commands: Record<string, () => Promise<{ command: Command }>> = {
  hash: () => import("./commands/hash.js"),
  patch: () => import("./commands/patch.js"),
  send: () => import("./commands/send.js"),
  listen: () => import("./commands/listen.js"),
  "testing-worker": () => import("./commands/testing-worker.js"),
  doctor: () => import("./commands/doctor.js"),
  bench: () => import("./commands/bench.js"),
  "verify-hashes": () => import("./commands/verify-hashes.js"),
  watch: () => import("./commands/watch.js"),
  demo: () => import("./commands/demo.js"),
  gateway: () => import("./commands/gateway.js"),
  sim: () => import("./commands/sim.js"),
};

async function help(): Promise<number> {
  const lines = ["usage: kvctl <command> [options]", "", "commands:"];
  for (const [name, load] of Object.entries(commands)) {
    const { command } = await load();
    lines.push(`  ${name.padEnd(16)}${command.summary}`);
  }
  lines.push("", "Run `kvctl <command> --help` for a command's options.");
  console.log(lines.join("\n"));
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") return help();
  const load = commands[name];
  if (!load) {
    console.error(`kvctl: unknown command '${name}' (try 'kvctl --help')`);
    return 2;
  }
  const { command } = await load();
  return command.run(rest);
}
