// Subject names (docs/protocol.md "Transport and subjects"): `{prefix}-{worker_id}` and `{prefix}-broadcast`.
// Only the prefix is configurable.

export const DEFAULT_SUBJECT_PREFIX = "kv-control";
export const BROADCAST_NAME = "broadcast";

// One NATS token, no wildcards: a worker id with `.`, `*`, `>` or spaces would change which
// subscriptions match, which on a privileged subject is not something to allow by accident.
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
const PREFIX = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

export function checkWorkerId(workerId: string): string {
  if (!TOKEN.test(workerId))
    throw new Error(
      `invalid worker id ${JSON.stringify(workerId)}: use 1-128 characters from A-Z a-z 0-9 _ -`,
    );
  if (workerId === BROADCAST_NAME)
    throw new Error(`'${BROADCAST_NAME}' is reserved for the broadcast subject`);
  return workerId;
}

export function checkSubjectPrefix(prefix: string): string {
  if (!PREFIX.test(prefix)) throw new Error(`invalid subject prefix ${JSON.stringify(prefix)}`);
  return prefix;
}

export function workerSubject(workerId: string, prefix: string = DEFAULT_SUBJECT_PREFIX): string {
  return `${checkSubjectPrefix(prefix)}-${checkWorkerId(workerId)}`;
}

export function broadcastSubject(prefix: string = DEFAULT_SUBJECT_PREFIX): string {
  return `${checkSubjectPrefix(prefix)}-${BROADCAST_NAME}`;
}

/** What a control subject addresses: a worker, the broadcast, or nothing of ours. */
export function parseControlSubject(
  subject: string,
  prefix: string = DEFAULT_SUBJECT_PREFIX,
): { broadcast: true } | { workerId: string } | null {
  const head = `${prefix}-`;
  if (!subject.startsWith(head)) return null;
  const rest = subject.slice(head.length);
  if (rest === BROADCAST_NAME) return { broadcast: true };
  return TOKEN.test(rest) ? { workerId: rest } : null;
}
