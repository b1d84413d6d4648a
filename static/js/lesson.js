// A lesson card counts as read once it was on screen for a moment, not the instant it scrolls
// past: each card sends "card-read" (its hx-trigger) after READ_MS in view without a break.
// A card taller than the screen counts as in view while it fills half of it.
const READ_MS = 1500
const timers = new Map()

function inView(entry) {
  const screen = entry.rootBounds ? entry.rootBounds.height : window.innerHeight
  return entry.isIntersecting &&
    (entry.intersectionRatio >= 0.5 || entry.intersectionRect.height >= screen / 2)
}

const observer = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const card = entry.target
    if (inView(entry) && document.visibilityState === "visible") {
      if (!timers.has(card)) {
        timers.set(card, setTimeout(() => {
          observer.unobserve(card)
          timers.delete(card)
          card.dispatchEvent(new CustomEvent("card-read"))
        }, READ_MS))
      }
    } else if (timers.has(card)) {
      clearTimeout(timers.get(card))
      timers.delete(card)
    }
  }
}, {threshold: [0, 0.25, 0.5, 0.75, 1]})

document.querySelectorAll("li.card[hx-trigger^='card-read']").forEach((card) => observer.observe(card))
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") return
  timers.forEach((timer) => clearTimeout(timer))  // a hidden tab reads nothing
  timers.clear()
})

// A link to a "Go further" card opens the fold it is in.
function openTarget() {
  const target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)))
  const fold = target && target.closest("details")
  if (fold && !fold.open) { fold.open = true; target.scrollIntoView() }
}
openTarget()
window.addEventListener("hashchange", openTarget)
