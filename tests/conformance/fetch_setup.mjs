// Vitest setup file (vitest.config.mjs adds it when CONFORMANCE_FETCH_HEADERS is set): every
// request the suite makes carries these headers, and a redirect fails it instead of being
// followed. Used to run the suite through a cluster node with
// `Durable-Streams-Redirects: relay` on every request (a client that must stay on the node it
// asked, as a browser page on its own origin): a node that answered any request with a 307
// instead of relaying it fails the test that sent it.
const extra = JSON.parse(process.env.CONFORMANCE_FETCH_HEADERS ?? "{}")
const original = globalThis.fetch

globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined))
  for (const [name, value] of Object.entries(extra)) {
    headers.set(name, value)
  }
  return original(input, { ...init, headers, redirect: "error" })
}
