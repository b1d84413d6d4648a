// The exercise editor: CodeMirror 6 over the page's <textarea name="code">, which stays the
// source of truth (the form posts it; without JavaScript it is the editor). Drafts are kept in
// this browser at once on every change and on the server every few seconds.
import {
  basicSetup, closeCompletion, Compartment, completionStatus, Decoration, EditorState, EditorView, gutter,
  GutterMarker, indentUnit, indentWithTab, keymap, oneDark, Prec, python, RangeSet, StateEffect, StateField,
  ViewPlugin,
} from "../vendor/codemirror.js"
import {draftHash} from "./offline.js"

const SERVER_SAVE_MS = 4000
// One Dark on the page's darkest surface, without the active-line tint: its token colours then
// reach WCAG AA contrast (on its own #282c34 some do not). Before oneDark: earlier wins.
const darkTheme = [
  EditorView.theme({
    "&, .cm-gutters": {backgroundColor: "#0c0a09"},
    ".cm-activeLine, .cm-activeLineGutter": {backgroundColor: "transparent"},
  }, {dark: true}),
  oneDark,
]
const dark = window.matchMedia("(prefers-color-scheme: dark)")
const isMac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent)

// The line the last verdict's traceback points at, marked in a gutter of its own; the mark
// follows the line while the learner edits and goes when another verdict comes.
const setFailingLine = StateEffect.define()
class FailingMarker extends GutterMarker {
  toDOM() {
    const mark = document.createElement("span")
    mark.className = "cm-failing-mark"
    return mark
  }
}
const failingMarker = new FailingMarker()
const failingLine = StateField.define({
  create: () => RangeSet.empty,
  update(marks, tr) {
    marks = marks.map(tr.changes)
    for (const effect of tr.effects) {
      if (!effect.is(setFailingLine)) continue
      const n = effect.value
      marks = n && n <= tr.state.doc.lines
        ? RangeSet.of([failingMarker.range(tr.state.doc.line(n).from)]) : RangeSet.empty
    }
    return marks
  },
})
const failingGutter = [
  failingLine,
  gutter({class: "cm-failing-gutter", markers: (view) => view.state.field(failingLine)}),
  EditorView.theme({
    ".cm-failing-gutter": {width: "0.7rem"},
    ".cm-failing-mark": {
      display: "inline-block", width: "0.55rem", height: "0.55rem", borderRadius: "50%",
      backgroundColor: "#dc2626", verticalAlign: "middle",
    },
  }),
]
// On a narrow screen (a phone) long lines wrap: a sideways scroll there has no visible bar, and
// the end of a long line was hidden. Each wrapped row starts 4 columns deeper than its line's own
// indentation, so the rows read as one line and the indentation still shows the blocks.
const narrow = window.matchMedia("(max-width: 40rem)")
const HANG = 4
function hangingRows(view) {
  const marks = []
  for (const {from, to} of view.visibleRanges) {
    for (let pos = from; pos <= to;) {
      const line = view.state.doc.lineAt(pos)
      const depth = /^[ \t]*/.exec(line.text)[0].length + HANG
      marks.push(Decoration.line({
        attributes: {style: `padding-left: calc(${depth}ch + 6px); text-indent: -${depth}ch`},
      }).range(line.from))
      pos = line.to + 1
    }
  }
  return Decoration.set(marks)
}
const hangingIndent = ViewPlugin.fromClass(class {
  constructor(view) { this.decorations = hangingRows(view) }
  update(update) {
    if (update.docChanged || update.viewportChanged) this.decorations = hangingRows(update.view)
  }
}, {decorations: (plugin) => plugin.decorations})
const wrapping = new Compartment()
const wrapped = () => (narrow.matches ? [EditorView.lineWrapping, hangingIndent] : [])
let editorView = null

// The failing line of the verdict now on the page (data-failing-line), or none.
function markFailingLine() {
  if (!editorView) return
  const holder = document.querySelector("#submission-status [data-failing-line]")
  const line = holder ? Number(holder.dataset.failingLine) : 0
  editorView.dispatch({effects: setFailingLine.of(line > 0 ? line : 0)})
}

