// Validates generated documents against a JSON Schema with ajv (draft 2020-12) and
// ajv-formats: node ajv_check.mjs SCHEMA.json DOCS.jsonl. Exit 0 only if every line
// parses as JSON and validates.
import fs from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [schemaPath, docsPath] = process.argv.slice(2);
const schema = JSON.parse(fs.readFileSync(schemaPath, 'utf8'));
const ajv = new Ajv2020({ allErrors: true, strict: true, allowUnionTypes: true });
addFormats(ajv);
const validate = ajv.compile(schema);
const lines = fs.readFileSync(docsPath, 'utf8').split('\n').filter((l) => l.length > 0);
let failures = 0;
for (const line of lines) {
  let doc;
  try {
    doc = JSON.parse(line);
  } catch (e) {
    failures++;
    if (failures <= 5) console.error(`not JSON: ${line.slice(0, 200)}: ${e.message}`);
    continue;
  }
  if (!validate(doc)) {
    failures++;
    if (failures <= 5) console.error(`invalid: ${line.slice(0, 300)}\n  ${ajv.errorsText(validate.errors)}`);
  }
}
console.log(`${schemaPath}: ${lines.length} documents, ${failures} failures`);
process.exit(failures === 0 && lines.length > 0 ? 0 : 1);
