package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
)

// RunWorker starts the engine's worker and the dispatcher, serves health and
// metrics, and stops gracefully when ctx ends: readiness turns off first,
// then the dispatcher and the engine stop. When the engine's worker stops
// for good on its own, it returns an error (the process exits non-zero and
// is restarted).
func (s *Stack) RunWorker(ctx context.Context, c Config, metricsAddr string, dispatch bool) error {
	// schema: a rollback of the database under a running worker (restored
	// backup, migrate down) takes it out of service.
	checks := []namedCheck{{"postgres", s.bizPool.Ping}, {"schema", func(ctx context.Context) error { return migrations.CheckSchema(ctx, s.bizPool) }}}
	if s.temporal != nil {
		checks = append(checks, namedCheck{"temporal", func(ctx context.Context) error {
			_, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}})
	}
	var watch *dispatchWatch
	if dispatch {
		watch = s.dispatchWatch
	}
	s.health = newWorkerHealth(s.engine, watch, checks...)

	// The engine and the dispatcher stop when told to (stopWorker), not
	// when ctx ends, so readiness is off before either begins to stop.
	run := context.WithoutCancel(ctx)
	if err := s.engine.Start(run, port.StartOptions{Concurrency: c.Concurrency}); err != nil {
		return fmt.Errorf("start %s worker: %w", c.Engine, err)
	}
	if dispatch {
		if err := s.dispatcher.Start(run); err != nil {
			return fmt.Errorf("start dispatcher: %w", err)
		}
		s.dispatchWatch.setRunning(true)
	}
	if s.cleaner != nil {
		if err := s.cleaner.Start(run); err != nil {
			return errors.Join(fmt.Errorf("start retention cleaner: %w", err), s.stopWorker(c.StopTimeout))
		}
		s.log.Info("retention cleaner running", slog.String("retention", s.cleaner.Policy().String()))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}))
	s.health.register(mux, s.log)
	// The probes outlive ctx: while the stop drains, /readyz answers 503
	// instead of refusing connections, and /metrics can still be scraped.
	serving, stopServing := context.WithCancel(run)
	defer stopServing()
	addr, served, err := listenAndServe(serving, metricsAddr, mux)
	if err != nil {
		return errors.Join(err, s.stopWorker(c.StopTimeout))
	}
	s.log.Info("worker running", slog.String("engine", c.Engine), slog.String("metrics", "http://"+addr+"/metrics"))
	select {
	case <-ctx.Done():
		s.health.beginStop()
		s.log.Info("stop requested: not ready from now on")
		return s.stopWorker(c.StopTimeout)
	case err := <-served:
		s.health.beginStop()
		return errors.Join(fmt.Errorf("metrics server: %w", err), s.stopWorker(c.StopTimeout))
	case <-s.engine.Done(): // stopped serving without a Stop: a fatal error
		err := s.engine.Err()
		if err == nil {
			err = errors.New("stopped serving without a Stop")
		}
		s.log.Error("engine stopped for good: exiting", slog.String("engine", c.Engine), slog.Any("err", err))
		return errors.Join(fmt.Errorf("%s engine stopped: %w", c.Engine, err), s.stopWorker(c.StopTimeout))
	}
}

func (s *Stack) stopWorker(bound time.Duration) error {
	s.log.Info("stopping: in-flight steps finish or are handed back", slog.Duration("bound", bound))
	ctx, cancel := context.WithTimeout(context.Background(), bound+5*time.Second)
	defer cancel()
	var cerr error
	if s.cleaner != nil {
		cerr = s.cleaner.Stop(ctx)
	}
	derr := errors.Join(cerr, s.dispatcher.Stop(ctx))
	s.dispatchWatch.setRunning(false)
	if err := errors.Join(derr, s.engine.Stop(ctx)); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	s.log.Info("stopped")
	return nil
}
