package runstore

// StaleTemporalSQL lets the external tests EXPLAIN the statement.
const StaleTemporalSQL = staleTemporalSQL

// ListRunsSQL lets the external tests EXPLAIN the statement.
const ListRunsSQL = listRunsSQL
