// The npm @e2b/code-interpreter SDK against the gateway named by E2B_API_URL and
// E2B_SANDBOX_URL (tests/gateway/test_js_sdk.py runs it, with DENO_FOLDER on the sandbox's
// PATH). Each check throws on a difference; the last line printed is one JSON object of what
// was seen, which the Python side checks again.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const PNG = '89504e470d0a1a0a'
const seen = {}
const sandbox = await Sandbox.create({
  envs: { PATH: `${process.env.DENO_FOLDER}:/usr/local/bin:/usr/bin:/bin` },
})
try {
  seen.template = (await sandbox.getInfo()).templateId
  await sandbox.runCode('kept = 21')
  seen.kept = (await sandbox.runCode('kept * 2')).text

  const lines = []
  const logged = await sandbox.runCode('print("out")', { onStdout: (m) => lines.push(m.line) })
  seen.stdout = [logged.logs.stdout, lines]

  const chart = await sandbox.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()',
  )
  const png = chart.results.find((r) => r.png)
  seen.png = Buffer.from(png.png, 'base64').subarray(0, 8).toString('hex') === PNG

  const failed = await sandbox.runCode('1 / 0')
  seen.error = [failed.error.name, failed.error.value, failed.error.traceback.includes('1 / 0')]

  const started = Date.now()
  await assert.rejects(sandbox.runCode('import time\ntime.sleep(60)', { timeoutMs: 2000 }))
  seen.interrupted = (await sandbox.runCode('kept')).text === '21' && Date.now() - started < 15000

  seen.js = (await sandbox.runCode('const n = 40; n + 2', { language: 'js' })).text

  const context = await sandbox.createCodeContext({ language: 'python' })
  await sandbox.runCode('mine = 1', { context })
  seen.listed = (await sandbox.listCodeContexts()).some((c) => c.id === context.id)
  await sandbox.restartCodeContext(context)
  seen.restarted = (await sandbox.runCode('mine', { context })).error?.name
  await sandbox.removeCodeContext(context)
  seen.removed = !(await sandbox.listCodeContexts()).some((c) => c.id === context.id)
} finally {
  await sandbox.kill()
}
console.log(JSON.stringify(seen))
