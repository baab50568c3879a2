// The root entry (`kvctl`) names its exports one by one. It is the control plane's and the
// protocol's public faces, nothing more and nothing less: a name added to either, or to the root
// alone, fails here until the root's list says what it wants.
import { describe, expect, it } from "vitest";
import * as control from "../src/control/index.js";
import * as root from "../src/index.js";
import * as policy from "../src/policy/index.js";
import * as protocol from "../src/protocol/index.js";

describe("the public face", () => {
  it("the root exports the control plane's and the protocol's values, and its version", () => {
    const expected = [...Object.keys(control), ...Object.keys(protocol), "version"].sort();
    expect(Object.keys(root).sort()).toEqual(expected);
    expect(expected.length).toBeGreaterThan(60);
  });

  it("kvctl/policy exports the agent policy and its config, none of the gateway's parsers", () => {
    expect(Object.keys(policy).sort()).toEqual([
      "agentPolicy",
      "createAgentPolicy",
      "defaultPoliciesConfig",
      "policiesConfigSchema",
    ]);
  });
});
