package runstore

// StaleTemporalSQL lets the external tests EXPLAIN the statement.
const StaleTemporalSQL = staleTemporalSQL

// ListQuery lets the external tests EXPLAIN the listing.
var ListQuery = listQuery
