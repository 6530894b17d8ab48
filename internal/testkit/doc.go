// Package testkit groups the harnesses the project's tests run against real
// parts: pgtest (a migrated database per test on the shared server),
// pgcluster (a private Postgres cluster that fault tests may restart or kill),
// devserver (a Temporal dev server from the CLI), temporalserver (a
// production-shaped Temporal server: Postgres persistence, mTLS) and proc
// (worker subprocesses to SIGKILL, SIGSTOP and SIGCONT).
//
// The package itself holds what the server harnesses share: launching a
// server for one test (Start), for a whole test binary (Main), or for the
// tests of a binary that ask for it (Shared, launched on first use);
// stopping it at the end, and printing the tail of its log when something
// fails.
package testkit
