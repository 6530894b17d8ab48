package runstore

// StaleTemporalSQL lets the external tests EXPLAIN the statement.
const StaleTemporalSQL = staleTemporalSQL

// ListQuery lets the external tests EXPLAIN the listing (its versions
// read on the database given).
var ListQuery = listQuery

// Engines lets the external tests compare the engines with the schema's.
var Engines = engines
