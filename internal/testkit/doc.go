// Package testkit groups the harnesses the project's tests run against real
// parts: pgtest (a migrated database per test on the shared server),
// pgcluster (a private Postgres cluster that fault tests may restart or kill),
// devserver (a Temporal dev server from the CLI) and proc (worker
// subprocesses to SIGKILL, SIGSTOP and SIGCONT).
package testkit
