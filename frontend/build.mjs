// Copies the pinned browser libraries into static/vendor/ and writes MANIFEST.json (sha256 of
// each file), so the committed bundle can be checked against what this lock file produces.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const vendor = join(here, "..", "static", "vendor");
const pkg = (name) => JSON.parse(readFileSync(join(here, "node_modules", name, "package.json")));

const files = {
  [`htmx-${pkg("htmx.org").version}.min.js`]: join(here, "node_modules/htmx.org/dist/htmx.min.js"),
};

mkdirSync(vendor, { recursive: true });
const manifest = {};
for (const [name, source] of Object.entries(files)) {
  copyFileSync(source, join(vendor, name));
  manifest[name] = createHash("sha256").update(readFileSync(source)).digest("hex");
}
writeFileSync(join(vendor, "MANIFEST.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`wrote ${Object.keys(manifest).length} files to static/vendor/`);
