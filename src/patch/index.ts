// Programmatic API of the SGLang patch kit (`kvctl patch ...`). See README.md for the series format.
export { applySeries, type ApplyOptions, type ApplyResult } from "./apply.js";
export { revertSeries, type RevertOptions, type RevertResult } from "./revert.js";
export { checkSeries, type CheckResult, type CheckPatch } from "./check.js";
export {
  seriesStatus,
  placedDrift,
  type StatusOptions,
  type StatusResult,
  type PlacedEntry,
} from "./status.js";
export { locateSglang, type SglangTree } from "./locate.js";
export {
  interpreterSglang,
  probeSglang,
  type InterpreterCheck,
  type SglangProbe,
} from "./python.js";
export { loadSeries, listSeries, placedFiles, type Series } from "./series.js";
export { parsePatch, type ParsedPatch, type FileDiff, type Hunk } from "./diff.js";
export { applyFileDiff } from "./hunks.js";
export { readState, STATE_FILE, BACKUP_DIR, type PatchState } from "./state.js";
export { PatchError, exitCodeFor, type PatchErrorCode } from "./errors.js";
export type { CommonOptions } from "./context.js";
