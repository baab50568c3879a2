// `npm run bench:copy` (node --import tsx bench/copy.ts [kvctl bench copy options]): block copy
// throughput (contiguous vs scattered page lists vs one contiguous cudaMemcpy/memcpy) and session
// offload/restore time. Without CUDA it runs the CPU twin and says so. --json: last line JSON.
// --smoke: a 512-token session, one iteration (the test that the bench still runs); options given
// after it still apply.
import { command } from "../src/cli/commands/bench.js";

const argv = process.argv.slice(2);
const smoke = argv.includes("--smoke") ? ["--tokens", "512", "--iters", "1"] : [];
process.exitCode = await command.run(["copy", ...smoke, ...argv.filter((a) => a !== "--smoke")]);
