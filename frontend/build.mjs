// Builds static/vendor/ from the pinned packages of package-lock.json: the CodeMirror bundle
// (esbuild), htmx and axe-core (copied), their licences, and MANIFEST.json with the sha256 of
// every file, so the committed output can be checked against what this lock file produces.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const vendor = join(here, "..", "static", "vendor");
const modules = join(here, "node_modules");
const version = (name) => JSON.parse(readFileSync(join(modules, name, "package.json"))).version;

rmSync(vendor, { recursive: true, force: true });
mkdirSync(join(vendor, "LICENSES"), { recursive: true });

await build({
  entryPoints: [join(here, "editor-entry.js")], bundle: true, minify: true, format: "esm",
  target: "es2020", outfile: join(vendor, "codemirror.js"), legalComments: "none", logLevel: "warning",
});
copyFileSync(join(modules, "htmx.org/dist/htmx.min.js"), join(vendor, `htmx-${version("htmx.org")}.min.js`));
copyFileSync(join(modules, "axe-core/axe.min.js"), join(vendor, "axe.min.js"));

const licensed = ["htmx.org", "axe-core", "codemirror", "@codemirror/view", "@codemirror/state",
  "@codemirror/commands", "@codemirror/language", "@codemirror/autocomplete",
  "@codemirror/lang-python", "@codemirror/theme-one-dark", "@lezer/common", "@lezer/highlight",
  "@lezer/lr", "@lezer/python", "style-mod", "w3c-keyname", "crelt"];
for (const name of licensed) {
  const file = readdirSync(join(modules, name)).find((f) => /^licen[cs]e/i.test(f));
  copyFileSync(join(modules, name, file), join(vendor, "LICENSES", `${name.replace("/", "__")}.txt`));
}

const manifest = { versions: Object.fromEntries(licensed.map((n) => [n, version(n)])), files: {} };
const walk = (dir, prefix = "") => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? walk(join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`]);
for (const file of walk(vendor).sort()) {
  manifest.files[file] = createHash("sha256").update(readFileSync(join(vendor, file))).digest("hex");
}
writeFileSync(join(vendor, "MANIFEST.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`static/vendor: ${Object.keys(manifest.files).length} files`);
