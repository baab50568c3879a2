// Where the kvctl package lives (the series and python/ sources are resolved from here, never
// from the current directory) and its version (recorded in the state file).
import { join } from "node:path";
import { packageRoot, packageVersion } from "../paths.js";

/** The kvctl package root (contains package.json, patches/, python/). */
export const kvctlRoot = (): string => packageRoot;
export const kvctlVersion = (): string => packageVersion;
/** Default directory holding the sglang-<version>/ series directories. */
export const defaultPatchesDir = (): string => join(kvctlRoot(), "patches");
