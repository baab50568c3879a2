// The gateway's one source of time (ms): the system's, or a test's or the simulator's.
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
