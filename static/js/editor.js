// The exercise editor: CodeMirror 6 over the page's <textarea name="code">, which stays the
// source of truth (the form posts it; without JavaScript it is the editor). Drafts are kept in
// this browser at once on every change and on the server every few seconds.
import {
  basicSetup, closeCompletion, Compartment, completionStatus, EditorState, EditorView, gutter,
  GutterMarker, indentUnit, indentWithTab, keymap, oneDark, Prec, python, RangeSet, StateEffect, StateField,
} from "../vendor/codemirror.js"

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

function writeLocal(key, code) {
  try { localStorage.setItem(key, JSON.stringify({code, at: Date.now()})) } catch { /* full or off */ }
}

// The newer of this browser's draft and the server's (already in the textarea) wins.
function startingCode(ta) {
  const key = ta.dataset.draftKey
  if ("draftReset" in ta.dataset) { localStorage.removeItem(key); return ta.value }
  const local = readLocal(key)
  const serverAt = Date.parse(ta.dataset.draftAt || "") || 0
  if (local && typeof local.code === "string" && local.code !== ta.value && local.at > serverAt) {
    return local.code
  }
  return ta.value
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

  const code = startingCode(ta)
  dirty = code !== ta.value
  ta.value = code

  const showState = (text) => { if (state) { state.textContent = text; state.hidden = false } }

  async function saveToServer(keepalive = false) {
    if (!dirty || saving) return
    saving = true
    dirty = false
    try {
      const response = await fetch(ta.dataset.draftUrl, {
        method: "PUT", keepalive, credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrfToken()},
        body: JSON.stringify({code: ta.value}),
      })
      if (!response.ok) throw new Error(String(response.status))
      showState(ta.dataset.draftSaved)
    } catch {
      dirty = true
      showState(ta.dataset.draftOffline)
    } finally {
      saving = false
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
        EditorView.contentAttributes.of({
          "aria-label": document.querySelector(`label[for="${ta.id}"]`)?.textContent.trim() || "Code",
          "aria-describedby": help.id,
        }),
        EditorView.theme({
          "&": {minHeight: "18rem", fontSize: "0.9rem"},
          ".cm-activeLine, .cm-activeLineGutter": {backgroundColor: "transparent"},  // contrast
          "&.cm-focused": {outline: "none"},  // the page draws the focus ring around the host
          // Lines never wrap (Python's indentation would be lost): the scroller scrolls sideways
          // with app.css's edge shadows as the cue (its custom properties reach in here).
          ".cm-scroller": {
            fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace',
            background: "var(--scroll-cue-layers)"},
        }),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return
          ta.value = update.state.doc.toString()
          writeLocal(ta.dataset.draftKey, ta.value)
          dirty = true
        }),
      ],
    }),
  })
  editorView = view
  markFailingLine()
  // the label still leads to the editor
  document.querySelector(`label[for="${ta.id}"]`)?.addEventListener("click", () => view.focus())
  dark.addEventListener("change", (e) => {
    view.dispatch({effects: theme.reconfigure(e.matches ? darkTheme : [])})
  })
  setInterval(() => saveToServer(), SERVER_SAVE_MS)
  window.addEventListener("pagehide", () => saveToServer(true))
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") saveToServer(true)
  })
  form.addEventListener("submit", () => writeLocal(ta.dataset.draftKey, ta.value))
  document.querySelector("[data-reset-form]")?.addEventListener("submit", () => {
    localStorage.removeItem(ta.dataset.draftKey)
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
document.addEventListener("htmx:beforeSwap", (event) => {
  if (event.detail.xhr.status !== 503 || !event.detail.elt.matches?.("form.code-form")) return
  event.detail.shouldSwap = true
  event.detail.isError = false
})
