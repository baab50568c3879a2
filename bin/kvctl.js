#!/usr/bin/env node
// The CLI is compiled to dist/ by `npm install` (prepare); this shim only runs it.
import "../dist/cli/bin.js";
