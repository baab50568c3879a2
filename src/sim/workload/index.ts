// kvctl sim's workloads: the programs a run replays, and the one mapping of their segments to
// token ids.
export { generateWorkload, type GapScale, type GenerateOptions } from "./generated.js";
export { GENERATE_DEFAULTS } from "./options.js";
export { AGENT_SHAPE, FLOOD_SHAPE, REFERENCE_CONTEXT } from "./shape.js";
export {
  checkSegment,
  fillSegment,
  MAX_VOCAB,
  materialize,
  segmentsLength,
  tokenOf,
} from "./tokens.js";
export { type WorkingSet, workingSet } from "./working-set.js";
export { TraceError } from "./trace/format.js";
export { type ReadTraceOptions, readTrace, readTraceFile } from "./trace/read.js";
export {
  DEFAULT_TRACE_BLOCK_SIZE,
  traceLines,
  type WriteTraceOptions,
  writeTrace,
  writeTraceFile,
} from "./trace/write.js";
export {
  type AgentFamilyOptions,
  agentFamilyWorkload,
  DEFAULT_CHARS_PER_TOKEN,
  type PlannedAgentSession,
} from "./agent-families.js";
export {
  parseRecordedRun,
  type RecordedOptions,
  type RecordedRequest,
  readRecordedRun,
  recordedWorkload,
} from "./recorded.js";
