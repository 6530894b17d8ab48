// Command quickstart runs orders on taskport: a payment step that fails
// once and is retried, a wait for the warehouse's signal with a timeout, a
// typed result, and an order canceled while it waits.
//
//	DATABASE_URL=postgres://... go run . -engine lease
//	DATABASE_URL=postgres://... go run . -engine temporal   # and a Temporal server on TEMPORAL_ADDRESS
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/leaseadapter"
	"github.com/taskport/taskport/migrations"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
)

type Order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

type Charge struct {
	Amount  int `json:"amount"`
	Attempt int `json:"attempt"`
}

type Receipt struct {
	Charge  Charge `json:"charge"`
	Shipped bool   `json:"shipped"`
}

var charge = port.DeclareActivity[Order, Charge]("payment.charge")

var orderKind = port.Definition{
	Kind: "shop.order", Version: 1, Retry: port.NetworkRetry(),
	Handler: port.HandleResult(func(f port.Flow, o Order) (Receipt, error) {
		c, err := charge.Run(f, "charge", o)
		if err != nil {
			return Receipt{}, err
		}
		shipped, err := f.WaitSignal("shipped", port.Topic("shipped:"+o.ID), 5*time.Second, nil)
		return Receipt{Charge: c, Shipped: shipped}, err
	}),
}

// chargeCard fails each order's first attempt, as a flaky card network would.
func chargeCard(ctx context.Context, o Order) (Charge, error) {
	info, _ := port.StepInfoFrom(ctx)
	if info.Attempt == 1 {
		return Charge{}, errors.New("card network timeout")
	}
	return Charge{Amount: o.Total, Attempt: info.Attempt}, nil
}

const schema = "shop"

func main() {
	engine := flag.String("engine", "lease", "lease or temporal")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	check(err)
	check(migrations.UpEngine(ctx, pool, schema)) // the engine's tables alone, in a schema of their own

	reg := port.NewRegistry()
	check(reg.Register(orderKind))
	check(reg.RegisterActivity(port.Bind(charge, chargeCard)))
	var eng port.TaskEngine
	if *engine == "temporal" {
		c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{HostPort: os.Getenv("TEMPORAL_ADDRESS"), Namespace: "default"})
		check(err)
		defer c.Close()
		eng, err = temporaladapter.New(c, pool, reg, temporaladapter.Config{Schema: schema})
		check(err)
	} else {
		eng, err = leaseadapter.New(pool, reg, leaseadapter.Config{Schema: schema})
		check(err)
	}
	check(eng.Start(ctx, port.StartOptions{}))
	defer eng.Stop(ctx)

	enqueue := func(o Order) port.RunID {
		id, err := eng.Enqueue(ctx, orderKind.Kind, o, port.EnqueueOptions{IdempotencyKey: "order:" + o.ID})
		check(err)
		return id
	}
	shipped, late, canceled := enqueue(Order{ID: "A-1", Total: 42}), enqueue(Order{ID: "B-2", Total: 7}), enqueue(Order{ID: "C-3", Total: 9})
	_, err = eng.Signal(ctx, "shipped:A-1", nil) // kept until A-1 waits for it
	check(err)
	check(eng.Cancel(ctx, canceled, "customer changed their mind"))

	for _, id := range []port.RunID{shipped, late, canceled} {
		r, err := port.Result[Receipt](ctx, eng, id)
		if errors.Is(err, port.ErrCanceled) {
			fmt.Println("canceled")
			continue
		}
		check(err)
		fmt.Printf("charged %d on attempt %d, shipped: %t\n", r.Charge.Amount, r.Charge.Attempt, r.Shipped)
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
