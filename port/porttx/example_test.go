package porttx_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/port/porttx"
)

// placeOrder writes the order row and enqueues its fulfilment in one
// transaction: both commit or neither does, so no order waits for a run
// that was never recorded and no run ships an order that was rolled back.
// The order table is the caller's own, in the engine's database.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, eng porttx.Enqueuer, orderID string) (port.RunID, error) {
	var id port.RunID
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop_order (id, status) VALUES ($1, 'placed')`, orderID); err != nil {
			return fmt.Errorf("record order %s: %w", orderID, err)
		}
		var err error
		id, err = eng.EnqueueTx(ctx, tx, "shop.fulfil", orderID, port.EnqueueOptions{IdempotencyKey: "fulfil:" + orderID})
		return err
	})
	return id, err
}

// A caller enqueues in its own transaction through either engine: both
// leaseadapter.Engine and temporaladapter.Engine are porttx.Enqueuers. The
// run starts once the transaction commits and a worker of the engine serves
// (on Temporal, a serving worker starts its workflow).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg := port.NewRegistry()
	if err := reg.Register(fulfilKind); err != nil {
		log.Fatal(err)
	}
	eng, err := leaseadapter.New(pool, reg, leaseadapter.Config{Schema: "shop"})
	if err != nil {
		log.Fatal(err)
	}
	id, err := placeOrder(ctx, pool, eng, "A-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order A-1 placed; its fulfilment is run", id)
}

var fulfilKind = port.Definition{
	Kind: "shop.fulfil", Version: 1, Retry: port.NetworkRetry(),
	Handler: port.Handle(func(port.Flow, string) error { return nil }), // its steps are the shop's
}
