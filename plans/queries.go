package plans

// openRunsSQL finds the plan's runs an engine may still be driving, in the
// shared run store (read-only). Compensation and notifications are left to
// finish: they are what a cancel starts.
const openRunsSQL = `
SELECT id FROM taskport.run
WHERE business_key = $1 AND status NOT IN ('succeeded', 'failed', 'canceled') AND kind <> ALL($2::text[])
ORDER BY created_at, id`
