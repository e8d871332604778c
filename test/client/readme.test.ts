/**
 * packages/client/README.md documents everything `@opqueue/client` exports for a product to call: every exported
 * function, every method of its exported interfaces and classes (`JobsClient`, `DeliveryVerifier`), every exported
 * constant, and every field a caller can pass them (an option, a filter, a patch, a definition, at any depth:
 * `enqueue`'s `onBehalfOf.authority.kind`, `setOperationLimits`' `rate.period_ms`).
 *
 * The list comes from the package's own sources through the TypeScript compiler's type checker, starting at
 * packages/client/src/index.ts, so a method or option added to the client without a word in the README fails here.
 * A name counts as documented when it appears as a word in the README's code: a fenced block or an inline `code` span.
 * The inputs walked are the parameter types of the functions and methods, as far as they are declared in the
 * package's sources (a Date, a Headers or a Fastify instance is not the package's to document); the methods of an
 * argument the caller hands over as it is (a reply's `header`) and error classes (listed by `ERROR_CODES`) are not
 * counted.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { REPO_ROOT } from "../helpers/cli-process.js";

const PACKAGE_DIR = path.join(REPO_ROOT, "packages", "client");
const SOURCE_DIR = path.join(PACKAGE_DIR, "src");
const README = path.join(PACKAGE_DIR, "README.md");

/** A name the README must show, with the first place that asks for it (for the failure message). */
interface Documentable {
  name: string;
  where: string;
}

/** Every name of the package's exports that the README must show, derived from its sources. */
function exportedNames(): Documentable[] {
  const configFile = ts.readConfigFile(path.join(PACKAGE_DIR, "tsconfig.json"), (file) => ts.sys.readFile(file));
  const parsed = ts.parseJsonConfigFileContent(configFile.config, ts.sys, PACKAGE_DIR);
  const entryFile = path.join(SOURCE_DIR, "index.ts");
  const program = ts.createProgram({ rootNames: [entryFile], options: { ...parsed.options, noEmit: true } });
  const checker = program.getTypeChecker();
  const entry = program.getSourceFile(entryFile);
  const moduleSymbol = entry && checker.getSymbolAtLocation(entry);
  assert.ok(moduleSymbol, `the package's entry ${entryFile} compiles`);

  const found = new Map<string, string>();
  const need = (name: string, where: string) => {
    if (!found.has(name)) found.set(name, where);
  };
  const isOurs = (declaration: ts.Declaration) => declaration.getSourceFile().fileName.startsWith(`${SOURCE_DIR}/`);
  const walked = new Set<ts.Type>();

  // The fields a caller can pass in a value of `type`, at any depth, as far as the package declares them.
  const walkInput = (type: ts.Type, where: string): void => {
    if (walked.has(type)) return;
    walked.add(type);
    if (type.isUnionOrIntersection()) {
      for (const member of type.types) walkInput(member, where);
      if (type.isUnion()) return;
    }
    if (checker.isArrayType(type) || checker.isTupleType(type)) {
      for (const element of checker.getTypeArguments(type as ts.TypeReference)) walkInput(element, where);
      return;
    }
    // A function the caller gives (a signer, `operationIdFor`) is called with the package's values: not an input.
    if (type.getCallSignatures().length > 0) return;
    for (const property of checker.getPropertiesOfType(type)) {
      const declaration = property.valueDeclaration ?? property.declarations?.[0];
      if (declaration === undefined || !isOurs(declaration) || ts.isMethodSignature(declaration)) continue;
      const propertyType = checker.getNonNullableType(checker.getTypeOfSymbol(property));
      // `secret?: never` says "not with the other key": the union member that allows it names it.
      if (propertyType.flags & ts.TypeFlags.Never) continue;
      need(property.name, `${where}.${property.name}`);
      walkInput(propertyType, `${where}.${property.name}`);
    }
  };
  const walkCall = (signature: ts.Signature, where: string) => {
    for (const parameter of signature.parameters)
      walkInput(checker.getTypeOfSymbol(parameter), `${where}(${parameter.name})`);
  };
  // The methods of an interface or class the package declares, and what they take.
  const walkMethods = (type: ts.Type, owner: string) => {
    for (const property of checker.getPropertiesOfType(type)) {
      const declaration = property.valueDeclaration ?? property.declarations?.[0];
      if (declaration === undefined || !isOurs(declaration)) continue;
      if (!ts.isMethodSignature(declaration) && !ts.isMethodDeclaration(declaration)) continue;
      if (ts.getCombinedModifierFlags(declaration) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) continue;
      need(property.name, `${owner}.${property.name}`);
      for (const signature of checker.getTypeOfSymbol(property).getCallSignatures())
        walkCall(signature, `${owner}.${property.name}`);
    }
  };

  for (const exported of checker.getExportsOfModule(moduleSymbol)) {
    const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    const name = exported.name;
    if (symbol.flags & ts.SymbolFlags.Value) {
      const type = checker.getTypeOfSymbol(symbol);
      if (type.getConstructSignatures().length > 0) {
        walkMethods(checker.getDeclaredTypeOfSymbol(symbol), name);
        continue;
      }
      need(name, name);
      for (const signature of type.getCallSignatures()) walkCall(signature, name);
    } else if (symbol.flags & ts.SymbolFlags.Interface) {
      walkMethods(checker.getDeclaredTypeOfSymbol(symbol), name);
    }
  }
  return [...found].map(([name, where]) => ({ name, where }));
}

/** Every word of the README's code: fenced blocks and inline `code` spans. */
function wordsOfReadmeCode(markdown: string): Set<string> {
  const code: string[] = [];
  const prose = markdown.replace(/^```[^\n]*\n([\s\S]*?)^```$/gm, (_block, body: string) => {
    code.push(body);
    return "";
  });
  for (const span of prose.matchAll(/`([^`\n]+)`/g)) code.push(span[1] ?? "");
  return new Set(code.join("\n").match(/[A-Za-z_$][\w$]*/g) ?? []);
}

test("packages/client/README.md shows every exported function, method, constant and option field of the client", () => {
  const names = exportedNames();
  // The walk reaches the corners the README once missed; if it does not, it proves nothing.
  for (const expected of [
    "createJobsClient",
    "enqueueBatch",
    "wait",
    "idempotencyKey",
    "ttlMs",
    "createSchedule",
    "period_ms",
    "heartbeat",
  ]) {
    assert.ok(
      names.some((entry) => entry.name === expected),
      `the list derived from the sources has ${expected}`,
    );
  }
  const documented = wordsOfReadmeCode(fs.readFileSync(README, "utf8"));
  const missing = names.filter((entry) => !documented.has(entry.name)).map((entry) => `${entry.name} (${entry.where})`);
  assert.ok(missing.length === 0, `packages/client/README.md never shows these in code:\n  ${missing.join("\n  ")}`);
});
