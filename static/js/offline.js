// Installable and offline (issue 34; docs/offline.md). Registers the service worker
// (app/offline/sw.js, served at /sw.js), says when the page is offline and what will happen,
// keeps quick-check answers and code submitted offline in this browser (the outbox) and sends
// each once when the network returns (with the Idempotency-Key it was first sent with, which
// the server dedupes on), saves the whole course on request, and says when a new release came.
// Every text comes from the data attributes of base.html's [data-offline-texts] element.

const OUTBOX = "treino:outbox"
const SIGNING_IN = "treino:signing-in"  // sessionStorage: this tab's visitor is signing in
const ADOPT_MS = 10 * 60 * 1000  // the page after a sign-in comes well within this
const RETRY_MS = 15000
const MAX_TRIES = 8  // a request the server keeps refusing (not the network) is dropped after this

const root = document.querySelector("[data-offline-texts]")
const texts = root ? root.dataset : {}
const bar = document.querySelector("[data-offline-bar]")
const notice = document.querySelector("[data-offline-notice]")

// ------------------------------------------------------------------ drafts' hash (editor.js)

// FNV-1a over UTF-16 code units, as app/offline/idempotency.py's code_hash: which copy of a
// draft an edit started from.
export function draftHash(code) {
  let h = 0x811c9dc5
  for (let i = 0; i < code.length; i++) {
    h ^= code.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return (h >>> 0).toString(16).padStart(8, "0")
}

// The server's draft is now `code` (a submission sent from the outbox saved it): edits made
// since start from it.
function rebaseDraft(key, code) {
  if (!key) return
  try {
    const record = JSON.parse(localStorage.getItem(key) || "null")
    if (record && typeof record.code === "string") {
      record.base = draftHash(code)
      record.synced = record.code === code
      localStorage.setItem(key, JSON.stringify(record))
    }
  } catch { /* storage off */ }
  document.dispatchEvent(new CustomEvent("treino:draft-rebased", {detail: {key, code}}))
}

// ------------------------------------------------------------------ what the page says

function say(text, link) {
  if (!notice || !text) return
  notice.replaceChildren()
  const p = document.createElement("p")
  p.textContent = text
  if (link) {
    const a = document.createElement("a")
    a.href = link.href
    a.textContent = link.text
    p.append(" ", a)
  }
  const close = document.createElement("button")
  close.type = "button"
  close.className = "button-quiet"
  close.textContent = texts.close || "×"
  close.addEventListener("click", () => { notice.hidden = true })
  notice.append(p, close)
  notice.hidden = false
}

function showOffline(offline) {
  if (!bar) return
  bar.hidden = !offline
  document.documentElement.classList.toggle("is-offline", offline)
}

// ------------------------------------------------------------------ the outbox

function readOutbox() {
  try { return JSON.parse(localStorage.getItem(OUTBOX) || "[]") } catch { return [] }
}

function writeOutbox(items) {
  try { localStorage.setItem(OUTBOX, JSON.stringify(items)) } catch { /* full or off */ }
}

function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID()
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("")
}

// The forms whose posts are kept when offline: a quick-check answer, and Submit (graded).
function kindOf(elt) {
  if (elt?.matches?.("form.question")) return "answer"
  if (elt?.matches?.("form.code-form")) return "submission"
  return null
}

document.addEventListener("htmx:configRequest", (event) => {
  const elt = event.detail.elt
  const kind = kindOf(elt)
  if (!kind || event.detail.verb !== "post") return
  const key = newKey()
  event.detail.headers["Idempotency-Key"] = key
  const values = event.detail.formData || event.detail.parameters
  const body = new URLSearchParams()
  for (const [name, value] of values.entries()) {
    if (name !== "csrf_token" && typeof value === "string") body.append(name, value)
  }
  elt._treinoPending = {
    key, kind, url: event.detail.path, body: body.toString(), page: location.pathname,
    target: elt.getAttribute("hx-target"), owner: texts.owner,
    draftKey: elt.querySelector("[data-draft-key]")?.dataset.draftKey || null,
  }
})

// What this tab queued and still shows as kept: another tab may send it (all tabs flush when
// the network returns), and then this one asks for its answer again (below).
const queuedHere = new Map()

document.addEventListener("htmx:sendError", (event) => {
  const elt = event.detail.elt
  const pending = elt?._treinoPending
  if (!pending) return
  elt._treinoPending = null
  showOffline(true)
  if (pending.kind === "submission" && new URLSearchParams(pending.body).get("mode") === "run") return
  const items = readOutbox().filter((item) => item.key !== pending.key)
  items.push({...pending, at: Date.now(), tries: 0})
  writeOutbox(items)
  queuedHere.set(pending.key, pending)
  const place = pending.kind === "answer"
    ? document.querySelector(pending.target)
    : document.getElementById("submission-status")
  if (place) {
    place.replaceChildren()
    const p = document.createElement("p")
    p.className = "queued-offline"
    p.textContent = pending.kind === "answer" ? texts.answerQueued : texts.submissionQueued
    place.append(p)
  }
})