// Esc with the completion list open closes it and, as a second Esc would, lets the next Tab
// leave the editor: one Esc, then Tab, always gets a keyboard user out.
function escape(view) {
  if (!completionStatus(view.state)) return false
  closeCompletion(view)
  view.setTabFocusMode(2000)
  return true
}

function csrfToken() {
  try { return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRF-Token"] || "" }
  catch { return "" }
}

function readLocal(key) {
  try { return JSON.parse(localStorage.getItem(key) || "null") } catch { return null }
}

// This browser's copy: the code, when it was written, `base` (draftHash of the server's copy it
// started from) and whether the server has it (`synced`).
function writeLocal(key, code, base, synced = false) {
  try { localStorage.setItem(key, JSON.stringify({code, at: Date.now(), base, synced})) } catch { /* full or off */ }
}

// Which code the editor starts with (the server's is already in the textarea), and a copy to
// keep beside it when both changed. This browser's copy wins while it has edits the server has
// not seen and the server's copy is still the one they started from; the server's wins when
// this browser has nothing unsent (it is then the newer); when both changed (another device
// saved while this one was offline) the learner's own edits stay in the editor and the server's
// copy is kept and shown beside them (a conflict, said on the page).
function startingCode(ta) {
  const key = ta.dataset.draftKey
  const server = ta.value
  const serverHash = draftHash(server)
  const start = {code: server, base: serverHash, dirty: false, other: null}
  if ("draftReset" in ta.dataset) { localStorage.removeItem(key); return start }
  const local = readLocal(key)
  if (!local || typeof local.code !== "string" || local.code === server) return start
  if (typeof local.base === "string") {
    if (local.synced) return start
    if (local.base === serverHash) return {...start, code: local.code, dirty: true}
    return {...start, code: local.code, dirty: true, other: server}
  }
  const serverAt = Date.parse(ta.dataset.draftAt || "") || 0  // a copy kept before bases
  return local.at > serverAt ? {...start, code: local.code, dirty: true} : start
}

// Both copies, said and shown below the editor: the other one can be swapped in (the learner's
// then takes its place), so neither is lost.
// The other copy is kept in this browser too (under the draft's key + ":other") until the
// learner closes the box: a reload still shows it.
function showConflict(host, other, editorView, texts, key) {
  document.querySelector(".draft-conflict")?.remove()
  try { localStorage.setItem(`${key}:other`, other) } catch { /* full or off */ }
  const box = document.createElement("div")
  box.className = "draft-conflict notice warn"
  box.setAttribute("role", "alert")
  const said = document.createElement("p")
  said.textContent = texts.conflict || ""
  const fold = document.createElement("details")
  const summary = document.createElement("summary")
  summary.textContent = texts.conflictOther || ""
  const pre = document.createElement("pre")
  const code = document.createElement("code")
  code.textContent = other
  pre.append(code)
  const use = document.createElement("button")
  use.type = "button"
  use.className = "button-quiet"
  use.textContent = texts.conflictUse || ""
  use.addEventListener("click", () => {
    const mine = editorView.state.doc.toString()
    editorView.dispatch({changes: {from: 0, to: editorView.state.doc.length, insert: code.textContent}})
    code.textContent = mine
    try { localStorage.setItem(`${key}:other`, mine) } catch { /* full or off */ }
  })
  const close = document.createElement("button")
  close.type = "button"
  close.className = "button-quiet"
  close.textContent = texts.close || "×"
  close.addEventListener("click", () => { localStorage.removeItem(`${key}:other`); box.remove() })
  fold.append(summary, pre, use)
  box.append(said, fold, close)
  host.after(box)
}

function mount(ta) {
  if (ta.dataset.mounted) return
  ta.dataset.mounted = "1"
  const form = ta.form
  const submitButton = form.querySelector("[data-submit-default]")
  const state = document.querySelector("[data-draft-state]")
  const phrases = JSON.parse(ta.dataset.phrases || "{}")
  const theme = new Compartment()
  let dirty = false
  let saving = false
  const texts = document.querySelector("[data-offline-texts]")?.dataset || {}

  const start = startingCode(ta)
  const code = start.code
  let base = start.base  // draftHash of the server's copy this code started from
  dirty = start.dirty
  ta.value = code

  const showState = (text) => { if (state) { state.textContent = text; state.hidden = false } }

  // With `base`: the server refuses (409, with its copy) to overwrite a draft that changed
  // elsewhere since; then both are kept (showConflict) and the learner's goes up on top.
  async function saveToServer(keepalive = false) {
    if (!dirty || saving) return
    saving = true
    dirty = false
    const sent = ta.value
    let again = false
    try {
      const response = await fetch(ta.dataset.draftUrl, {
        method: "PUT", keepalive, credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrfToken()},
        body: JSON.stringify({code: sent, base}),
      })
      if (response.status === 409) {
        const theirs = await response.json()
        base = theirs.hash
        showConflict(host, theirs.code, view, texts, ta.dataset.draftKey)
        dirty = again = true
        return
      }
      if (response.status === 422 || response.status === 429) {
        // refused (too large, or the address's free storage is full): the server says why, and
        // the code stays here and in this browser; the same code is not sent again, an edit is
        const refusal = await response.json().catch(() => ({}))
        showState(refusal.message || ta.dataset.draftOffline)
        return
      }
      if (!response.ok) throw new Error(String(response.status))
      base = draftHash(sent)
      if (ta.value === sent) writeLocal(ta.dataset.draftKey, sent, base, true)
      else dirty = true
      showState(ta.dataset.draftSaved)
    } catch {
      dirty = true
      showState(ta.dataset.draftOffline)
    } finally {
      saving = false
      if (again) saveToServer()
    }
  }

  // In a shadow root: CodeMirror's styles are then constructed style sheets, which the page's
  // CSP (style-src 'self', no inline <style>) allows.
  const host = document.createElement("div")
  host.className = "code-editor"
  ta.after(host)
  ta.hidden = true
  const shadow = host.attachShadow({mode: "open"})
  const help = document.createElement("p")  // ids do not cross into a shadow root: a copy
  help.id = "editor-help-copy"
  help.hidden = true
  help.textContent = document.getElementById(ta.getAttribute("aria-describedby"))?.textContent || ""
  shadow.append(help)
  const view = new EditorView({
    parent: shadow,
    root: shadow,
    state: EditorState.create({
      doc: code,
      extensions: [
        // before basicSetup, whose completion keys are also of the highest precedence
        Prec.highest(keymap.of([{key: "Escape", run: escape}])),
        // before basicSetup, so Mod-Enter submits instead of inserting a blank line
        keymap.of([{key: "Mod-Enter", run: () => { form.requestSubmit(submitButton); return true }}]),
        basicSetup,
        indentUnit.of("    "),  // the starters' unit: Enter after `for …:` and Backspace move by 4
        failingGutter,
        keymap.of([indentWithTab]),
        python(),
        EditorState.phrases.of(phrases),
        theme.of(dark.matches ? darkTheme : []),
        wrapping.of(wrapped()),
        EditorView.contentAttributes.of({
          "aria-label": document.querySelector(`label[for="${ta.id}"]`)?.textContent.trim() || "Code",
          "aria-describedby": help.id,
        }),
        EditorView.theme({
          "&": {minHeight: "18rem", fontSize: "0.9rem"},
          ".cm-activeLine, .cm-activeLineGutter": {backgroundColor: "transparent"},  // contrast
          "&.cm-focused": {outline: "none"},  // the page draws the focus ring around the host
          // Wider than a phone, lines don't wrap: the scroller scrolls sideways with app.css's
          // edge shadows as the cue (its custom properties reach in here).
          ".cm-scroller": {
            fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace',
            background: "var(--scroll-cue-layers)"},
        }),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return
          ta.value = update.state.doc.toString()
          writeLocal(ta.dataset.draftKey, ta.value, base)
          dirty = true
        }),
      ],
    }),
  })
  editorView = view
  const kept = start.other ?? localStorage.getItem(`${ta.dataset.draftKey}:other`)
  if (kept !== null) showConflict(host, kept, view, texts, ta.dataset.draftKey)
  markFailingLine()
  // the label still leads to the editor
  document.querySelector(`label[for="${ta.id}"]`)?.addEventListener("click", () => view.focus())
  dark.addEventListener("change", (e) => {
    view.dispatch({effects: theme.reconfigure(e.matches ? darkTheme : [])})
  })
  narrow.addEventListener("change", () => view.dispatch({effects: wrapping.reconfigure(wrapped())}))
  setInterval(() => saveToServer(), SERVER_SAVE_MS)
  window.addEventListener("pagehide", () => saveToServer(true))
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") saveToServer(true)
  })
  // What Submit sends becomes the server's draft (app/submissions/service.enqueue): edits made
  // after it start from it. Sent later from the outbox, offline.js says so (draft-rebased).
  let submitted = null
  form.addEventListener("submit", () => {
    submitted = ta.value
    writeLocal(ta.dataset.draftKey, ta.value, base)
  })
  form.addEventListener("htmx:afterRequest", (event) => {
    if (submitted !== null && event.detail.successful) {
      base = draftHash(submitted)
      if (ta.value === submitted) { dirty = false; writeLocal(ta.dataset.draftKey, submitted, base, true) }
    }
    submitted = null
  })
  document.addEventListener("treino:draft-rebased", (event) => {
    if (event.detail.key !== ta.dataset.draftKey) return
    base = draftHash(event.detail.code)
    if (ta.value === event.detail.code) dirty = false
  })
  window.addEventListener("online", () => saveToServer())
  document.querySelector("[data-reset-form]")?.addEventListener("submit", () => {
    localStorage.removeItem(ta.dataset.draftKey)
    localStorage.removeItem(`${ta.dataset.draftKey}:other`)
    dirty = false
  })
  if (dirty) saveToServer()
}

