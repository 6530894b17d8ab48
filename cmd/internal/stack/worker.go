package stack

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
)

// RunWorker runs the worker on package host: the engine's worker, the
// outbox dispatcher (when dispatch) and the retention cleaner beside it,
// health and metrics on metricsAddr, and the graceful stop when ctx ends
// (readiness off first). When the engine's worker stops for good on its
// own, it returns an error (the process exits non-zero and is restarted).
func (s *Stack) RunWorker(ctx context.Context, c Config, metricsAddr string, dispatch bool) error {
	// The host checks the engine's tables; the media application needs its
	// own as well.
	checks := []host.Check{{Name: "schema", Func: func(ctx context.Context) error { return migrations.CheckSchema(ctx, s.bizPool) }}}
	if s.temporal != nil {
		checks = append(checks, host.Check{Name: "temporal", Func: func(ctx context.Context) error {
			_, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}})
	}
	var services []host.Service
	if dispatch {
		services = append(services, host.Service{
			Name: "outbox dispatcher",
			Start: func(ctx context.Context) error {
				if err := s.dispatcher.Start(ctx); err != nil {
					return err
				}
				s.dispatchWatch.setRunning(true)
				return nil
			},
			Stop: func(ctx context.Context) error {
				err := s.dispatcher.Stop(ctx)
				s.dispatchWatch.setRunning(false)
				return err
			},
			Ready: s.dispatchWatch.healthy,
		})
	}
	if s.cleaner != nil {
		services = append(services, host.Service{Name: "retention cleaner", Start: func(ctx context.Context) error {
			if err := s.cleaner.Start(ctx); err != nil {
				return err
			}
			s.log.Info("retention cleaner running", slog.String("retention", s.cleaner.Policy().String()))
			return nil
		}, Stop: s.cleaner.Stop})
	}
	h, err := host.New(host.Config{
		Pool: s.bizPool, Engine: s.engine, Start: port.StartOptions{Concurrency: c.Concurrency},
		Addr: metricsAddr, Gatherer: s.metrics, Checks: checks, Services: services,
		StopTimeout: c.StopTimeout, Logger: s.log.With(slog.String("engine", c.Engine)),
	})
	if err != nil {
		return err
	}
	s.host = h
	if err := h.Run(ctx); err != nil {
		return fmt.Errorf("%s worker: %w", c.Engine, err)
	}
	return nil
}