// An item is sent only under the owner who queued it (issue 43): never under whoever uses this
// browser next. Another owner's items wait for their owner.
function mine(item, owner) {
  return Boolean(owner) && item.owner === owner
}

function waitingHere() {
  return readOutbox().some((item) => mine(item, texts.owner))
}

// A visitor who signs in (or up, or through a reset link) in this tab takes their work to the
// account: the server adopts the visitor's rows then, and this hands the outbox's over likewise,
// once the page after it is the account's. Only this tab's own sign-in does, only for this
// visitor's items: nothing queued by someone else goes to an account.
document.addEventListener("submit", (event) => {
  const form = event.target
  if (!(form instanceof HTMLFormElement) || !texts.owner?.startsWith("v")) return
  const path = new URL(form.action, location.href).pathname
  if (!(texts.signInUrls || "").split(" ").includes(path)) return
  try {
    sessionStorage.setItem(SIGNING_IN, JSON.stringify({from: texts.owner, at: Date.now()}))
  } catch { /* storage off */ }
})

function adoptAfterSignIn() {
  let mark = null
  try { mark = JSON.parse(sessionStorage.getItem(SIGNING_IN) || "null") } catch { /* storage off */ }
  if (!mark || !texts.owner) return
  // the first page after the form decides: a refused sign-in shows the visitor's page again
  try { sessionStorage.removeItem(SIGNING_IN) } catch { /* storage off */ }
  if (!texts.owner.startsWith("u") || !(Date.now() - mark.at < ADOPT_MS)) return
  writeOutbox(readOutbox().map((item) => (item.owner === mark.from ? {...item, owner: texts.owner} : item)))
}

function apply(item, html) {
  const htmx = window.htmx
  if (item.kind === "answer") {
    const form = document.querySelector(`form.question[action="${CSS.escape(item.url)}"]`)
    const target = form && item.target && document.querySelector(item.target)
    if (target && htmx) htmx.swap(target, html, {swapStyle: "outerHTML"})
    return target ? null : "answer"
  }
  const form = document.querySelector(`form.code-form[action="${CSS.escape(item.url)}"]`)
  const status = form && document.getElementById("submission-status")
  if (status && htmx) {
    htmx.swap(status, html, {swapStyle: "outerHTML"})
    return null
  }
  return "submission"
}

let flushing = null

async function currentSession() {
  let session
  try {
    const response = await fetch(texts.sessionUrl, {credentials: "same-origin", cache: "no-store"})
    session = response.ok ? await response.json() : null
  } catch { return null }  // still offline
  // the network's word on whose pages these are: the worker learns it too
  const worker = navigator.serviceWorker?.controller
  if (session?.owner) worker?.postMessage({type: "session-owner", owner: session.owner})
  return session
}

function post(item, session) {
  return fetch(item.url, {
    method: "POST", credentials: "same-origin",
    headers: {
      "Content-Type": "application/x-www-form-urlencoded", "HX-Request": "true",
      "X-CSRF-Token": session.csrf_token, "Idempotency-Key": item.key,
    },
    body: item.body,
  })
}

// Another tab sent what this one queued: this tab asks again with the same key, which makes
// nothing new on the server and answers with what the first send made.
async function showSentElsewhere() {
  const waiting = new Set(readOutbox().map((item) => item.key))
  const gone = [...queuedHere.values()].filter((item) => !waiting.has(item.key))
  if (!gone.length) return
  const session = await currentSession()
  if (!session) return
  showOffline(false)
  for (const item of gone) {
    queuedHere.delete(item.key)
    if (!mine(item, session.owner)) continue
    try {
      const response = await post(item, session)
      if (response.ok) apply(item, await response.text())
    } catch { return }
  }
}

window.addEventListener("storage", (event) => {
  if (event.key === OUTBOX && queuedHere.size) showSentElsewhere()
})

