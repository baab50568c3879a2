// What a kvctl subcommand is (the dispatcher in main.ts loads each one only when used).
export interface Command {
  /** One line for `kvctl --help`. */
  summary: string;
  /** Runs the command; returns the process exit code. */
  run(argv: string[]): Promise<number>;
}
