// Lint the TypeScript sources and tests with the recommended typescript-eslint rules.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "data/", "bench/results/", "packages/*/dist/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "no-constant-condition": ["error", { checkLoops: false }],
    },
  },
  {
    files: ["**/*.mjs", "**/*.js"],
    ignores: ["ui/**"],
    languageOptions: { globals: { process: "readonly", console: "readonly", URL: "readonly" } },
  },
  {
    // The dashboard: plain ES modules run by the browser.
    files: ["ui/**/*.js"],
    languageOptions: {
      sourceType: "module",
      globals: Object.fromEntries(
        [
          "window",
          "document",
          "location",
          "history",
          "sessionStorage",
          "fetch",
          "console",
          "atob",
          "setTimeout",
          "clearTimeout",
          "URL",
          "URLSearchParams",
          "FormData",
          "Node",
          "CSS",
        ].map((name) => [name, "readonly"]),
      ),
    },
  },
);
