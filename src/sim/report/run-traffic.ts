// What a run moved and said: bytes per link between the tiers, and the commands each
// configuration sent with how the workers answered them.
import { ACK_STATUSES } from "../../protocol/ack.js";
import { COMMAND_TYPES } from "../../protocol/index.js";
import type { SimConfigResult, SimRunResult } from "../types.js";
import { barOption, HEIGHT, WIDTH } from "./charts.js";
import { byteUnit, count, fixed } from "./format.js";
import { type Figure, profileLine } from "./page.js";
import { resultOf } from "./regimes.js";
import type { SeriesStyle } from "./style.js";
import { renderSvg } from "./svg.js";

const LINKS = ["h2d", "d2h", "storage_read", "storage_write"];

/** Names in `order` that occur in `found`, then the rest of `found` in its own order. */
function ordered(order: readonly string[], found: Iterable<string>): string[] {
  const all = [...new Set(found)];
  return [...order.filter((n) => all.includes(n)), ...all.filter((n) => !order.includes(n))];
}

function present(run: SimRunResult, styles: SeriesStyle[]) {
  return styles.flatMap((style) => {
    const result = resultOf(run, style.name);
    return result ? [{ style, result }] : [];
  });
}

export function bytesFigure(run: SimRunResult, key: string, styles: SeriesStyle[]): Figure {
  const id = `${key}-bytes`;
  const title = "Bytes moved per link";
  const ran = present(run, styles);
  const links = ordered(
    LINKS,
    ran.flatMap(({ result }) => Object.keys(result.bytes_moved)),
  );
  const max = Math.max(0, ...ran.flatMap(({ result }) => Object.values(result.bytes_moved)));
  const { unit, divisor } = byteUnit(max);
  const option = barOption(
    { title, subtitle: profileLine(run.profile), xName: "link", yName: unit },
    links,
    ran.map(({ style, result }) => ({
      style,
      values: links.map((l) => (result.bytes_moved[l] ?? 0) / divisor),
    })),
  );
  return {
    id,
    svg: renderSvg({ id, title, width: WIDTH, height: HEIGHT, option }),
    table: {
      caption: `Bytes moved per link (${unit})`,
      head: ["configuration", ...links],
      rows: ran.map(({ style, result }) => [
        style.name,
        ...links.map((l) => fixed((result.bytes_moved[l] ?? 0) / divisor, 2)),
      ]),
    },
  };
}

function commandRows(name: string, result: SimConfigResult, statuses: string[]): string[][] {
  const types = ordered(COMMAND_TYPES, Object.keys(result.commands));
  if (types.length === 0) return [[name, "none", "0", ...statuses.map(() => "0"), "0"]];
  return types.map((type) => {
    const { sent, acked } = result.commands[type];
    const answered = Object.values(acked).reduce((a, b) => a + b, 0);
    return [
      name,
      type,
      count(sent),
      ...statuses.map((s) => count(acked[s] ?? 0)),
      count(sent - answered),
    ];
  });
}

/** Commands sent by type; null when no configuration sent any (nothing to draw). */
export function commandsFigure(
  run: SimRunResult,
  key: string,
  styles: SeriesStyle[],
): Figure | null {
  const id = `${key}-commands`;
  const title = "Commands sent, by type";
  const ran = present(run, styles);
  const types = ordered(
    COMMAND_TYPES,
    ran.flatMap(({ result }) => Object.keys(result.commands)),
  );
  if (types.length === 0) return null;
  // Every status of the contract, zero or not, then any other the results name.
  const statuses = ordered(ACK_STATUSES, [
    ...ACK_STATUSES,
    ...ran.flatMap(({ result }) =>
      Object.values(result.commands).flatMap((c) => Object.keys(c.acked)),
    ),
  ]);
  const option = barOption(
    { title, subtitle: profileLine(run.profile), xName: "command", yName: "commands sent" },
    types,
    ran.map(({ style, result }) => ({
      style,
      values: types.map((t) => result.commands[t]?.sent ?? 0),
    })),
  );
  return {
    id,
    svg: renderSvg({ id, title, width: WIDTH, height: HEIGHT, option }),
    table: {
      caption: "Commands sent and the workers' acks, by status",
      head: ["configuration", "command", "sent", ...statuses, "unanswered"],
      rows: ran.flatMap(({ style, result }) => commandRows(style.name, result, statuses)),
    },
  };
}
