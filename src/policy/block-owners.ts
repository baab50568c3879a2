// Which blocks more than one session has stood on. A session that ends leaves a branch only it
// used (its own turns and answers) below a prefix it shares with others (system prompt, tool
// schemas, a forked history); only the branch is dead with it. Bounded: the blocks seen least
// recently are forgotten first, and a forgotten shared block reads as private, so the bound is
// set well above the working sets a replica routes.
const SHARED: unique symbol = Symbol("shared");

export class BlockOwners {
  /** Block -> the one session seen on it, or SHARED; in order of last sight. */
  private readonly owner = new Map<bigint, string | typeof SHARED>();

  constructor(private readonly cap: number) {}

  /** A session's chain as its last turn left it. */
  see(session: string, chain: readonly bigint[]): void {
    for (const h of chain) {
      const o = this.owner.get(h);
      if (o !== undefined) this.owner.delete(h);
      this.owner.set(h, o === undefined || o === session ? session : SHARED);
    }
    while (this.owner.size > this.cap) this.owner.delete(this.owner.keys().next().value as bigint);
  }

  /** How many blocks from the chain's start some other session has stood on too. */
  sharedPrefix(chain: readonly bigint[]): number {
    let i = 0;
    while (i < chain.length && this.owner.get(chain[i]) === SHARED) i++;
    return i;
  }
}
