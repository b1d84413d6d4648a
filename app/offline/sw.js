// treino's service worker (issue 34), served at /sw.js with VERSION, CORE, OFFLINE_URL and
// MAX_PAGES written above this line by app/offline/routes.py. Hand-written on purpose
// (docs/offline.md): no build step, no CDN, a couple of hundred lines a reader can check.
//
// - Pages (HTML): network first, so a learner online always reads the newest release; each page
//   read is kept, and read from here when the network is gone. htmx fragments are never kept.
// - Static files: network first too (their names carry no version), from here offline; the
//   vendored libraries, whose names carry their version, cache first.
// - Never kept: anything but GET, the API, the live status waits, /offline/*, /sw.js, /docs.
// - Whose pages (issue 43): every page says whose it is (base.html's data-owner, the digest the
//   drafts' keys use; the offline page is no one's). Each page the network answers tells the
//   worker whose pages this browser's are now; when that changes (a sign-in, a sign-out, a
//   session ended elsewhere) every kept page goes and open pages of the old owner leave. A kept
//   page carries its owner and is shown only while its owner is the browser's.
// - At most MAX_PAGES pages are kept (issue 47): the ones kept longest ago go first.
const STATIC = `treino-static-${VERSION}`
const PAGES = "treino-pages"
const META = "treino-meta"
const OWNER = "/__owner"  // in META: whose pages this browser's are, as the network last said
const KEPT_FOR = "X-Treino-Owner"  // on a kept page: whose it is
const NEVER = /^\/(api\/|live\/|offline\/|docs|openapi\.json|metrics|healthz|readyz|sw\.js)/
const OWNER_CHANGES = /^\/(sign-in|sign-up|sign-out|reset-password|account\/delete)/
const OWNER_MARK = /data-owner="([^"]*)"/  // base.html's, before any of the page's own content
const SLOW_MS = 4000  // a page the network takes longer than this for comes from the cache

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(STATIC)
    await cache.addAll(CORE)
    await cache.add(OFFLINE_URL).catch(() => {})
    await self.skipWaiting()
  })())
})

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    const names = await caches.keys()
    const old = names.filter((n) => n.startsWith("treino-static-") && n !== STATIC)
    await Promise.all(old.map((n) => caches.delete(n)))
    await self.clients.claim()
    if (old.length) {  // a new release: each open page says so, once
      const meta = await caches.open(META)
      await meta.put("/__updated", new Response(VERSION))
      for (const client of await self.clients.matchAll({type: "window"})) {
        client.postMessage({type: "updated", version: VERSION})
      }
    }
  })())
})

function keepable(response) {
  return response && response.ok && response.status === 200 && response.type === "basic" &&
    !response.redirected && !/no-store/.test(response.headers.get("Cache-Control") || "")
}

async function fromCache(request, name) {
  const cache = await caches.open(name)
  return (await cache.match(request, {ignoreVary: true})) ||
    (await cache.match(request, {ignoreVary: true, ignoreSearch: true}))
}

async function tellPages(message) {
  for (const client of await self.clients.matchAll({type: "window"})) client.postMessage(message)
}

// One change of whose pages these are, or of what is kept, at a time: a page of the old owner
// must never land in the cache after the new owner's came.
let turn = Promise.resolve()
function inTurn(work) {
  const run = turn.then(work, work)
  turn = run.catch(() => {})
  return run
}

async function currentOwner() {
  const known = await (await caches.open(META)).match(OWNER)
  return known ? known.text() : null
}

// The network says this browser's pages are `owner`'s now: another owner's kept pages go, and
// open pages of another owner are told (offline.js leaves them). Called in turn.
async function learn(owner) {
  if (!owner || owner === (await currentOwner())) return
  await caches.delete(PAGES)
  await (await caches.open(META)).put(OWNER, new Response(owner))
  await tellPages({type: "owner", owner})
}

// At most MAX_PAGES pages: a cache's keys come in the order they were put, the oldest first.
async function bound(pages) {
  const keys = await pages.keys()
  await Promise.all(keys.slice(0, Math.max(0, keys.length - MAX_PAGES)).map((key) => pages.delete(key)))
}

// A page the network answered: whose it is, learnt; kept as its owner's when it can be. A
// redirect where a page was kept (the session behind it ended, say) means that copy is no longer
// this browser's page: it goes, and a tab showing it leaves it. Whether it was kept, said.
async function seen(request, response) {
  if (response.type === "opaqueredirect" || response.redirected) {
    if (await (await caches.open(PAGES)).delete(request, {ignoreVary: true})) {
      await tellPages({type: "gone", url: request.url})
    }
    return false
  }
  const html = (response.headers.get("Content-Type") || "").startsWith("text/html")
  if (response.type !== "basic" || !html) return false
  const text = await response.text()
  const owner = OWNER_MARK.exec(text)?.[1] || ""
  return inTurn(async () => {
    await learn(owner)
    if (!owner || !keepable(response)) return false  // the busy page, an error: no one keeps it
    const headers = new Headers(response.headers)
    headers.set(KEPT_FOR, owner)
    const pages = await caches.open(PAGES)
    await pages.put(request, new Response(text, {status: 200, statusText: response.statusText, headers}))
    await bound(pages)
    return true
  })
}

