// Package contract is the suite that holds both engines to the same
// business outcome: one set of scenarios, run by each engine's harness
// (River's riverdrivertest shape). Scenarios assert on business truth — rows
// that activities wrote in Postgres — and use the engine's RunView only for
// what the port promises about it.
//
// Run one cell of the matrix with
//
//	go test ./test/ -run 'TestContract/lease/idempotent_enqueue'
package contract
