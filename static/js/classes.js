// The class page's report is swapped whole whenever the class's work changes (static/js/status.js
// asks for it again); what the teacher had opened or scrolled stays so across the swap: each
// mistake's verdict text they opened (data-keep names it) and the grid's sideways scroll.
let kept = null

document.addEventListener("htmx:beforeSwap", (event) => {
  const report = event.detail.target
  if (report?.id !== "class-report") return
  kept = {
    open: new Set([...report.querySelectorAll("details[open][data-keep]")].map((d) => d.dataset.keep)),
    left: report.querySelector(".class-grid-scroll")?.scrollLeft ?? 0,
  }
})

// htmx:load comes for each fragment swapped in
document.addEventListener("htmx:load", (event) => {
  const report = event.detail.elt
  if (report?.id !== "class-report" || kept === null) return
  report.querySelectorAll("details[data-keep]").forEach((d) => { if (kept.open.has(d.dataset.keep)) d.open = true })
  const grid = report.querySelector(".class-grid-scroll")
  if (grid) grid.scrollLeft = kept.left
  kept = null
})
