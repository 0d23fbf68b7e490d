// Drives the registry's dashboard in headless Chromium, as an operator would watch it:
//
//   node dashboard_test.mjs <registry url> <screenshot.png> [--zone-port N] [--expect-agent]
//                           [--restart-registry] [--token T]
//                           [--expect-fleet GW1,GW2/AG1,AG2] [--spki HASH]
//
// Opens <registry>/ui (the redirect included), registers zone/z1 and zone/z2 through the
// registry's HTTP API, waits for them on the page, drains z1 and waits for DRAINING -- with no
// navigation in between. --zone-port: a gateway listener for service "zone" whose admin URL the
// registry serves in /ui/config.json; connections are made through it and the gateway panel must
// show its routing table and the new-connection shares. --expect-agent: the deploy panel must
// show the agent's history and the registry's (a running deploy). --restart-registry: prints RESTART-REGISTRY on a line of its own, for
// the caller to restart the registry on the same address; the page must notice, reconnect and
// follow the registry again. --token: the registry needs this token, which the page must ask for.
// --expect-fleet: gateways and agents registered (drover-gateway, drover-agent) under these ids,
// which the page must find in the registry with no configuration and show with live figures read
// through the registry (a table version and a poll time that moves on, per gateway; the deploy
// history, per agent). --spki: the base64 SHA-256 of the registry certificate's public key, the
// one certificate Chromium accepts from the test CA (the page is then opened over HTTPS).
// Exits 0 on success and 1 with the reason otherwise; every wait is bounded, and the whole run
// gives up after two minutes.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import {chromium} from 'playwright-core';

const WAIT_MS = 15000;
const args = process.argv.slice(2);
if (args.length < 2) {
  console.error('usage: node dashboard_test.mjs <registry url> <screenshot.png> [--zone-port N] ' +
                '[--expect-agent] [--token T]');
  process.exit(2);
}
const [registry, screenshot] = args;
const option = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const zonePort = option('--zone-port') ? Number(option('--zone-port')) : 0;
const expectAgent = args.includes('--expect-agent');
const restartRegistry = args.includes('--restart-registry');
const token = option('--token');
const fleet = option('--expect-fleet');
const spki = option('--spki');
const executablePath = process.env.DROVER_CHROMIUM || '/usr/bin/chromium';

let browser;
let upstream;
const sockets = [];

function log(message) {
  console.log(`[dashboard_test +${(process.uptime()).toFixed(1)} s] ${message}`);
}

async function cleanup() {
  for (const s of sockets) s.destroy();
  if (upstream) upstream.close();
  if (browser) await browser.close().catch(() => {});
}

const overall = setTimeout(async () => {
  console.error('dashboard_test: gave up after 120 s');
  await cleanup();
  process.exit(1);
}, 120000);

// The zone instances' address: a TCP server that greets and holds each connection open.
function startUpstream() {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => {
      sockets.push(socket);
      socket.on('error', () => {});
      socket.write('WELCOME\n');
    });
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

