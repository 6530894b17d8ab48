package host_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/host"
	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/retention"
)

var (
	sendMail = port.DeclareActivity[string, bool]("acme.send_mail")
	welcome  = port.Definition{Kind: "acme.welcome", Version: 1, Retry: port.NetworkRetry(),
		Handler: port.Handle(func(f port.Flow, email string) error {
			_, err := sendMail.Run(f, "send", email)
			return err
		})}
)

// A team's own worker binary: its registry, the lease engine in the
// team's schema (the deploy applied migrations.UpEngine there), and the
// host with the same schema, serving the probes on :9090 until SIGTERM.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg := port.NewRegistry()
	if err := reg.Register(welcome); err != nil {
		log.Fatal(err)
	}
	if err := reg.RegisterActivity(port.Bind(sendMail, func(ctx context.Context, email string) (bool, error) {
		return true, nil // the mail provider's call
	})); err != nil {
		log.Fatal(err)
	}
	const schema = "acme"
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	h, err := host.New(host.Config{
		Pool: pool, Schema: schema, Engine: eng, Addr: ":9090",
		Retention: &retention.Policy{}, // package retention's defaults
		Logger:    slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
