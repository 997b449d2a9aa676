// Conformance entry used when CONFORMANCE_SUBSCRIPTIONS is set (see
// vitest.config.mjs): the same suite as the package's dist/test-runner.js,
// plus the opt-in "Reserved subscription APIs" group, which that entry can't
// enable.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) {
  throw new Error("CONFORMANCE_TEST_URL environment variable is required")
}

runConformanceTests({ baseUrl, subscriptions: true })
