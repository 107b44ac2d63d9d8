// Parse each Mermaid file given on the command line with Mermaid's own parser.
// Prints "OK <file>" or "ERR <file>: <message>"; exits 1 if any file fails.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!DOCTYPE html><body></body>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");

let failed = 0;
for (const file of process.argv.slice(2)) {
  try {
    await mermaid.parse(readFileSync(file, "utf8"));
    console.log(`OK ${file}`);
  } catch (err) {
    failed += 1;
    console.log(`ERR ${file}: ${err.message.split("\n").join(" ")}`);
  }
}
process.exit(failed ? 1 : 0);
