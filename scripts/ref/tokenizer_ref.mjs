// Reference token ids from tokenizers.js (npm @huggingface/tokenizers@0.2.0, pure JS).
//
// Run by hand, from a folder where the package is installed:
//   npm install @huggingface/tokenizers@0.2.0
//   node scripts/ref/tokenizer_ref.mjs TOKENIZER_DIR CORPUS.jsonl OUT.jsonl
// Writes one {"ids": [...], "decoded": "..."} line per corpus line (add_special_tokens=true).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [dir, corpus, out] = process.argv.slice(2);
const require = createRequire(path.join(process.cwd(), "x.js"));
const mod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = mod.Tokenizer ?? mod.default.Tokenizer;
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);
const lines = fs.readFileSync(corpus, "utf8").split("\n").filter((l) => l.length > 0);
const rows = lines.map((l) => {
  const { text } = JSON.parse(l);
  const ids = tok.encode(text).ids.map(Number);
  return JSON.stringify({ ids, decoded: ids.length ? tok.decode(ids) : "" });
});
fs.writeFileSync(out, rows.join("\n") + "\n");
console.log(`wrote ${rows.length} rows to ${out}`);
