// The npm e2b SDK's core cycle against the gateway named by E2B_API_URL and E2B_SANDBOX_URL
// (tests/gateway/test_js_sdk.py runs it). Each check throws on a difference; the last line
// printed is one JSON object of what was seen, which the Python side checks again.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const tag = `js-${process.pid}-${Date.now()}`
const seen = {}
const first = await Sandbox.create('base', { metadata: { tag }, envs: { GREETING: 'hello' } })
const between = new Date()
const second = await Sandbox.create('base', { metadata: { tag } })
try {
  seen.id = first.sandboxId
  const ran = await first.commands.run('echo $GREETING; id -un')
  seen.stdout = ran.stdout
  await first.files.write('notes/from-js.txt', 'written by node')
  seen.read = await first.files.read('notes/from-js.txt')
  seen.entries = (await first.files.list('notes')).map((e) => e.name)

  const listed = async (query) => {
    const pages = Sandbox.list({ query: { metadata: { tag }, ...query } })
    const ids = []
    while (pages.hasNext) ids.push(...(await pages.nextItems()).map((s) => s.sandboxId))
    return ids.sort()
  }
  seen.both = await listed({})
  seen.byTemplate = await listed({ template: 'base' })
  seen.otherTemplate = await listed({ template: 'desktop' })
  seen.startedAfter = await listed({ startedAfter: between })

  // A preview: a server started in the sandbox (on a free loopback port in local mode),
  // reached through the gateway by the SDK's header route, with no credential.
  const serve =
    "python3 -c \"import http.server,os;s=http.server.ThreadingHTTPServer(('127.0.0.1',0)," +
    "http.server.SimpleHTTPRequestHandler);open('port~','w').write(str(s.server_port));" +
    "os.rename('port~','port');s.serve_forever()\""
  await first.commands.run(serve, { background: true })
  for (let i = 0; !(await first.files.exists('port')); i++) {
    assert.ok(i < 300, 'the server in the sandbox never started')
    await new Promise((done) => setTimeout(done, 100))
  }
  const port = Number(await first.files.read('port'))
  seen.host = first.getHost(port) === `${port}-${first.sandboxId}.e2b.localhost`
  const page = await fetch(`${process.env.E2B_SANDBOX_URL}/notes/from-js.txt`, {
    headers: { 'E2b-Sandbox-Id': first.sandboxId, 'E2b-Sandbox-Port': String(port) },
  })
  seen.preview = [page.status, await page.text()]

  const metrics = await first.getMetrics()
  assert.equal(metrics.length, 1)
  seen.metrics = { cpuCount: metrics[0].cpuCount, memTotal: metrics[0].memTotal }

  // A filesystem snapshot, and a sandbox made from it.
  const snapshot = await first.createSnapshot()
  seen.snapshot = snapshot.snapshotId
  const restored = await Sandbox.create(snapshot.snapshotId)
  try {
    seen.restored = await restored.files.read('notes/from-js.txt')
  } finally {
    await restored.kill()
  }
  seen.deleted = [
    await Sandbox.deleteSnapshot(snapshot.snapshotId),
    await Sandbox.deleteSnapshot(snapshot.snapshotId),
  ]
  assert.equal(await first.isRunning(), true)
} finally {
  seen.killed = [await first.kill(), await second.kill(), await first.kill()]
}
seen.second = second.sandboxId
console.log(JSON.stringify(seen))