// A verdict that has just come is scrolled to (smoothly unless the reader asked for less motion:
// app.css's scroll-behavior) when its top is not already on screen, below the editor on a phone.
function bringIntoView(card) {
  if (!card) return
  const top = card.getBoundingClientRect().top
  if (top < 0 || top > window.innerHeight * 0.8) card.scrollIntoView({block: "start"})
}

function labelShortcuts(root) {
  if (!isMac) return
  root.querySelectorAll("[data-shortcut]").forEach((kbd) => { kbd.textContent = "⌘+Enter" })
}

function scan(root) {
  root.querySelectorAll("textarea[data-code-editor]").forEach(mount)
  labelShortcuts(root)
}

scan(document)
document.addEventListener("htmx:load", (event) => {
  // a newly opened hint takes the focus, so keyboard and screen-reader users land on it
  const swapped = event.detail.elt
  if (swapped.id === "submission-status") {
    markFailingLine()
    if ("arrived" in swapped.dataset) bringIntoView(swapped.querySelector(".verdict-card"))
  }
  if (swapped.id === "hints") swapped.querySelector("[data-autofocus]")?.focus()
})
// A busy tutor answers Submit with 503 and a status line saying so (app/capacity.py): shown in
// place of the status, while the editor and this browser's draft keep the code to send again.
// A refused Submit (429: this learner's job is still waiting, or too much code from one network)
// answers with the same kind of status line, saying why and when to send again. (The event's
// detail.elt is the target the fragment would replace; the form that sent it is requestConfig's.)
document.addEventListener("htmx:beforeSwap", (event) => {
  const sender = event.detail.requestConfig?.elt
  if (![429, 503].includes(event.detail.xhr.status) || !sender?.matches?.("form.code-form")) return
  event.detail.shouldSwap = true
  event.detail.isError = false
})
