// Package app wires the business layer: Register puts the nine kinds and
// their bound activities into a registry, for cmd/ and for tests, so both
// run exactly the same wiring on either engine.
package app

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/activities"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// Deps are what the step bodies need.
type Deps struct {
	Pool       *pgxpool.Pool         // business pool (its own, ADR 2.8)
	Downloader activities.Downloader // *qbittorrent.Client
	Files      activities.Files      // nil: activities.LocalFiles{} (fileimport); tests inject faults here
	Config     activities.Config     // download dir, webhook URL, chunk size, logger
	// Engine returns the process's engine, read at each hand-over between
	// kinds (the engine is built from the registry Register fills, so it
	// exists only after it): one that enqueues in a transaction
	// (porttx.Enqueuer: both engines and the router) records the next run
	// in the step's own commit; nil, or any other engine, leaves the
	// hand-overs to the outbox. It overrides Config.Engine.
	Engine func() port.TaskEngine
}

// Register adds the nine kinds and binds every activity they call.
func Register(reg *port.Registry, deps Deps) error {
	if deps.Files == nil {
		deps.Files = activities.LocalFiles{}
	}
	if engine := deps.Engine; engine != nil {
		deps.Config.Engine = func() outbox.Enqueuer {
			e, _ := engine().(outbox.Enqueuer)
			return e
		}
	}
	acts, err := activities.New(deps.Pool, deps.Downloader, deps.Files, deps.Config)
	if err != nil {
		return fmt.Errorf("register business kinds: %w", err)
	}
	if err := reg.Register(workflows.Definitions()...); err != nil {
		return fmt.Errorf("register business kinds: %w", err)
	}
	err = reg.RegisterActivity(
		port.Bind(workflows.CheckApproval, acts.CheckApproval),
		port.Bind(workflows.HandOffApproved, acts.HandOffApproved),
		port.Bind(workflows.SubmitDownload, acts.SubmitDownload),
		port.Bind(workflows.CheckDownload, acts.CheckDownload),
		port.Bind(workflows.ImportAsset, acts.ImportAsset),
		port.Bind(workflows.VerifyAsset, acts.VerifyAsset),
		port.Bind(workflows.CleanupDownload, acts.CleanupDownload),
		port.Bind(workflows.Compensate, acts.Compensate),
		port.Bind(workflows.ResolveDecision, acts.ResolveDecision),
		port.Bind(workflows.OpenDecision, acts.OpenDecision),
		port.Bind(workflows.PostWebhook, acts.PostWebhook),
	)
	if err != nil {
		return fmt.Errorf("register business activities: %w", err)
	}
	return nil
}
