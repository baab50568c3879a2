// Process entry for the CLI (bin/kvctl.js runs the compiled copy; `npm run kvctl --` runs this
// source directly through tsx, which is what tests use so they never see a stale dist/).
import { main } from "./main.js";

main(process.argv.slice(2)).then(
  (code) => process.exit(code ?? 0),
  (err) => {
    console.error(`kvctl: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
