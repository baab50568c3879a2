// Bounds from commands.md ("Errors on bad input"). One place, so the worker-side rendering in
// Python can copy the same numbers.

/** Longest list of hashes (or storage keys) one command may carry. */
export const MAX_LIST_ENTRIES = 65_536;
/** Longest token list a Warm may carry: 65 536 pages of up to 64 tokens. */
export const MAX_TOKEN_IDS = 65_536 * 64;
/** A TTL past this is a typo or a wedge, not a lease (pins are bounded leases, never a wedge). */
export const MAX_TTL_SECONDS = 30 * 24 * 3600;
/** Longest idempotency id, lease id, session id or worker id we accept. */
export const MAX_ID_LENGTH = 128;
/** Envelope versions this side speaks. */
export const ENVELOPE_VERSION = 1;
