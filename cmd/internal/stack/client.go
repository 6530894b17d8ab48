package stack

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// Engine is the port.TaskEngine that also serves operators (port.Admin):
// both engines are one.
type Engine interface {
	port.TaskEngine
	port.Admin
}

// Client is an engine as its callers and operators use it (Enqueue,
// Signal, Cancel, Get, ListRuns, Retry), never started: no worker, no
// dispatcher, no admin server. `taskport runs` opens one.
type Client struct {
	Engine
	pool     *pgxpool.Pool
	temporal client.Client
}

// OpenClient opens the engine c chooses, from the flags BindEngine adds:
// one pool, the Temporal connection for the temporal engine, and a registry
// with the business kinds but no activities, since nothing runs here (a
// retry checks its input against the kind's current version). Close it.
func OpenClient(ctx context.Context, g *Globals, c Config, log *slog.Logger) (_ *Client, err error) {
	if err := c.validateEngine(); err != nil {
		return nil, usage(err)
	}
	reg := port.NewRegistry()
	if err := reg.Register(workflows.Definitions()...); err != nil {
		return nil, fmt.Errorf("register business kinds: %w", err)
	}
	cl := &Client{}
	defer func() {
		if err != nil {
			cl.Close()
		}
	}()
	if cl.pool, err = g.Pool(ctx, log, c.EnginePoolSize); err != nil {
		return nil, err
	}
	lease := func() (port.TaskEngine, error) {
		return leaseadapter.New(cl.pool, reg, leaseadapter.Config{Logger: log})
	}
	temporal := func() (port.TaskEngine, error) {
		if cl.temporal, err = dialTemporal(ctx, c, log, newMetricsRegistry(), nil); err != nil {
			return nil, err
		}
		return temporaladapter.New(cl.temporal, cl.pool, reg, temporaladapter.Config{TaskQueue: c.TaskQueue,
			WorkflowTaskTimeout: c.TemporalWorkflowTaskTimeout, Logger: log})
	}
	e, err := openEngine(c.Engine, cl.pool, log, lease, temporal, c.TemporalOptional)
	if err != nil {
		return nil, fmt.Errorf("%s engine: %w", c.Engine, err)
	}
	cl.Engine = e.(Engine) // both adapters and the router serve operators too
	return cl, nil
}

// Router is the client's router, or nil unless --engine both.
func (c *Client) Router() *router.Router {
	r, _ := c.Engine.(*router.Router)
	return r
}

// Pool is the client's database: the engine's tables, and the business
// tables beside them.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Close closes the Temporal connection and the pool.
func (c *Client) Close() {
	if c.temporal != nil {
		c.temporal.Close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
}
