// A real nats-server for tests and benches: the package's own local launcher (loopback, free port).
export { findNatsServer, type NatsServer, startNatsServer } from "../../src/testing/index.js";
