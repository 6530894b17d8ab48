// Command taskport-dev is the local all-in-one behind `make run`, a
// development harness kept out of the production binary (cmd/taskport): it
// creates the database if needed and migrates it, starts (or reuses) a
// Temporal dev server with its UI, starts a private qbittorrent-nox, then
// runs the worker, the outbox dispatcher and the admin UI of cmd/taskport
// (the same wiring, cmd/internal/stack) and a demo acquisition to watch in
// the Temporal UI and in /admin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "taskport-dev:", err)
		os.Exit(1)
	}
}
