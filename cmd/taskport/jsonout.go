package main

import (
	"time"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/plans"
)

// The --json shapes of the business read commands: snake_case keys, as
// runJSON's, so that a script reads every command alike.

type timelineJSON struct {
	PlanID  string              `json:"plan_id"`
	Status  string              `json:"status"`
	Title   string              `json:"title"`
	Entries []timelineEntryJSON `json:"entries"`
}

type timelineEntryJSON struct {
	At     time.Time `json:"at"`
	Source string    `json:"source"`
	Event  string    `json:"event"`
	Detail string    `json:"detail,omitempty"`
	RunID  string    `json:"run_id,omitempty"`
}

func jsonTimeline(tl plans.Timeline) timelineJSON {
	out := timelineJSON{PlanID: tl.Plan.ID.String(), Status: string(tl.Plan.Status), Title: tl.Plan.Title,
		Entries: make([]timelineEntryJSON, len(tl.Entries))}
	for i, e := range tl.Entries {
		out.Entries[i] = timelineEntryJSON{At: e.At.UTC(), Source: e.Source, Event: e.Event, Detail: e.Detail, RunID: e.RunID}
	}
	return out
}

type decisionJSON struct {
	ID         string     `json:"id"`
	PlanID     string     `json:"plan_id"`
	Kind       string     `json:"kind"`
	RunID      string     `json:"run_id"`
	Reason     string     `json:"reason"`
	Status     string     `json:"status"`
	ResolvedBy string     `json:"resolved_by,omitempty"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
}

func jsonDecisions(ds []acquisition.Decision) []decisionJSON {
	out := make([]decisionJSON, len(ds))
	for i, d := range ds {
		out[i] = decisionJSON{ID: d.ID.String(), PlanID: d.PlanID.String(), Kind: string(d.Kind), RunID: string(d.RunID),
			Reason: d.Reason, Status: string(d.Status), ResolvedBy: d.ResolvedBy, CreatedAt: d.CreatedAt.UTC()}
		if !d.ResolvedAt.IsZero() {
			at := d.ResolvedAt.UTC()
			out[i].ResolvedAt = &at
		}
	}
	return out
}

type migrationJSON struct {
	Set     string `json:"set"`
	Version int64  `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

func jsonMigrations(st []migrations.Status) []migrationJSON {
	out := make([]migrationJSON, len(st))
	for i, s := range st {
		out[i] = migrationJSON{Set: s.Set, Version: s.Version, Name: s.Name, Applied: s.Applied}
	}
	return out
}
