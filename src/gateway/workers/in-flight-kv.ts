// The device KV the prompts in flight on a worker hold, as the worker's radix cache holds it: a
// block shared by several of them (a tenant's system prompt, a session's earlier turns) is held
// once, locked by each. A call counts its prompt in when it takes its place on the worker and out
// when it gives it back (turn/worker-call.ts; the sim's front does the same), and the router reads
// what a turn would add beside them (router.ts, cannotTakeNow). One object for both, so `kvctl
// gateway` and kvctl sim size a worker's load the same way.
import type { InFlightKvCounter } from "./router.js";

/** How many recent answers the expected answer length follows. */
const ANSWER_WINDOW = 32;

export class InFlightKv implements InFlightKvCounter {
  /** Calls in flight holding each block. */
  private readonly held = new Map<bigint, number>();
  /** Tokens outside the blocks counted: partial last pages, prompts without hashes. */
  private loose = 0;
  /** Tokens of the blocks counted (a page each, at the page size they were counted in with). */
  private blockTokens = 0;
  promptTokens = 0;
  /** The answers' KV reserved for the calls in flight, each at the length expected when it entered. */
  private reserved = 0;
  /** The mean length of the answers that ended here lately (tokens). */
  private answerMean = 0;
  private answers = 0;

  /**
   * An answer ended here with this many tokens. The device holds each answer's KV beside its
   * prompt until it ends, and the worker reserves it when it admits a request; its length is
   * not known until then, so a call in flight and a turn are each expected to add an answer as
   * long as the recent ones.
   */
  answered(tokens: number): void {
    this.answers++;
    this.answerMean += (tokens - this.answerMean) / Math.min(this.answers, ANSWER_WINDOW);
  }

  /** The answer tokens a call is expected to add. */
  get expectedAnswer(): number {
    return Math.round(this.answerMean);
  }

  enter(blocks: ArrayLike<bigint> | null, tokens: number, pageSize: number): () => void {
    const n = blocks?.length ?? 0;
    const loose = Math.max(0, tokens - n * pageSize);
    const answer = this.expectedAnswer;
    this.reserved += answer;
    this.promptTokens += tokens;
    this.loose += loose;
    for (let i = 0; i < n; i++) {
      const b = (blocks as ArrayLike<bigint>)[i];
      const c = this.held.get(b) ?? 0;
      if (c === 0) this.blockTokens += pageSize;
      this.held.set(b, c + 1);
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.promptTokens -= tokens;
      this.reserved -= answer;
      this.loose -= loose;
      for (let i = 0; i < n; i++) {
        const b = (blocks as ArrayLike<bigint>)[i];
        const c = this.held.get(b) ?? 0;
        if (c > 1) this.held.set(b, c - 1);
        else {
          this.held.delete(b);
          this.blockTokens -= pageSize;
        }
      }
    };
  }

  tokensWith(blocks: ArrayLike<bigint> | null, tokens: number, pageSize: number): number {
    const n = blocks?.length ?? 0;
    let added = Math.max(0, tokens - n * pageSize);
    for (let i = 0; i < n; i++)
      if (!this.held.has((blocks as ArrayLike<bigint>)[i])) added += pageSize;
    return this.blockTokens + this.loose + this.reserved + added + this.expectedAnswer;
  }

  /** Distinct blocks in flight (for tests and logs). */
  get blocks(): number {
    return this.held.size;
  }
}
