"""Makes static/icons/*.png from static/favicon.svg's design with Debian's Chromium (run by hand
after changing the logo: `.venv/bin/python -m tests.offline.make_icons`; the PNGs are committed).

- icon-192/512: the favicon as it is (rounded orange square, white T), for light backgrounds;
- icon-maskable-192/512: full-bleed square, the T inside the central 60 % (the safe zone a
  launcher's mask keeps);
- icon-dark-192/512: the dark theme's colours (orange T on the page's darkest surface);
- apple-touch-icon (180): full-bleed, as iOS rounds the corners itself."""

import shutil

from playwright.sync_api import sync_playwright

from app.config import ROOT

OUT = ROOT / "static" / "icons"
T = '<path d="M9 10h14M16 10v14" stroke="{fg}" stroke-width="4" stroke-linecap="round"/>'


def svg(bg: str, fg: str, *, full: bool, scale: float = 1.0) -> str:
    rect = f'<rect width="32" height="32" rx="{0 if full else 7}" fill="{bg}"/>'
    glyph = f'<g transform="translate(16 17) scale({scale}) translate(-16 -17)">{T.format(fg=fg)}</g>'
    return f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">{rect}{glyph}</svg>'


ICONS = {
    "icon": svg("#c2410c", "#fff", full=False),
    "icon-maskable": svg("#c2410c", "#fff", full=True, scale=0.75),
    "icon-dark": svg("#1c1917", "#fb923c", full=False),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        for name, source in ICONS.items():
            for size in (192, 512):
                page = browser.new_page(viewport={"width": size, "height": size})
                page.set_content(
                    f"<style>html,body{{margin:0;background:transparent}}svg{{display:block;width:{size}px;"
                    f"height:{size}px}}</style>{source}"
                )
                page.screenshot(path=str(OUT / f"{name}-{size}.png"), omit_background=True)
                page.close()
        page = browser.new_page(viewport={"width": 180, "height": 180})
        page.set_content(
            "<style>html,body{margin:0}svg{display:block;width:180px;height:180px}</style>"
            + svg("#c2410c", "#fff", full=True, scale=0.8)
        )
        page.screenshot(path=str(OUT / "apple-touch-icon.png"))
        browser.close()


if __name__ == "__main__":
    main()
