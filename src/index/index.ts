export * from "./types.js";
export { InMemoryKvIndex } from "./native.js";
export type { IndexOptions } from "./native.js";
export { InstrumentedKvIndex } from "./instrumented.js";
export type { IndexMetrics } from "./instrumented.js";
export { indexSink } from "./sink.js";
export { applyEvent } from "./apply-event.js";
export * from "./scoring.js";
