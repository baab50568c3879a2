export * from "./types.js";
export { decodeBatch, decodeSeq, encodeSeq, BatchDecodeError, END_SEQ } from "./decode.js";
export { encodeBatch } from "./encode.js";
export { SeqTracker } from "./seq.js";
export type { SeqVerdict } from "./seq.js";
export { KvEventConsumer } from "./consumer.js";
export type { ConsumerOptions, ConsumerMetrics, EventSink } from "./consumer.js";
export { KvEventPublisher } from "./publisher.js";
export type { PublisherOptions, StoreArgs } from "./publisher.js";
