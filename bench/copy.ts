// `npm run bench:copy` (node --import tsx bench/copy.ts [kvctl bench copy options]): block copy
// throughput (contiguous vs scattered page lists vs one contiguous cudaMemcpy/memcpy) and session
// offload/restore time. Without CUDA it runs the CPU twin and says so. --json: last line JSON.
import { command } from "../src/cli/commands/bench.js";

process.exitCode = await command.run(["copy", ...process.argv.slice(2)]);
