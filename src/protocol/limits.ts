// Bounds from docs/protocol.md ("Bad input"), in one place. The zod schemas carry them into
// docs/protocol.schema.json, from which the Python codec's copies are generated (wire_tables.py).

/** Longest list of hashes (or storage keys) one command may carry. */
export const MAX_LIST_ENTRIES = 65_536;
/** Longest token list a Warm may carry: 65 536 pages of up to 64 tokens. */
export const MAX_TOKEN_IDS = 65_536 * 64;
/** A TTL past this is a typo or a wedge, not a lease (pins are bounded leases, never a wedge). */
export const MAX_TTL_SECONDS = 30 * 24 * 3600;
/** Longest a Prefetch may ask the worker to wait for its loads: past it the caller admits anyway. */
export const MAX_PREFETCH_DEADLINE_MS = 60_000;
/** Longest idempotency id, lease id, session id or worker id we accept. */
export const MAX_ID_LENGTH = 128;
/** Envelope versions this side speaks. */
export const ENVELOPE_VERSION = 1;