async function api(method, target, body) {
  const headers = {'Content-Type': 'application/json'};
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(registry + target, {method, headers,
                                               body: body ? JSON.stringify(body) : undefined,
                                               signal: AbortSignal.timeout(5000)});
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${target}: HTTP ${res.status} ${text}`);
  return text;
}

// Opens a connection through the gateway; resolves once the upstream's greeting arrived.
function connectThroughGateway(keepOpen) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(zonePort, '127.0.0.1');
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('no greeting through the gateway within 5 s'));
    }, 5000);
    socket.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    socket.once('data', () => {
      clearTimeout(timer);
      if (keepOpen) sockets.push(socket); else socket.end();
      resolve();
    });
  });
}

async function waitForText(page, selector, expected, what) {
  try {
    await page.waitForFunction(([sel, want]) => {
      const node = document.querySelector(sel);
      return node !== null && node.textContent.trim() === want;
    }, [selector, expected], {timeout: WAIT_MS});
  } catch (e) {
    const actual = await page.$eval(selector, (n) => n.textContent.trim()).catch(() => 'absent');
    throw new Error(`${what}: expected "${expected}" in ${selector}, page shows "${actual}"`);
  }
}

async function waitFor(page, predicate, arg, what) {
  try {
    await page.waitForFunction(predicate, arg, {timeout: WAIT_MS});
  } catch (e) {
    throw new Error(`${what}: not seen within ${WAIT_MS / 1000} s`);
  }
}

async function main() {
  if (!fs.existsSync(executablePath)) {
    throw new Error(`${executablePath} is missing: run scripts/setup.sh (Debian package chromium)`);
  }
  upstream = await startUpstream();
  const upstreamAddress = `127.0.0.1:${upstream.address().port}`;
  const launchArgs = spki ? [`--ignore-certificate-errors-spki-list=${spki}`] : [];
  browser = await chromium.launch({executablePath, timeout: 30000, args: launchArgs});
  const page = await browser.newPage({viewport: {width: 1440, height: 900}});
  page.setDefaultTimeout(WAIT_MS);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|SyntaxError|TypeError/.test(m.text())) {
      problems.push(`console: ${m.text()}`);
    }
  });
  let navigations = 0;
  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) navigations++;
  });

  log(`opening ${registry}/ui`);
  await page.goto(`${registry}/ui`, {waitUntil: 'load', timeout: WAIT_MS});
  if (!page.url().endsWith('/ui/')) throw new Error(`/ui did not redirect to /ui/: ${page.url()}`);
  const loaded = navigations;
  await page.evaluate(() => { window.droverTestMarker = 'still the first load'; });

  if (token) {
    log('waiting for the token prompt');
    await page.waitForSelector('#token-panel:not([hidden])', {timeout: WAIT_MS});
    await waitFor(page, () => document.querySelector('#conn').dataset.state === 'auth', undefined,
                  'connection status "auth"');
    // Before the token, the page does not claim that nothing is registered.
    const empty = await page.evaluate(() => document.querySelector('#services-empty').textContent);
    if (empty !== 'Enter a token to see the instances.') {
      throw new Error(`before the token the services panel said: ${empty}`);
    }
    await page.fill('#token-input', token);
    await page.click('#token-form button[type=submit]');
    const saved = await page.evaluate(() => localStorage.getItem('drover.registry.token'));
    if (saved !== token) throw new Error('the token was not kept in localStorage');
  }
  await waitFor(page, () => document.querySelector('#conn').dataset.state === 'live', undefined,
                'connection status "live"');

  log(`registering zone/z1 and zone/z2 at ${upstreamAddress}`);
  await api('PUT', '/v1/services/zone/instances/z1',
            {address: upstreamAddress, generation: 1, state: 'READY', ttl_ms: 30000, zone: 'eu-1',
             version: 'v1', labels: {shard: '1'}});
  await api('PUT', '/v1/services/zone/instances/z2',
            {address: upstreamAddress, generation: 1, state: 'READY', ttl_ms: 30000, zone: 'eu-1',
             version: 'v1', labels: {shard: '2'}});
  const z1 = 'tr[data-instance="zone/z1"]';
  await waitForText(page, `#services ${z1} td.state`, 'READY', 'z1 registered');
  await waitForText(page, `#services ${z1} td.version`, 'v1', 'z1 version');
  await waitForText(page, '#services tr[data-instance="zone/z2"] td.state', 'READY', 'z2 registered');
  await waitFor(page, (sel) => {
    const cells = document.querySelectorAll(`${sel} td.num`);
    return [...cells].some((c) => / s ago$/.test(c.textContent.trim()));
  }, `#services ${z1}`, 'z1 heartbeat age from the lease poll');

  if (zonePort) {
    log('connecting through the gateway');
    await waitFor(page, () => document.querySelectorAll(
                    '#gateways tr[data-instance="z1"], #gateways tr[data-instance="z2"]').length === 2,
                  undefined, 'gateway panel lists z1 and z2');
    // Rounds over a few seconds, so the chart has several polls with new connections; two
    // connections stay open.
    for (let round = 0; round < 10; round++) {
      await Promise.all(Array.from({length: 4 + round % 3},
                                   (_, i) => connectThroughGateway(round === 0 && i < 2)));
      await new Promise((r) => setTimeout(r, 350));
    }
    await waitFor(page, () => [...document.querySelectorAll('#gateways td.share')]
                    .some((c) => /^\d+%$/.test(c.textContent.trim())),
                  undefined, 'new-connection shares in the gateway panel');
    await waitFor(page, () => [...document.querySelectorAll('#gateways td.active')]
                    .reduce((n, c) => n + Number(c.textContent), 0) === 2,
                  undefined, 'two active connections in the gateway panel');
    await waitFor(page, () => {
      const v = document.querySelector('#gateways .table-version');
      return v !== null && Number(v.textContent) > 0;
    }, undefined, 'routing table version in the gateway panel');
  }

  if (expectAgent) {
    log('checking the deploy panel');
    await waitForText(page, '#agents tr[data-deploy="zone-v2-1700000100000"] td.verdict', 'FAIL',
                      'the failed deploy');
    await waitForText(page, '#agents tr[data-deploy="zone-v1-1700000000000"] td.verdict', 'PASS',
                      'the passed deploy');
    await waitForText(page,
                      '#agents [data-agent="registry"] tr[data-deploy="zone-v3-1700000200000"] td.verdict',
                      'RUNNING', 'the running deploy in the registry\'s history');
  }

  if (fleet) {
    const [gateways, agents] = fleet.split('/').map((ids) => ids.split(',').filter(Boolean));
    log(`looking for gateways ${gateways} and agents ${agents} found in the registry`);
    for (const id of gateways) {
      const card = `#gateways [data-gateway="drover-gateway/${id}"]`;
      await waitFor(page, (sel) => {
        const v = document.querySelector(`${sel} .table-version`);
        return v !== null && Number(v.textContent) > 0;
      }, card, `gateway ${id}: its routing table version, read through the registry`);
      const first = await page.$eval(`${card} .badge`, (b) => b.textContent);
      await waitFor(page, ([sel, before]) => {
        const b = document.querySelector(`${sel} .badge`);
        return b !== null && b.textContent.startsWith('polled') && b.textContent !== before;
      }, [card, first], `gateway ${id}: live (polled again)`);
    }
    for (const id of agents) {
      await waitForText(page, `#agents [data-agent="drover-agent/${id}"] tr[data-deploy] td.verdict`,
                        'PASS', `agent ${id}: its deploy history, read through the registry`);
    }
    const cards = await page.$$eval('#gateways [data-gateway^="drover-gateway/"]', (c) => c.length);
    const agentCards = await page.$$eval('#agents [data-agent^="drover-agent/"]', (c) => c.length);
    if (cards !== gateways.length || agentCards !== agents.length) {
      throw new Error(`expected ${gateways.length} gateway and ${agents.length} agent panels, ` +
                      `found ${cards} and ${agentCards}`);
    }
  }

  log('draining zone/z1');
  await api('POST', '/v1/services/zone/instances/z1/state', {generation: 1, state: 'DRAINING'});
  await waitForText(page, `#services ${z1} td.state`, 'DRAINING', 'z1 drained');
  if (zonePort) {
    await waitForText(page, '#gateways tr[data-instance="z1"] td.state', 'DRAINING',
                      'the gateway saw z1 drain');
  }

  if (restartRegistry) {
    const connects = await page.$eval('#conn', (n) => Number(n.dataset.connects));
    log('asking for a registry restart');
    console.log('RESTART-REGISTRY');
    await waitFor(page, (before) => {
      const conn = document.querySelector('#conn');
      return conn.dataset.state === 'live' && Number(conn.dataset.connects) > before;
    }, connects, 'the page reconnecting to the restarted registry');
    await waitForText(page, `#services ${z1} td.state`, 'DRAINING', 'z1 after the restart');
    await api('PUT', '/v1/services/zone/instances/z3',
              {address: upstreamAddress, generation: 1, state: 'STARTING', ttl_ms: 30000,
               zone: 'eu-2', version: 'v2'});
    await waitForText(page, '#services tr[data-instance="zone/z3"] td.state', 'STARTING',
                      'z3 registered after the restart');
  }

  const marker = await page.evaluate(() => window.droverTestMarker);
  if (navigations !== loaded || marker !== 'still the first load') {
    throw new Error(`the page navigated (${navigations - loaded} time(s)) instead of updating`);
  }
  if (problems.length) throw new Error(`the page reported errors:\n  ${problems.join('\n  ')}`);

  // Let the lease countdown and the chart settle for a tidy picture.
  await page.waitForTimeout(1200);
  fs.mkdirSync(path.dirname(screenshot), {recursive: true});
  await page.screenshot({path: screenshot, fullPage: true});
  log(`screenshot: ${screenshot}`);
  return page;
}

let failed = false;
try {
  await main();
  log('passed');
} catch (e) {
  failed = true;
  console.error(`dashboard_test FAILED: ${e.message}`);
  try {
    const pages = browser ? browser.contexts().flatMap((c) => c.pages()) : [];
    if (pages.length) {
      const failure = screenshot.replace(/\.png$/, '') + '-failure.png';
      fs.mkdirSync(path.dirname(failure), {recursive: true});
      await pages[0].screenshot({path: failure, fullPage: true});
      console.error(`dashboard_test: the page as it was: ${failure}`);
    }
  } catch (ignored) {
    // The failure itself is what matters.
  }
}
clearTimeout(overall);
await cleanup();
process.exit(failed ? 1 : 0);