// The kept copy of a page, only while its owner is the browser's.
async function keptPage(request) {
  const kept = await fromCache(request, PAGES)
  const owner = await currentOwner()
  return kept && owner && kept.headers.get(KEPT_FOR) === owner ? kept : null
}

async function answer(request, network) {
  const kept = await keptPage(request)
  const slow = kept && new Promise((resolve) => setTimeout(() => resolve(kept), SLOW_MS))
  try {
    return await (slow ? Promise.race([network, slow]) : network)
  } catch {
    // never saved: the offline page, which is no one's (it names no account and changes nothing)
    return kept || (await fromCache(OFFLINE_URL, STATIC)) || Response.error()
  }
}

function page(event) {
  const request = event.request
  const network = fetch(request)
  // whatever the race below gives, the network's answer is read when it comes
  event.waitUntil(network.then((response) => seen(request, response.clone()), () => false))
  return answer(request, network)
}

async function asset(event, cacheFirst) {
  const request = event.request
  if (cacheFirst) {
    const kept = await fromCache(request, STATIC)
    if (kept) return kept
  }
  try {
    const response = await fetch(request)
    if (keepable(response)) {
      const copy = response.clone()
      event.waitUntil(caches.open(STATIC).then((cache) => cache.put(request, copy)))
    }
    return response
  } catch {
    return (await fromCache(request, STATIC)) || Response.error()
  }
}

self.addEventListener("fetch", (event) => {
  const request = event.request
  const url = new URL(request.url)
  if (url.origin !== self.location.origin) return
  if (request.method !== "GET") {
    // whose pages these are is about to change: none of the old owner's stay
    if (OWNER_CHANGES.test(url.pathname)) event.waitUntil(inTurn(() => caches.delete(PAGES)))
    return
  }
  if (NEVER.test(url.pathname) || request.headers.get("HX-Request")) return
  if (url.pathname.startsWith("/static/")) {
    event.respondWith(asset(event, url.pathname.startsWith("/static/vendor/")))
  } else if (url.pathname === "/manifest.webmanifest" || url.pathname === OFFLINE_URL) {
    event.respondWith(asset(event, false))  // no one's: kept beside the static files
  } else if (request.mode === "navigate" || (request.headers.get("Accept") || "").includes("text/html")) {
    event.respondWith(page(event))
  }
})

// Messages from the pages (static/js/offline.js).
async function saveAll(urls, client) {
  let done = 0
  let failed = 0
  const statics = await caches.open(STATIC)
  for (const url of urls) {
    try {
      const response = await fetch(url, {credentials: "same-origin"})
      const path = new URL(url, self.location.origin).pathname
      if (path.startsWith("/static/") || path === OFFLINE_URL) {
        if (!keepable(response)) throw new Error(String(response.status))
        await statics.put(url, response)
      } else if (!(await seen(new Request(url), response))) {
        throw new Error(String(response.status))
      }
    } catch {
      failed += 1
    }
    done += 1
    client?.postMessage({type: "progress", done, total: urls.length})
  }
  client?.postMessage({type: "saved", done, failed})
}

// The page the worker first took over came before it: fetched again, kept, and whose it is learnt.
async function keep(url) {
  if (new URL(url).origin !== self.location.origin) return
  try {
    await seen(new Request(url), await fetch(url, {credentials: "same-origin"}))
  } catch { /* offline again */ }
}

async function hello(client) {
  const meta = await caches.open(META)
  if (await meta.match("/__updated")) {
    client?.postMessage({type: "updated", version: VERSION})
  }
}

self.addEventListener("message", (event) => {
  const data = event.data || {}
  if (data.type === "save-all" && Array.isArray(data.urls)) {
    event.waitUntil(saveAll(data.urls, event.source))
  } else if (data.type === "keep" && typeof data.url === "string") {
    event.waitUntil(keep(data.url))
  } else if (data.type === "session-owner" && typeof data.owner === "string") {
    // what GET /offline/session just said (never a page's own word: a kept page's is old)
    event.waitUntil(inTurn(() => learn(data.owner)))
  } else if (data.type === "hello") {
    event.waitUntil(hello(event.source))
  } else if (data.type === "updated-seen") {
    event.waitUntil(caches.open(META).then((meta) => meta.delete("/__updated")))
  } else if (data.type === "forget") {
    event.waitUntil(inTurn(() => caches.delete(PAGES)))
  }
})
