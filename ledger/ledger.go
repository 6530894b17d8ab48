// Package ledger is the operation ledger of ADR 2.3 (the asset_operation
// table, which no other package names in SQL): a side effect is recorded as
// plan -> attempt(fencing token) -> result, and its commit is fenced on the
// attempt token so that a stale attempt can never overwrite a newer one.
// The business rows the effects change (plan, download_task, ...) are
// package acquisition's; a step changes them in Fenced.Apply, inside the
// fenced commit's transaction.
//
// Every function takes a DBTX, so it works on a pool or inside the caller's
// transaction; Run drives one fenced side effect from Begin to Commit. The
// package interprets one driver error, a Begin for a plan that does not
// exist (port.ErrNotFound); otherwise an absent row is an empty result
// (Read's found), and a refused Begin or Commit is port.ErrFenced.
package ledger

import (
	"github.com/taskport/taskport/internal/dbtx"
)

// DBTX is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx, so every write
// also works inside the caller's transaction.
type DBTX = dbtx.DBTX
