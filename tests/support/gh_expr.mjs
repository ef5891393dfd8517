// Evaluates GitHub Actions expressions with GitHub's own evaluator (npm
// @actions/expressions). stdin: [{expr, context, status}], stdout: [{value, text}].
// `status` gives the job's status functions (success(), failure(), ...), which the
// library leaves to the runner. Used by tests/support/github.py.
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";

const main = process.env.ACTIONS_EXPRESSIONS_MODULE; // .../dist/index.js
const { Lexer, Parser, Evaluator, data } = await import(pathToFileURL(main).href);
const { truthy } = await import(pathToFileURL(main.replace(/index\.js$/, "result.js")).href);
const CONTEXTS = ["github", "inputs", "vars", "secrets", "needs", "env", "steps", "job", "runner", "matrix", "strategy"];
const STATUS = ["success", "always", "failure", "cancelled"];

const requests = JSON.parse(readFileSync(0, "utf8"));
const answers = requests.map(({ expr, context, status }) => {
  try {
    const lexed = new Lexer(expr).lex();
    const infos = STATUS.map((name) => ({ name, minArgs: 0, maxArgs: 0 }));
    const tree = new Parser(lexed.tokens, CONTEXTS, infos).parse();
    const funcs = new Map(
      STATUS.map((name) => [name, { name, minArgs: 0, maxArgs: 0, call: () => new data.BooleanData(Boolean(status?.[name])) }]),
    );
    const ctx = JSON.parse(JSON.stringify(context ?? {}), data.reviver);
    const result = new Evaluator(tree, ctx, funcs).evaluate();
    return { value: truthy(result), text: result.coerceString() };
  } catch (err) {
    return { error: String(err?.message ?? err) };
  }
});
process.stdout.write(JSON.stringify(answers));
