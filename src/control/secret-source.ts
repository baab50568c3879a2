// A secret (NATS password or token) from where only its owner can read it: the environment or a
// file. The flag forms (--password, --token) still work but show in `ps` to every user of the
// machine, so using one prints a warning once.
import { readFileSync } from "node:fs";

const warned = new Set<string>();

/** Warns once per flag that its value is visible in the process list. */
export function warnSecretFlag(
  flag: string,
  envName: string,
  log: (line: string) => void = (l) => process.stderr.write(`${l}\n`),
): void {
  if (warned.has(flag)) return;
  warned.add(flag);
  log(
    `warning: --${flag} on the command line shows in ps to every user of this machine; use $${envName} or --${flag}-file instead`,
  );
}

/** The first line of a secret file; throws naming the field when it cannot be read or is empty. */
export function secretFromFile(path: string, field: string): string {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new Error(`${field}: cannot read ${path}: ${(e as Error).message}`);
  }
  const first = text.split(/\r?\n/)[0] ?? "";
  if (first === "") throw new Error(`${field}: ${path} is empty`);
  return first;
}

/** The value (flag or config), else the environment, else the file. */
export function secretOf(
  value: string | undefined,
  env: string | undefined,
  file: string | undefined,
  fileField: string,
): string | undefined {
  if (value !== undefined) return value;
  if (env !== undefined && env !== "") return env;
  return file ? secretFromFile(file, fileField) : undefined;
}
