// One gateway replica in its own process (so a test can SIGKILL it): argv[2] is its config as
// JSON; it runs the scripted holds policy and prints {"url": ...} once it listens.
import { createGateway } from "../../src/gateway/index.js";
import { holdsPolicy } from "./holds-policy.js";

const g = await createGateway({
  config: JSON.parse(process.argv[2] as string),
  policy: holdsPolicy(),
  log: (l) => process.stderr.write(`${l}\n`),
});
process.stdout.write(`${JSON.stringify({ url: g.url })}\n`);
process.on("SIGTERM", () => void g.close().then(() => process.exit(0)));
