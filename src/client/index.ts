/**
 * `opqueue/client`, kept for the imports written before the client became a package of its own: it re-exports all
 * of `@opqueue/client` (packages/client/), which a product installs without the service's server and native
 * dependencies.
 */
export * from "@opqueue/client";
