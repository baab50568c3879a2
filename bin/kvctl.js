#!/usr/bin/env -S node --max-semi-space-size=64
// The CLI is compiled to dist/ by `npm install` (prepare); this shim only runs it.
// A gateway allocates a little for every request it relays: with young-generation semi-spaces
// of up to 64 MiB (node 20 stops at 16 by default) most of it dies before a scavenge, which then
// has less to copy. V8 grows them only under allocation, so the other commands keep a small heap.
import "../dist/cli/bin.js";
