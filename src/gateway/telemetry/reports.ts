// What a step of the turn path reports to when it only reports: the log and the counts a turn
// keeps. Telemetry (telemetry.ts) is one; a step that takes this needs nothing else of it.
import type { GatewayLog } from "../core/logger.js";
import type { TurnCounts } from "./metric-parts.js";

export interface TurnReports {
  readonly log: GatewayLog;
  readonly metrics: TurnCounts;
}
