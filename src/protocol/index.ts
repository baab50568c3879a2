// Public API of the protocol layer: schemas, the int64-exact codec, envelopes, acks and subject
// names. Nothing here knows about NATS (src/control/ plugs the transport in).
export { INT64_MAX, INT64_MIN, isInt64, toInt64 } from "./int64.js";
export {
  JsonDuplicateKeyError,
  JsonSyntaxError,
  parseJson,
  stringifyInt64List,
  stringifyJson,
} from "./json.js";
export {
  ENVELOPE_VERSION,
  MAX_ID_LENGTH,
  MAX_LIST_ENTRIES,
  MAX_PREFETCH_DEADLINE_MS,
  MAX_TOKEN_IDS,
  MAX_TTL_SECONDS,
} from "./limits.js";
export { CommandValidationError, fieldPath, fromZodError } from "./errors.js";
export {
  CacheSchema,
  COMMAND_TYPES,
  CommandSchema,
  CommandTypeSchema,
  InspectSchema,
  PauseSchema,
  PruneSchema,
  RenewLeaseSchema,
  RevokeLeaseSchema,
  TargetTierSchema,
  ThinkSchema,
  ToolEndSchema,
  PrefetchSchema,
  ToolStartSchema,
  WarmSchema,
} from "./commands.js";
export type {
  Cache,
  Command,
  CommandType,
  Inspect,
  Pause,
  Prune,
  RenewLease,
  RevokeLease,
  Think,
  ToolEnd,
  Prefetch,
  ToolStart,
  Warm,
} from "./commands.js";
export {
  decodeBody,
  encodeEnvelope,
  EnvelopeSchema,
  makeEnvelope,
  validateCommand,
} from "./envelope.js";
export type { DecodedBody, Envelope } from "./envelope.js";
export {
  ACK_STATUSES,
  AckDecodeError,
  AckLeaseSchema,
  AckSchema,
  AckStatusSchema,
  blankAck,
  decodeAck,
  encodeAck,
  TiersSchema,
} from "./ack.js";
export type { Ack, AckLease, AckStatus } from "./ack.js";
export { isUuidv7, uuidv7, uuidv7Time } from "./uuidv7.js";
export {
  BROADCAST_NAME,
  broadcastSubject,
  checkSubjectPrefix,
  checkWorkerId,
  DEFAULT_SUBJECT_PREFIX,
  parseControlSubject,
  workerSubject,
} from "./subjects.js";
export { COMMAND_FIELDS, parseFieldText } from "./command-fields.js";
export type { FieldKind } from "./command-fields.js";
export { EXAMPLE_COMMANDS } from "./examples.js";
export { encodeAckBytes, encodeEnvelopeBytes } from "./json-bytes.js";
