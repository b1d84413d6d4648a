// A queued or running submission's status follows the server without polling it every second.
// Its section (templates/_submission_status.html) has data-wait-url: a request the server answers
// as soon as the status changes, or after a few seconds unchanged; then the section fires
// "changed", its hx-trigger, and htmx fetches the fragment. A new section that is still waiting
// waits again. A wait or a fetch that fails (the connection dropped, the server too busy) is
// retried a moment later as a plain fetch of the fragment, which is polling: the verdict is in
// the row, so it is never missed, only later.
const RETRY_MS = 1000

function changed(section) {
  if (section.isConnected) section.dispatchEvent(new CustomEvent("changed"))
}

function follow(section) {
  if (section.dataset.following) return
  section.dataset.following = "1"
  fetch(section.dataset.waitUrl, {credentials: "same-origin", cache: "no-store"})
    .then((response) => {
      if (!response.ok) throw new Error(String(response.status))
      changed(section)
    })
    .catch(() => later(section))
}

// Offline (static/js/offline.js says so), asking every second is pointless: ask again when the
// network is back.
function later(section) {
  if (navigator.onLine) setTimeout(() => changed(section), RETRY_MS)
  else window.addEventListener("online", () => changed(section), {once: true})
}

// While it runs, the time since it started counts on here between the server's answers.
function count(span) {
  const since = Number(span.dataset.since) || 0
  const start = performance.now()
  const timer = setInterval(() => {
    if (!span.isConnected) { clearInterval(timer); return }
    const n = since + Math.floor((performance.now() - start) / 1000)
    if (n >= 2) span.textContent = span.dataset.plural.replace("99", String(n))
  }, 1000)
}

function scan(root) {
  if (root.matches?.("[data-wait-url]")) follow(root)
  root.querySelectorAll?.("[data-wait-url]").forEach(follow)
  root.querySelectorAll?.(".elapsed[data-plural]").forEach(count)
}

// The fragment could not be fetched: try again (not after a 404: the submission is gone).
function retry(event) {
  const section = event.detail.elt
  if (!section.matches?.("[data-wait-url]") || event.detail.xhr?.status === 404) return
  later(section)
}

// htmx:load comes for the body once htmx has set the page up (its triggers listen from then on),
// and for each fragment it swaps in
document.addEventListener("htmx:load", (event) => scan(event.detail.elt))
document.addEventListener("htmx:sendError", retry)
document.addEventListener("htmx:responseError", retry)
