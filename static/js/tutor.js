// The AI tutor's panels: ask (on an exercise, with the editor's code and the hints open; on a
// lesson card, the question alone), then read the answer as server-sent events (fetch +
// ReadableStream, so Stop can abort it). Listeners sit on the document, so a card's panel that
// htmx fetches later works too. Nothing here touches the editor or the verdict: a tutor that is
// down leaves the rest of the page as it was.
const controllers = new WeakMap()  // panel -> the AbortController of its answer in progress

function csrf() {
  try { return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRF-Token"] || "" }
  catch { return "" }
}

function turn(log, role, who, text) {
  const li = document.createElement("li")
  li.className = `tutor-turn tutor-${role}`
  const name = document.createElement("span")
  name.className = "tutor-who"
  name.textContent = who
  const body = document.createElement("div")
  body.className = "tutor-text"
  body.textContent = text
  li.append(name, body)
  log.append(li)
  return body
}

// Server-sent events from a byte stream: calls onEvent(kind, data) for each complete event.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  for (;;) {
    const {value, done} = await reader.read()
    if (done) break
    buffer += decoder.decode(value, {stream: true})
    let end
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let kind = "message", data = ""
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim()
        else if (line.startsWith("data:")) data += line.slice(5).trim()
      }
      if (data) onEvent(kind, JSON.parse(data))
    }
  }
}

document.addEventListener("click", (event) => {
  const cancel = event.target.closest("[data-tutor-cancel]")
  if (cancel) controllers.get(cancel.closest("[data-tutor]"))?.abort()
})

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("[data-tutor-form]")
  if (!form) return
  event.preventDefault()
  const panel = form.closest("[data-tutor]")
  const phrases = JSON.parse(panel.dataset.phrases)
  const log = panel.querySelector("[data-tutor-log]")
  const state = panel.querySelector("[data-tutor-state]")
  const ask = panel.querySelector("[data-tutor-ask]")
  const cancel = panel.querySelector("[data-tutor-cancel]")
  const question = form.querySelector("textarea")
  const busy = (on) => { ask.disabled = on; cancel.hidden = !on }

  const text = question.value.trim()
  if (!text || controllers.has(panel)) return
  let body = {question: text}
  if (panel.dataset.tutor === "exercise") {
    const code = document.querySelector("textarea[data-code-editor]")?.value ?? ""
    const hints = document.querySelectorAll("#hints .hint-item").length
    body = {question: text, code, hints}
  }
  turn(log, "learner", phrases.you, text)
  const answer = turn(log, "tutor", phrases.tutor, "")
  answer.parentElement.classList.add("tutor-running")
  state.textContent = phrases.asking
  const controller = new AbortController()
  controllers.set(panel, controller)
  busy(true)
  let ended = false
  try {
    const asked = await fetch(panel.dataset.askUrl, {
      method: "POST",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf()},
      body: JSON.stringify(body),
      signal: controller.signal,
    })
    const reply = await asked.json().catch(() => ({}))
    if (!asked.ok || !reply.stream) {
      answer.textContent = reply.message || phrases.unavailable
      answer.parentElement.classList.add("tutor-failed")
      state.textContent = answer.textContent
      ended = true
      return
    }
    question.value = ""
    const stream = await fetch(reply.stream, {signal: controller.signal, headers: {Accept: "text/event-stream"}})
    if (!stream.ok) throw new Error(`stream ${stream.status}`)
    await readEvents(stream, (kind, data) => {
      if (kind === "token") answer.textContent += data.text
      else if (kind === "withheld") {
        answer.textContent = data.text
        answer.parentElement.classList.add("tutor-withheld")
      } else if (kind === "failed") {
        answer.textContent = data.text
        answer.parentElement.classList.add("tutor-failed")
        state.textContent = data.text
      }
      if (kind === "done" && data.html) {
        // the whole answer, rendered by the server as the page would on a reload (Markdown,
        // raw HTML escaped): the stream showed it as plain text while it was written
        answer.innerHTML = data.html
        answer.classList.add("tutor-markdown")
      }
      if (kind === "done" || kind === "withheld") state.textContent = data.cut ? phrases.cut : phrases.done
      if (kind === "done" || kind === "withheld" || kind === "failed") ended = true
    })
  } catch (error) {
    if (error.name === "AbortError") { state.textContent = phrases.cancelled; ended = true }
  } finally {
    if (!ended) {
      if (!answer.textContent) answer.textContent = phrases.unavailable
      answer.parentElement.classList.add("tutor-failed")
      state.textContent = phrases.unavailable
    }
    answer.parentElement.classList.remove("tutor-running")
    controllers.delete(panel)
    busy(false)
  }
})
