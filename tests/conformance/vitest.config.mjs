// Vitest config that runs the public Durable Streams conformance suite
// (@durable-streams/server-conformance-tests) against CONFORMANCE_TEST_URL.
//
// Why a config of our own: the package's CLI runs Vitest from the current
// folder, whose default `exclude` covers node_modules, so it finds "No test
// files". Here `include` names the suite's entry file inside node_modules and
// `exclude` is empty.
//
// Environment:
//   CONFORMANCE_TEST_URL          origin of the server under test (required),
//                                 e.g. http://127.0.0.1:4437; streams live at
//                                 /v1/stream/<name> below it.
//   CONFORMANCE_FETCH_HEADERS     a JSON object of headers every request
//                                 carries, with redirects refused
//                                 (fetch_setup.mjs).
//   CONFORMANCE_SUBSCRIPTIONS=1   also run the opt-in "Reserved subscription
//                                 APIs" group. The package's own entry
//                                 (dist/test-runner.js) always calls
//                                 runConformanceTests({ baseUrl }) with that
//                                 group off and reads no other variable, so
//                                 in that case we run subscriptions.entry.mjs
//                                 instead, which calls it with
//                                 { baseUrl, subscriptions: true }. It runs
//                                 the whole suite, never both entries at once.
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const SUITE_ENTRY =
  "node_modules/@durable-streams/server-conformance-tests/dist/test-runner.js"
const SUBSCRIPTIONS_ENTRY = "subscriptions.entry.mjs"

function truthy(value) {
  return (
    value !== undefined &&
    value !== "" &&
    !["0", "false", "no", "off"].includes(value.toLowerCase())
  )
}

const withSubscriptions = truthy(process.env.CONFORMANCE_SUBSCRIPTIONS)
const withFetchHeaders = truthy(process.env.CONFORMANCE_FETCH_HEADERS)

export default defineConfig({
  test: {
    root: fileURLToPath(new URL(".", import.meta.url)),
    include: [withSubscriptions ? SUBSCRIPTIONS_ENTRY : SUITE_ENTRY],
    exclude: [],
    setupFiles: withFetchHeaders ? ["fetch_setup.mjs"] : [],
    watch: false,
    // Keep Vitest's default 5 s test timeout: the suite's own long-poll
    // tests set their timeouts explicitly, and it is what upstream runs with.
  },
})
