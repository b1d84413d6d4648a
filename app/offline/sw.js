// treino's service worker (issue 34), served at /sw.js with VERSION, CORE and OFFLINE_URL written
// above this line by app/offline/routes.py. Hand-written on purpose (docs/offline.md): no build
// step, no CDN, about a hundred lines a reader can check.
//
// - Pages (HTML): network first, so a learner online always reads the newest release; each page
//   read is kept, and read from here when the network is gone. htmx fragments are never kept.
// - Static files: network first too (their names carry no version), from here offline; the
//   vendored libraries, whose names carry their version, cache first.
// - Never kept: anything but GET, the API, the live status waits, /offline/*, /sw.js, /docs.
// - A sign-in, sign-up or sign-out, or a page of another owner, empties the page cache: no
//   account's pages are shown to the next one.
const STATIC = `treino-static-${VERSION}`
const PAGES = "treino-pages"
const META = "treino-meta"
const NEVER = /^\/(api\/|live\/|offline\/|docs|openapi\.json|metrics|healthz|readyz|sw\.js)/
const OWNER_CHANGES = /^\/(sign-in|sign-up|sign-out|account\/delete)/
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

async function page(event) {
  const request = event.request
  const network = fetch(request).then(async (response) => {
    if (keepable(response)) {
      const copy = response.clone()
      event.waitUntil(caches.open(PAGES).then((cache) => cache.put(request, copy)))
    }
    return response
  })
  const kept = await fromCache(request, PAGES)
  const slow = kept && new Promise((resolve) => setTimeout(() => resolve(kept), SLOW_MS))
  try {
    return await (slow ? Promise.race([network, slow]) : network)
  } catch {
    return kept || (await fromCache(OFFLINE_URL, STATIC)) || Response.error()
  }
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
    if (OWNER_CHANGES.test(url.pathname)) event.waitUntil(caches.delete(PAGES))
    return
  }
  if (NEVER.test(url.pathname) || request.headers.get("HX-Request")) return
  if (url.pathname.startsWith("/static/")) {
    event.respondWith(asset(event, url.pathname.startsWith("/static/vendor/")))
  } else if (url.pathname === "/manifest.webmanifest") {
    event.respondWith(asset(event, false))
  } else if (request.mode === "navigate" || (request.headers.get("Accept") || "").includes("text/html")) {
    event.respondWith(page(event))
  }
})

// Messages from the pages (static/js/offline.js).
async function saveAll(urls, client) {
  let done = 0
  let failed = 0
  const pages = await caches.open(PAGES)
  const statics = await caches.open(STATIC)
  for (const url of urls) {
    try {
      const response = await fetch(url, {credentials: "same-origin"})
      if (!keepable(response)) throw new Error(String(response.status))
      await (new URL(url, self.location.origin).pathname.startsWith("/static/") ? statics : pages)
        .put(url, response)
    } catch {
      failed += 1
    }
    done += 1
    client?.postMessage({type: "progress", done, total: urls.length})
  }
  client?.postMessage({type: "saved", done, failed})
}

async function keep(url) {
  if (new URL(url).origin !== self.location.origin) return
  const pages = await caches.open(PAGES)
  if (await pages.match(url, {ignoreVary: true})) return
  try {
    const response = await fetch(url, {credentials: "same-origin"})
    if (keepable(response)) await pages.put(url, response)
  } catch { /* offline again */ }
}

async function owner(value) {
  const meta = await caches.open(META)
  const known = await meta.match("/__owner")
  const before = known ? await known.text() : null
  if (before !== value) {
    if (before !== null) await caches.delete(PAGES)
    await meta.put("/__owner", new Response(value))
  }
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
  } else if (data.type === "owner" && typeof data.owner === "string" && data.owner) {
    event.waitUntil(owner(data.owner))
  } else if (data.type === "hello") {
    event.waitUntil(hello(event.source))
  } else if (data.type === "updated-seen") {
    event.waitUntil(caches.open(META).then((meta) => meta.delete("/__updated")))
  } else if (data.type === "forget") {
    event.waitUntil(caches.delete(PAGES))
  }
})
