// One run's section: what ran, then its TTFT, traffic and commands, one figure each.
import type { SimRunResult } from "../types.js";
import { count, sig3 } from "./format.js";
import type { Figure, Section } from "./page.js";
import { profileLine } from "./page.js";
import { resultOf } from "./regimes.js";
import { bucketFigure, cdfFigure } from "./run-ttft.js";
import { bytesFigure, commandsFigure } from "./run-traffic.js";
import type { SeriesStyle } from "./style.js";

function intro(run: SimRunResult, styles: SeriesStyle[], commands: boolean): string[] {
  const lines = [
    `Workload ${run.workload}: ${count(run.workers)} workers, ${count(run.programs)} programs, ` +
      `${count(run.requests)} requests, seed ${run.seed}; ${sig3(run.simulated_s)} s simulated ` +
      `in ${sig3(run.wall_s)} s of wall time.`,
    `Profile: ${profileLine(run.profile)}.`,
  ];
  const erred = styles.filter((s) => (resultOf(run, s.name)?.errors ?? 0) > 0);
  if (erred.length > 0)
    lines.push(
      `Errors: ${erred.map((s) => `${s.name} (${count(resultOf(run, s.name)!.errors)})`).join(", ")}. ` +
        "A configuration that erred served different work; no comparison in this run holds.",
    );
  if (!commands) lines.push("No configuration sent a command in this run.");
  return lines;
}

export function runSection(
  run: SimRunResult,
  index: number,
  label: string,
  styles: SeriesStyle[],
): Section {
  const key = `run${index + 1}`;
  const ran = styles.filter((s) => resultOf(run, s.name));
  const commands = commandsFigure(run, key, ran);
  const figures: Figure[] = [
    cdfFigure(run, key, ran),
    bucketFigure(run, key, "ttft_by_gap", ran),
    bucketFigure(run, key, "ttft_by_context", ran),
    bytesFigure(run, key, ran),
    ...(commands ? [commands] : []),
  ];
  return {
    id: key,
    title: `Run ${index + 1}: ${label}`,
    intro: intro(run, ran, commands !== null),
    figures,
  };
}
