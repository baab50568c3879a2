// kvctl: what a router author imports. The root re-exports the control plane (ControlPublisher,
// connectControlPlane, errors) and the protocol (command and ack types, schemas, the int64-exact
// codec, subjects). The other areas are subpaths with one job each: kvctl/hash (block hashes over
// the native addon), kvctl/events (KV event consumer and decoder), kvctl/index (the prefix index),
// kvctl/patch (the SGLang patch kit), kvctl/testing (a reference responder and a nats-server
// launcher for tests). Everything else under dist/ is internal and not importable.
export * from "./control/index.js";
export * from "./protocol/index.js";
export { packageVersion as version } from "./paths.js";
