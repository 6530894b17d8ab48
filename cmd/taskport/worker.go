package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/taskport/taskport/port"
)

func newWorkerCmd(g *globalConfig) *cobra.Command {
	var (
		c           stackConfig
		metricsAddr string
		dispatch    bool
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run steps on the chosen engine, and the outbox dispatcher",
		Long: "Runs the task kinds' steps on the chosen engine and, unless --dispatch=false, the outbox dispatcher " +
			"(several dispatchers at once are safe). Serves /metrics, /healthz and /readyz on --metrics-addr. " +
			"The schema must be migrated first (taskport migrate up): workers never migrate.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStack(cmd, g, &c, func(s *stack) error { return s.runWorker(cmd.Context(), c, metricsAddr, dispatch) })
		},
	}
	c.bind(cmd.Flags())
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", envOr("METRICS_ADDR", ":9090"), "address for /metrics, /healthz, /readyz (env METRICS_ADDR)")
	cmd.Flags().BoolVar(&dispatch, "dispatch", true, "also run the outbox dispatcher")
	return cmd
}

// runWorker starts the engine's worker and the dispatcher, serves health and
// metrics, and stops gracefully when ctx ends.
func (s *stack) runWorker(ctx context.Context, c stackConfig, metricsAddr string, dispatch bool) error {
	if err := s.engine.Start(ctx, port.StartOptions{Concurrency: c.Concurrency}); err != nil {
		return fmt.Errorf("start %s worker: %w", c.Engine, err)
	}
	if dispatch {
		if err := s.dispatcher.Start(ctx); err != nil {
			return fmt.Errorf("start dispatcher: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.bizPool.Ping(r.Context()); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	addr, served, err := listenAndServe(ctx, metricsAddr, mux)
	if err != nil {
		return err
	}
	s.log.Info("worker running", slog.String("engine", c.Engine), slog.String("metrics", "http://"+addr+"/metrics"))
	select {
	case <-ctx.Done():
	case err := <-served:
		s.log.Error("metrics server stopped", slog.Any("err", err))
	}
	return s.stopWorker(c.StopTimeout)
}

func (s *stack) stopWorker(bound time.Duration) error {
	s.log.Info("stopping: in-flight steps finish or are handed back", slog.Duration("bound", bound))
	s.dispatcher.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), bound+5*time.Second)
	defer cancel()
	if err := s.engine.Stop(ctx); err != nil {
		return fmt.Errorf("stop engine: %w", err)
	}
	return nil
}