async function flushNow() {
  const items = readOutbox()
  if (!items.length) return
  const session = await currentSession()
  if (!session) return
  showOffline(false)
  const sent = []
  let elsewhere = null
  for (const item of items) {
    if (!mine(item, session.owner)) continue
    let response
    try {
      response = await post(item, session)
    } catch { break }  // the network went again: the rest wait
    const done = response.ok || response.status === 422 || response.status === 404
    if (!done) {
      item.tries = (item.tries || 0) + 1
      if (item.tries < MAX_TRIES) continue
    }
    sent.push(item.key)
    queuedHere.delete(item.key)
    if (response.ok) {
      const left = apply(item, await response.text())
      if (left) elsewhere = {kind: left, page: item.page}
      if (item.kind === "submission") {
        rebaseDraft(item.draftKey, new URLSearchParams(item.body).get("code") || "")
      }
    }
  }
  writeOutbox(readOutbox().filter((item) => !sent.includes(item.key)).map((item) => {
    const known = items.find((i) => i.key === item.key)
    return known ? {...item, tries: known.tries} : item
  }))
  if (elsewhere?.kind === "submission") {
    say(texts.submissionSent, {href: elsewhere.page, text: texts.seeVerdict})
  } else if (elsewhere) {
    say(texts.answersSent, {href: elsewhere.page, text: texts.seeAnswers})
  } else if (sent.length) {
    say(texts.sent)
  }
}

// One flush at a time in this tab, and in all of this browser's tabs where Web Locks exist
// (the server's keys make a second send harmless anyway).
export function flush() {
  if (flushing) return flushing
  const run = navigator.locks ? () => navigator.locks.request("treino-outbox", flushNow) : flushNow
  flushing = run().catch(() => {}).finally(() => { flushing = null })
  return flushing
}

window.addEventListener("online", () => { showOffline(false); flush() })
window.addEventListener("offline", () => showOffline(true))
setInterval(() => { if (waitingHere()) flush() }, RETRY_MS)

// ------------------------------------------------------------------ the service worker

function saveCourse(button, state) {
  const worker = navigator.serviceWorker.controller
  if (!worker) return
  button.disabled = true
  state.textContent = texts.saving.replace("{done}", "0").replace("{total}", "…")
  fetch(texts.pagesUrl, {credentials: "same-origin", cache: "no-store"})
    .then((response) => response.json())
    .then((list) => worker.postMessage({type: "save-all", urls: [...list.pages, ...list.assets]}))
    .catch(() => { state.textContent = texts.saveFailed; button.disabled = false })
}

function fromWorker(event) {
  const data = event.data || {}
  const button = document.querySelector("[data-save-offline]")
  const state = document.querySelector("[data-save-offline-state]")
  if (data.type === "updated") {
    say(texts.updated)
    navigator.serviceWorker.controller?.postMessage({type: "updated-seen"})
  } else if (data.type === "progress" && state) {
    state.textContent = texts.saving.replace("{done}", data.done).replace("{total}", data.total)
  } else if (data.type === "saved" && state) {
    state.textContent = data.failed ? texts.saveFailed : texts.saved
    if (button) button.disabled = false
  } else if (data.type === "owner" && texts.owner && data.owner !== texts.owner) {
    leave()  // this page is another owner's (a session ended, another account signed in)
  } else if (data.type === "gone" && data.url === location.href.split("#")[0]) {
    leave()  // the kept copy shown here is no longer this browser's page
  }
}

// The page again, from the network now (a GET, whatever brought this one); never while this
// page is already going (a sign-in's answer tells the worker the new owner while the old page
// may still be on screen: going back to it would undo the sign-in's navigation).
let going = false
window.addEventListener("beforeunload", () => { going = true })
window.addEventListener("pageshow", () => { going = false })

function leave() {
  if (!going) location.replace(location.href)
}

async function start() {
  if (!("serviceWorker" in navigator) || !texts.swUrl) return
  navigator.serviceWorker.addEventListener("message", fromWorker)
  const first = !navigator.serviceWorker.controller
  let registration
  try {
    registration = await navigator.serviceWorker.register(texts.swUrl, {scope: "/"})
  } catch { return }
  await navigator.serviceWorker.ready
  // the page the worker first took over came before it: it keeps that one too (and learns
  // whose it is from the network's copy, never from a page's word: a kept page's may be old)
  const tell = () => {
    const worker = navigator.serviceWorker.controller
    worker?.postMessage({type: "hello"})
    if (first && navigator.onLine) worker?.postMessage({type: "keep", url: location.href})
  }
  if (navigator.serviceWorker.controller) tell()
  else navigator.serviceWorker.addEventListener("controllerchange", tell, {once: true})
  // a new release is looked for at every page, not only when the browser gets round to it
  if (!first && navigator.onLine) registration.update().catch(() => {})
  const button = document.querySelector("[data-save-offline]")
  const state = document.querySelector("[data-save-offline-state]")
  if (button && state) {
    button.hidden = false
    button.addEventListener("click", () => saveCourse(button, state))
  }
}

showOffline(!navigator.onLine)
adoptAfterSignIn()
start()
if (waitingHere()) flush()
