#!/usr/bin/env node
// Starts the reference Node Durable Streams server (@durable-streams/server) so
// that our Python server can be compared with it (conformance runs, benchmarks).
//
// Usage:
//   node reference_server.mjs [--data-dir DIR] [--port PORT]
//                             [--long-poll-timeout-ms MS] [--webhooks] [--no-compression]
//
// Every option can also come from the environment (the flag wins):
//   DS_REF_DATA_DIR, DS_REF_PORT, DS_REF_LONG_POLL_TIMEOUT_MS,
//   DS_REF_WEBHOOKS=1, DS_REF_COMPRESSION=0
//
// Storage is file-backed (LMDB metadata + append-only logs) in the data
// directory; without one, a fresh temporary directory is used and removed on
// exit, because the file-backed store is the configuration worth comparing
// against. The server binds 127.0.0.1 only. Port 0 picks a free port.
//
// Once listening it prints exactly one line `READY http://127.0.0.1:PORT` on
// stdout (callers wait for it); diagnostics go to stderr. SIGTERM/SIGINT stop
// the server cleanly (open SSE/long-poll responses are ended, LMDB closed)
// and exit with status 0.

import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { DurableStreamTestServer } from "@durable-streams/server"

// The library logs with console.log/info; keep stdout for the READY line only,
// so callers can treat the first stdout line as the handshake.
console.log = console.error
console.info = console.error

function fail(message) {
  process.stderr.write(`reference_server: ${message}\n`)
  process.exit(2)
}

function parseInteger(name, raw, min) {
  if (raw === undefined || raw === ``) return undefined
  const value = Number(raw)
  if (!Number.isInteger(value) || value < min) {
    fail(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`)
  }
  return value
}

function parseBool(raw) {
  if (raw === undefined || raw === ``) return undefined
  return ![`0`, `false`, `no`, `off`].includes(String(raw).toLowerCase())
}

let args
try {
  args = parseArgs({
    options: {
      "data-dir": { type: `string` },
      port: { type: `string` },
      "long-poll-timeout-ms": { type: `string` },
      webhooks: { type: `boolean` },
      "no-compression": { type: `boolean` },
      help: { type: `boolean`, short: `h` },
    },
    allowPositionals: false,
  }).values
} catch (err) {
  fail(err.message)
}

if (args.help) {
  process.stdout.write(
    `usage: node reference_server.mjs [--data-dir DIR] [--port PORT] ` +
      `[--long-poll-timeout-ms MS] [--webhooks] [--no-compression]\n`
  )
  process.exit(0)
}

const env = process.env
const port = parseInteger(`port`, args.port ?? env.DS_REF_PORT, 0) ?? 0
if (port > 65535) fail(`port must be <= 65535`)
const longPollTimeout = parseInteger(
  `long-poll-timeout-ms`,
  args[`long-poll-timeout-ms`] ?? env.DS_REF_LONG_POLL_TIMEOUT_MS,
  1
)
const webhooks = args.webhooks ?? parseBool(env.DS_REF_WEBHOOKS) ?? false
const compression = args[`no-compression`]
  ? false
  : (parseBool(env.DS_REF_COMPRESSION) ?? true)

let dataDir = args[`data-dir`] ?? env.DS_REF_DATA_DIR
let ownedDataDir = null
if (!dataDir) {
  ownedDataDir = mkdtempSync(join(tmpdir(), `ds-reference-`))
  dataDir = ownedDataDir
}

const server = new DurableStreamTestServer({
  host: `127.0.0.1`,
  port,
  dataDir,
  compression,
  webhooks,
  ...(longPollTimeout !== undefined ? { longPollTimeout } : {}),
})

let stopping = false
async function shutdown(signal) {
  if (stopping) return
  stopping = true
  process.stderr.write(`reference_server: ${signal}, stopping\n`)
  // Don't hang forever if a connection refuses to close.
  const killer = setTimeout(() => process.exit(1), 10_000)
  killer.unref()
  const started = Date.now()
  // stop() waits for every connection to finish; a client holding a
  // keep-alive or streaming connection must not delay exit for long.
  const forceClose = setTimeout(() => {
    server[`server`]?.closeAllConnections?.()
  }, 1_000)
  forceClose.unref()
  try {
    await server.stop()
    process.stderr.write(`reference_server: stopped in ${Date.now() - started} ms\n`)
  } catch (err) {
    process.stderr.write(`reference_server: stop failed: ${err?.stack ?? err}\n`)
    process.exitCode = 1
  }
  if (ownedDataDir) rmSync(ownedDataDir, { recursive: true, force: true })
  process.exit(process.exitCode ?? 0)
}
process.on(`SIGTERM`, () => void shutdown(`SIGTERM`))
process.on(`SIGINT`, () => void shutdown(`SIGINT`))

try {
  const url = await server.start()
  process.stderr.write(
    `reference_server: data dir ${dataDir}, long-poll timeout ` +
      `${longPollTimeout ?? `default (30000)`} ms, webhooks ${webhooks}\n`
  )
  process.stdout.write(`READY ${url.replace(/\/$/, ``)}\n`)
} catch (err) {
  process.stderr.write(`reference_server: start failed: ${err?.stack ?? err}\n`)
  if (ownedDataDir) rmSync(ownedDataDir, { recursive: true, force: true })
  process.exit(1)
}
