package handlers

import (
	crand "crypto/rand"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/taskport/taskport/port"
)

func Clean(f port.Flow, in map[string]int) error {
	keys := make([]string, 0, len(in))
	for k := range in { // want `range over a map`
		keys = append(keys, k)
	}
	sort.Strings(keys)
	_ = fmt.Sprintf("%v at %s", keys, f.Now()) // Sprintf is fine, f.Now is the deterministic clock
	return f.Sleep("nap", time.Second)         // time.Second is a constant, fine
}

func Clock(f port.Flow) {
	_ = time.Now()               // want `call to time.Now: wall clock`
	time.Sleep(time.Millisecond) // want `call to time.Sleep`
}

func Random(f port.Flow) int {
	b := make([]byte, 4)
	_, _ = crand.Read(b) // want `call to crypto/rand.Read: randomness`
	return rand.Intn(10) // want `call to math/rand.Intn: randomness`
}

func IO(f port.Flow) {
	_, _ = os.ReadFile("x")     // want `call to os.ReadFile`
	_, _ = http.Get("http://x") // want `call to net/http.Get`
	fmt.Println("hello")        // want `call to fmt.Println`
}

func Concurrency(f port.Flow) {
	ch := make(chan int, 1) // want `make\(chan\)`
	go func() {}()          // want `go statement`
	ch <- 1                 // want `channel send`
	<-ch                    // want `channel receive`
	select {                // want `select statement`
	default:
	}
}

// Indirect: the helper is reached through the handler, and the closure
// handler style (port.Handle(func(f port.Flow, ...))) is a root too.
func Indirect(f port.Flow) { helper() }

func helper() {
	_ = time.Now() // want `call to time.Now: wall clock \(use Flow.Now\) \(reachable from Indirect -> helper\)`
}

var Closure = func(f port.Flow, n int) error {
	time.Sleep(time.Duration(n)) // want `call to time.Sleep`
	return nil
}

// NotAHandler has no Flow parameter: its clock use is not reported.
func NotAHandler() time.Time { return time.Now() }

// Unwinding: the engines unwind a handler with a panic they recover
// themselves; a handler must neither catch it nor end the goroutine.
func Recovers(f port.Flow) (err error) {
	defer func() {
		if r := recover(); r != nil { // want `recover\(\): it would swallow the engine's unwinding`
			err = fmt.Errorf("recovered: %v", r)
		}
	}()
	return f.Sleep("nap", time.Second)
}

func Exits(f port.Flow) {
	runtime.Goexit() // want `call to runtime.Goexit: ends the engine's goroutine`
}

// A recover outside anything a handler reaches is not reported.
func NotAHandlerRecovers() {
	defer func() { _ = recover() }()
}
