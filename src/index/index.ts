export * from "./types.js";
export { InMemoryKvIndex } from "./memory.js";
export type { InMemoryIndexOptions, TokenHasher } from "./memory.js";
export { InstrumentedKvIndex } from "./instrumented.js";
export type { IndexMetrics } from "./instrumented.js";
export { indexSink } from "./sink.js";
export * from "./scoring.js";
export { sglangTokenHasher } from "./hasher.js";
