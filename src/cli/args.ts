// The prologue every kvctl subcommand shares: its flags parsed (strictly: an unknown flag is an
// error), `--help` answered, and a bad flag reported on stderr under the command's name, exit 2.
import { type ParseArgsConfig, parseArgs } from "node:util";

type ParseArgsOptionsConfig = NonNullable<ParseArgsConfig["options"]>;

export interface ArgSpec<O extends ParseArgsOptionsConfig> {
  /** How error lines begin ("kvctl hash"). */
  name: string;
  options: O;
  help: string;
  /** Whether the command takes positional arguments. */
  positionals?: boolean;
  /** After a flag error, the help too: on the next line ("line") or after a blank one ("blank"). */
  helpOnError?: "line" | "blank";
  /** Rewrites argv before parsing (e.g. joins negative numbers to their flags). */
  prepare?: (argv: string[]) => string[];
}

export type Parsed<O extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; allowPositionals: boolean; strict: true }>
>;

/** The flag values of a command with these options. */
export type ArgValues<O extends ParseArgsOptionsConfig> = Parsed<O>["values"];

/** A command's flags and positionals, or the exit code when the command ends here (help: 0, bad flags: 2). */
export function commandArgs<O extends ParseArgsOptionsConfig>(
  argv: string[],
  spec: ArgSpec<O>,
): Parsed<O> | number {
  let parsed: Parsed<O>;
  try {
    parsed = parseArgs({
      args: spec.prepare ? spec.prepare(argv) : argv,
      options: spec.options,
      allowPositionals: spec.positionals ?? false,
      strict: true,
    });
  } catch (e) {
    const help =
      spec.helpOnError === "line"
        ? `\n${spec.help}`
        : spec.helpOnError === "blank"
          ? `\n\n${spec.help}`
          : "";
    console.error(`${spec.name}: ${e instanceof Error ? e.message : String(e)}${help}`);
    return 2;
  }
  if ((parsed.values as { help?: boolean }).help) {
    console.log(spec.help);
    return 0;
  }
  return parsed;
}

/** Prints a usage error under the command's name; returns exit code 2. */
export function usageError(name: string, message: string): number {
  console.error(`${name}: ${message}`);
  return 2;
}
